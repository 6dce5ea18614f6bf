//! Reaching the coordinator again after the control connection dropped: dial
//! with exponential backoff, authenticate, and register as the same process
//! (host, slot, pid) in the generation the worker is in, until
//! `--coordinator-timeout` runs out. The coordinator takes a registration
//! from its worker's own process as that worker coming back; one that
//! restarted and resumed the job from its store reattaches it.
//!
//! ```text
//!  lost ─► dial (50 ms, 100 ms, ... ≤ 1 s apart) ─► handshake ─► Register { generation }
//!            └─ not within the timeout, or the launching process gone ─► the worker exits
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use control::tls::ClientStream;
use control::{Registration, Secret, WorkerLink, WorkerMsg};
use futures::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use crate::control_link::Shared;
use crate::error::InitError;

/// First pause between attempts; each failure doubles it up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long one try may wait for the coordinator's side of the handshake
/// (a coordinator gives a connection 3 s to prove itself once it took it;
/// the rest is for its accepting under a storm of registrations).
const ATTEMPT_LIMIT: Duration = Duration::from_secs(10);
/// Why a try was given up for another coordinator.
const ELECTED: &str = "another coordinator was elected meanwhile";
/// How often a reconnecting worker looks whether its launcher still runs.
const LAUNCHER_POLL: Duration = Duration::from_millis(20);

/// How a worker opens a byte stream to its coordinator: TCP in a job, an
/// in-memory pipe in an in-process cluster.
pub trait Connect: Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Where it connects to, for messages.
    fn target(&self) -> String;
    /// A new stream to the coordinator.
    fn connect(&self) -> impl Future<Output = std::io::Result<Self::Stream>> + Send;
    /// The address this host reaches the coordinator from over `stream`,
    /// where the worker's data plane listens; `None` when it has none (an
    /// in-memory pipe).
    fn near(_stream: &Self::Stream) -> Option<std::net::IpAddr> {
        None
    }
    /// Whether the process that started this worker is gone (the job with
    /// it); `None` when there is none to watch.
    fn launcher_gone(&self) -> Option<bool> {
        None
    }
    /// Resolves once the coordinator last reached no longer leads the job
    /// (another was elected): the connection to it is dropped and the new
    /// one dialled. Never, where there is only one coordinator.
    fn superseded(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
}

/// The coordinator over TCP.
#[derive(Clone, Debug)]
pub struct Tcp {
    pub addr: SocketAddr,
    /// The process that started this worker (`elasticrun`, or the remote
    /// shell ssh runs), when it must outlive it: once it is gone, so is the
    /// job, and the worker stops trying at once.
    pub launcher: Option<u32>,
    /// TLS around the connection (a job on the QUIC data plane).
    pub tls: Option<control::tls::ControlConnector>,
}

impl Connect for Tcp {
    type Stream = ClientStream;

    fn target(&self) -> String {
        self.addr.to_string()
    }

    async fn connect(&self) -> std::io::Result<ClientStream> {
        control::tls::dial(self.addr, self.tls.as_ref()).await
    }

    fn near(stream: &ClientStream) -> Option<std::net::IpAddr> {
        control::tls::local_ip(stream)
    }

    /// Whether the launcher has exited (this process was handed to another
    /// parent).
    fn launcher_gone(&self) -> Option<bool> {
        self.launcher
            .map(|pid| std::os::unix::process::parent_id() != pid)
    }
}

/// How to reach the coordinator again, as whom, and for how long to try.
#[derive(Clone, Debug)]
pub struct Redial<C> {
    pub connect: C,
    pub secret: Secret,
    pub host: String,
    pub slot: u32,
    /// This worker's process id (its identity with `host` and `slot`).
    pub pid: u32,
    /// `--coordinator-timeout`.
    pub give_up_after: Duration,
}

/// Why the worker gave the coordinator up.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorGone {
    #[error(
        "could not reach it again at {at} within {after:?} ({attempts} attempts; last: {last})"
    )]
    Unreachable {
        at: String,
        after: Duration,
        attempts: u32,
        last: String,
    },
    /// The launcher that started this worker has exited: the job is over.
    #[error("the launcher that started this worker is gone")]
    Launcher,
}

impl<C: Connect> Redial<C> {
    /// A new, registered control connection, or [`CoordinatorGone`]. The
    /// launcher is watched all along (an attempt may hang on a port that
    /// another process took over), so its death ends the wait at once.
    pub async fn reconnect(
        &self,
        shared: &Shared,
    ) -> Result<WorkerLink<C::Stream>, CoordinatorGone> {
        tokio::select! {
            r = self.redial(shared) => r,
            () = self.launcher_exit() => Err(CoordinatorGone::Launcher),
        }
    }

    /// Resolves once the launcher is gone (never without one).
    async fn launcher_exit(&self) {
        if self.connect.launcher_gone().is_none() {
            return std::future::pending().await;
        }
        while self.connect.launcher_gone() != Some(true) {
            tokio::time::sleep(LAUNCHER_POLL).await;
        }
    }

    async fn redial(&self, shared: &Shared) -> Result<WorkerLink<C::Stream>, CoordinatorGone> {
        let deadline = Instant::now() + self.give_up_after;
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let last = match tokio::time::timeout_at(deadline, self.attempt(shared, deadline)).await
            {
                Ok(Ok(link)) => {
                    tracing::info!(attempts, "reconnected to the coordinator");
                    return Ok(link);
                }
                Ok(Err(why)) => why,
                Err(_) => "timed out".to_owned(),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CoordinatorGone::Unreachable {
                    at: self.connect.target(),
                    after: self.give_up_after,
                    attempts,
                    last,
                });
            }
            tracing::debug!(%last, ?backoff, "coordinator not back yet");
            // The last pause is cut short so that one attempt falls at the deadline.
            tokio::time::sleep(backoff.min(left)).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// The first control connection, authenticated: dialled again with
    /// backoff while the coordinator is not up yet, until `deadline`; a
    /// handshake that fails (a wrong secret) is final, one cut short by the
    /// election of another coordinator is tried again with that one (see
    /// [`Redial::attempt`]). Registering is the caller's, once it has an
    /// address to publish ([`Redial::register`]).
    pub(crate) async fn open(&self, deadline: Instant) -> Result<WorkerLink<C::Stream>, InitError> {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let stream = self.dial(deadline, &mut backoff).await?;
            let left = deadline.saturating_duration_since(Instant::now());
            let handshake = control::connect(stream, &self.secret, left);
            if let Some(r) = self.unless_superseded(handshake).await {
                return Ok(r?);
            }
            tracing::debug!(at = %self.connect.target(), "{ELECTED}");
        }
    }

    /// `work` on a connection just made, unless another coordinator is
    /// elected first (`None`): a connection made to a coordinator while it
    /// died may be left open by the kernel with no one behind it.
    async fn unless_superseded<T>(&self, work: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = work => Some(r),
            () = self.connect.superseded() => None,
        }
    }

    /// A stream to the coordinator, dialled with backoff until `deadline`.
    async fn dial(
        &self,
        deadline: Instant,
        backoff: &mut Duration,
    ) -> Result<C::Stream, InitError> {
        loop {
            match tokio::time::timeout_at(deadline, self.connect.connect()).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) if Instant::now() + *backoff < deadline => {
                    tracing::debug!(at = %self.connect.target(), %e, "coordinator not reachable yet");
                    tokio::time::sleep(*backoff).await;
                    *backoff = (*backoff * 2).min(MAX_BACKOFF);
                }
                _ => {
                    return Err(InitError::Unreachable {
                        at: self.connect.target(),
                    });
                }
            }
        }
    }

    /// One try: connect, authenticate within 10 s (`ATTEMPT_LIMIT`, and
    /// `deadline`), and register as this worker in its generation with its
    /// data-plane address; given up as soon as another coordinator is
    /// elected (`unless_superseded`), rather than held until the
    /// limit.
    pub async fn attempt(
        &self,
        shared: &Shared,
        deadline: Instant,
    ) -> Result<WorkerLink<C::Stream>, String> {
        let stream = self.connect.connect().await.map_err(|e| e.to_string())?;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .min(ATTEMPT_LIMIT);
        let registered = async {
            let mut link = control::connect(stream, &self.secret, left)
                .await
                .map_err(|e| e.to_string())?;
            self.register(&mut link, shared).await?;
            Ok(link)
        };
        (self.unless_superseded(registered).await).unwrap_or_else(|| Err(ELECTED.to_owned()))
    }

    /// Registers on `link` as this worker, in the generation `shared` says,
    /// with the data-plane address it holds.
    pub(crate) async fn register(
        &self,
        link: &mut WorkerLink<C::Stream>,
        shared: &Shared,
    ) -> Result<(), String> {
        let data_addr = shared
            .data_addr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or("no data-plane address yet")?;
        let registration = Registration {
            host: self.host.clone(),
            slot: self.slot,
            pid: self.pid,
            data_addr,
            generation: control::Generation(shared.generation.load(Ordering::SeqCst)),
        };
        link.send(WorkerMsg::Register(registration))
            .await
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::sync::Arc;

    use control::{CoordinatorMsg, PeerAddress, PendingReport};
    use futures::StreamExt;
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;
    use crate::control_link::run;
    use tokio::net::TcpStream;

    const LIMIT: Duration = Duration::from_secs(10);

    /// A worker in generation 7 with data-plane address 127.0.0.1:4321, as
    /// host `h` slot 2, that redials `addr` with `secret`.
    fn worker_in_generation_7(
        addr: std::net::SocketAddr,
        secret: &Secret,
        give_up_after: Duration,
    ) -> (Shared, Redial<Tcp>) {
        let shared = Shared::default();
        shared.generation.store(7, Ordering::SeqCst);
        *shared.data_addr.lock().unwrap() = Some(own_address());
        let redial = Redial {
            connect: Tcp {
                addr,
                launcher: None,
                tls: None,
            },
            secret: secret.clone(),
            host: "h".into(),
            slot: 2,
            pid: std::process::id(),
            give_up_after,
        };
        (shared, redial)
    }

    fn own_address() -> PeerAddress {
        PeerAddress::tcp("127.0.0.1:4321".parse().unwrap())
    }

    /// A worker's control task connected to a stand-in coordinator on
    /// loopback: the listener, the coordinator's end of the first
    /// connection, the secret, the task, and what the worker sends through.
    struct Started {
        listener: TcpListener,
        first: control::CoordinatorLink<TcpStream>,
        secret: Secret,
        task: tokio::task::JoinHandle<String>,
        control: crate::control_link::Control,
    }

    async fn started(give_up_after: Duration) -> Started {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = Secret::generate().unwrap();
        let (worker_end, coordinator_end) = tokio::join!(
            async {
                let s = control::tls::dial(addr, None).await.unwrap();
                control::connect(s, &secret, LIMIT).await
            },
            async { control::accept(listener.accept().await.unwrap().0, &secret, LIMIT).await },
        );
        let (shared, redial) = worker_in_generation_7(addr, &secret, give_up_after);
        let shared = Arc::new(shared);
        let (out, out_rx) = mpsc::channel(4);
        let (placements_tx, placements) = mpsc::channel(4);
        let task_shared = shared.clone();
        let task = tokio::spawn(async move {
            run(
                worker_end.unwrap(),
                task_shared,
                out_rx,
                placements_tx,
                redial,
                (),
            )
            .await
        });
        let control = crate::control_link::Control {
            shared,
            out,
            placements,
        };
        Started {
            listener,
            first: coordinator_end.unwrap(),
            secret,
            task,
            control,
        }
    }

    /// The next connection the worker makes to `listener`, and its first
    /// message.
    async fn next_connection(
        listener: &TcpListener,
        secret: &Secret,
    ) -> (control::CoordinatorLink<TcpStream>, WorkerMsg) {
        let again = async {
            let (s, _) = listener.accept().await.unwrap();
            let mut link = control::accept(s, secret, LIMIT).await.unwrap();
            let first = link.next().await.unwrap().unwrap();
            (link, first)
        };
        tokio::time::timeout(LIMIT, again)
            .await
            .expect("the worker did not come back within 10 s")
    }

    #[tokio::test]
    async fn a_dropped_connection_is_redialled_and_the_task_carries_on() {
        let Started {
            listener,
            first,
            secret,
            task,
            control: _control,
        } = started(LIMIT).await;
        drop(first);
        let (mut link, registration) = next_connection(&listener, &secret).await;
        let WorkerMsg::Register(r) = registration else {
            panic!("expected a registration, got {registration:?}");
        };
        assert_eq!(
            (r.host.as_str(), r.slot, r.pid, r.generation),
            ("h", 2, std::process::id(), control::Generation(7))
        );
        link.send(CoordinatorMsg::Stop {
            reason: "done".into(),
        })
        .await
        .unwrap();
        let why = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
        assert_eq!(why, "stopped by the coordinator: done");
    }

    #[tokio::test]
    async fn it_registers_as_the_same_process_in_its_generation() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let secret = Secret::generate().unwrap();
        let (shared, redial) = worker_in_generation_7(addr, &secret, LIMIT);
        let coordinator = async {
            let mut link = control::accept(listener.accept().await.unwrap().0, &secret, LIMIT)
                .await
                .unwrap();
            let first = link.next().await.unwrap().unwrap();
            (link, first)
        };
        let (worker, (mut link, first)) = tokio::join!(redial.reconnect(&shared), coordinator);
        let mut worker = worker.unwrap();
        let expected = Registration {
            host: "h".into(),
            slot: 2,
            pid: std::process::id(),
            data_addr: own_address(),
            generation: control::Generation(7),
        };
        assert_eq!(first, WorkerMsg::Register(expected));
        // The new connection carries the conversation on.
        link.send(CoordinatorMsg::Stop { reason: "x".into() })
            .await
            .unwrap();
        let got = worker.next().await.unwrap().unwrap();
        assert_eq!(got, CoordinatorMsg::Stop { reason: "x".into() });
        let hb = WorkerMsg::Heartbeat {
            generation: control::Generation(7),
            steps: 0,
            collective_bytes: 0,
            collective_wait: std::time::Duration::ZERO,
            pending: PendingReport::default(),
        };
        worker.send(hb.clone()).await.unwrap();
        assert_eq!(link.next().await.unwrap().unwrap(), hb);
    }

    #[tokio::test]
    async fn a_coordinator_that_stays_away_ends_the_worker_after_the_timeout() {
        let Started {
            listener,
            first,
            task,
            control: _control,
            ..
        } = started(Duration::from_millis(300)).await;
        drop(listener);
        drop(first);
        let started = std::time::Instant::now();
        let why = tokio::time::timeout(LIMIT, task)
            .await
            .expect("the worker kept trying past its timeout")
            .unwrap();
        assert!(
            why.contains("lost the coordinator (connection closed)")
                && why.contains("could not reach it again at")
                && why.contains("300ms"),
            "{why}"
        );
        // It did try until its timeout (a hang guard aside, no upper bound).
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn stop_from_the_coordinator_ends_the_task_with_its_reason() {
        let Started {
            mut first,
            task,
            control: _control,
            ..
        } = started(LIMIT).await;
        first
            .send(CoordinatorMsg::Stop {
                reason: "the job is stopping".into(),
            })
            .await
            .unwrap();
        let why = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
        assert_eq!(why, "stopped by the coordinator: the job is stopping");
    }

    #[tokio::test]
    async fn a_worker_whose_launcher_is_gone_stops_trying_at_once() {
        let redial = Redial {
            connect: Tcp {
                // Nothing listens there; the launcher check comes first anyway.
                addr: "127.0.0.1:9".parse().unwrap(),
                // Not this process's parent: as if the launcher had exited.
                launcher: Some(std::os::unix::process::parent_id().wrapping_add(1)),
                tls: None,
            },
            secret: Secret::generate().unwrap(),
            host: "h".into(),
            slot: 0,
            pid: std::process::id(),
            give_up_after: Duration::from_secs(3600),
        };
        let e = tokio::time::timeout(LIMIT, redial.reconnect(&Shared::default()))
            .await
            .expect("it kept trying")
            .unwrap_err();
        assert!(matches!(e, CoordinatorGone::Launcher), "{e}");
    }

    /// A coordinator that dies holding the worker's `Rejoin` is asked again
    /// by its successor's first connection: it may have taken the job over
    /// from the store without ever seeing the question.
    #[tokio::test]
    async fn an_unanswered_rejoin_is_asked_again_after_a_reconnection() {
        let Started {
            listener,
            mut first,
            secret,
            task,
            mut control,
        } = started(LIMIT).await;
        let wanted = control::Generation(8);
        let asking = tokio::spawn(async move {
            let got = crate::rejoin::ask_to_rejoin(&mut control, 8, own_address(), LIMIT).await;
            (got, control)
        });
        let rejoin = WorkerMsg::Rejoin {
            generation: wanted,
            data_addr: own_address(),
        };
        let asked = tokio::time::timeout(LIMIT, async {
            loop {
                match first.next().await.unwrap().unwrap() {
                    WorkerMsg::Heartbeat { .. } => continue,
                    m => break m,
                }
            }
        })
        .await
        .expect("no Rejoin within 10 s");
        assert_eq!(asked, rejoin);
        // The coordinator dies holding it; its successor hears it again
        // right after the registration.
        drop(first);
        let (mut link, registration) = next_connection(&listener, &secret).await;
        assert!(
            matches!(registration, WorkerMsg::Register(_)),
            "{registration:?}"
        );
        let again = tokio::time::timeout(LIMIT, link.next())
            .await
            .expect("the Rejoin was not asked again within 10 s")
            .unwrap()
            .unwrap();
        assert_eq!(again, rejoin);
        // Answered, it is not asked a third time.
        let a = control_assignment(wanted);
        link.send(CoordinatorMsg::Assign(a.clone())).await.unwrap();
        let (got, control) = tokio::time::timeout(LIMIT, asking).await.unwrap().unwrap();
        assert_eq!(got.unwrap(), a);
        assert!(control.shared.asking.lock().unwrap().is_none());
        drop(link);
        let (mut link, registration) = next_connection(&listener, &secret).await;
        assert!(
            matches!(registration, WorkerMsg::Register(_)),
            "{registration:?}"
        );
        link.send(CoordinatorMsg::Stop {
            reason: "done".into(),
        })
        .await
        .unwrap();
        // Whatever came between the registration and the Stop was no Rejoin.
        let why = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
        assert_eq!(why, "stopped by the coordinator: done");
        while let Ok(Some(Ok(m))) =
            tokio::time::timeout(Duration::from_millis(1), link.next()).await
        {
            assert!(matches!(m, WorkerMsg::Heartbeat { .. }), "{m:?}");
        }
    }

    /// A coordinator elected in etcd: the leader of the moment `(epoch,
    /// address)`, and the epoch last dialled (what `superseded` compares).
    struct Elected {
        leader: tokio::sync::watch::Receiver<(i64, std::net::SocketAddr)>,
        dialled: Arc<std::sync::atomic::AtomicI64>,
    }

    impl Connect for Elected {
        type Stream = TcpStream;

        fn target(&self) -> String {
            self.leader.borrow().1.to_string()
        }

        async fn connect(&self) -> std::io::Result<TcpStream> {
            let (epoch, addr) = *self.leader.borrow();
            let s = TcpStream::connect(addr).await?;
            self.dialled.store(epoch, Ordering::SeqCst);
            Ok(s)
        }

        fn superseded(&self) -> impl std::future::Future<Output = ()> + Send {
            let (mut rx, dialled) = (self.leader.clone(), self.dialled.clone());
            async move {
                let _ = rx
                    .wait_for(|(e, _)| *e > dialled.load(Ordering::SeqCst))
                    .await;
            }
        }
    }

    /// The coordinators of a worker in generation 7: its leader (epoch 1)
    /// is `silent`, a port that takes connections and never speaks (a
    /// dying leader's); `next` is the coordinator `elect` can name instead.
    struct Leaders {
        silent: TcpListener,
        next: TcpListener,
        secret: Secret,
        elect: tokio::sync::watch::Sender<(i64, std::net::SocketAddr)>,
    }

    impl Leaders {
        /// Waits for the worker to dial the silent leader, then elects
        /// `next`; the connection to the silent one is held open.
        async fn dialled_then_superseded(&self) -> TcpStream {
            let held = tokio::time::timeout(LIMIT, self.silent.accept()).await;
            let (held, _) = held
                .expect("the worker did not dial the old leader")
                .unwrap();
            self.elect
                .send_replace((2, self.next.local_addr().unwrap()));
            held
        }
    }

    /// A worker in generation 7 whose leader is [`Leaders`]'s silent one.
    async fn elected_worker() -> (Leaders, Shared, Redial<Elected>) {
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let next = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let secret = Secret::generate().unwrap();
        let (elect, leader) = tokio::sync::watch::channel((1, silent.local_addr().unwrap()));
        let (shared, tcp) = worker_in_generation_7(silent.local_addr().unwrap(), &secret, LIMIT);
        let redial = Redial {
            connect: Elected {
                leader,
                dialled: Arc::default(),
            },
            secret: tcp.secret,
            host: tcp.host,
            slot: tcp.slot,
            pid: tcp.pid,
            give_up_after: Duration::from_secs(60),
        };
        let leaders = Leaders {
            silent,
            next,
            secret,
            elect,
        };
        (leaders, shared, redial)
    }

    #[tokio::test]
    async fn a_try_at_a_silent_coordinator_ends_when_another_is_elected() {
        let (leaders, shared, redial) = elected_worker().await;
        let worker = tokio::spawn(async move { redial.reconnect(&shared).await.map(drop) });
        let _held = leaders.dialled_then_superseded().await;
        // Well within one try's limit: the election ended the try, not time.
        let within = ATTEMPT_LIMIT / 2;
        let next = next_connection(&leaders.next, &leaders.secret);
        let again = tokio::time::timeout(within, next).await;
        let (_link, first) = again.expect("the worker stayed with the silent coordinator");
        assert!(matches!(first, WorkerMsg::Register(_)), "{first:?}");
        let done = tokio::time::timeout(LIMIT, worker).await.unwrap().unwrap();
        assert!(done.is_ok(), "{done:?}");
    }

    #[tokio::test]
    async fn a_first_handshake_with_a_silent_coordinator_ends_when_another_is_elected() {
        let (leaders, _, redial) = elected_worker().await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let worker = tokio::spawn(async move { redial.open(deadline).await.map(drop) });
        let _held = leaders.dialled_then_superseded().await;
        let accepted = async {
            let (s, _) = leaders.next.accept().await.unwrap();
            control::accept(s, &leaders.secret, LIMIT).await
        };
        let link = tokio::time::timeout(LIMIT, accepted).await;
        let _link = link
            .expect("the worker stayed with the silent coordinator")
            .unwrap();
        let opened = tokio::time::timeout(LIMIT, worker).await.unwrap().unwrap();
        assert!(opened.is_ok(), "{opened:?}");
    }

    /// A one-rank assignment to `generation`.
    fn control_assignment(generation: control::Generation) -> control::Assignment {
        control::Assignment {
            generation,
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            cross_rank: 0,
            cross_size: 1,
            peers: vec![own_address()].into(),
            hosts: vec![0].into(),
            data_token: 1,
            knobs: control::Knobs::default(),
            tls: None,
        }
    }
}
