//! The load generator's simulated workers: each a task holding one real
//! control connection to the coordinator over loopback TCP, speaking the
//! protocol as a worker of an elastic job does: the job's challenge and
//! proof, `Register`, a `Heartbeat` a second with its step count, `Running`
//! on each assignment, `Rejoin` on `Reset` and `HostsUpdated`, `Finished`
//! at the end. It has no data plane: the coordinator only hands out its
//! address.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use control::{
    CoordinatorMsg, Generation, PeerAddress, PeerTable, PendingReport, Registration, Secret,
    WorkerMsg,
};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::stats::Stats;

/// How long a worker keeps dialling a coordinator that refuses or drops
/// its connection attempts (a full backlog), and waits for its handshake.
const DIAL_FOR: Duration = Duration::from_secs(60);
const HANDSHAKE_FOR: Duration = Duration::from_secs(30);
/// How often a pod's try looks whether another leader was elected.
const LEADER_POLL: Duration = Duration::from_millis(50);
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Raw wait statuses, as the coordinator's launcher reads them.
pub(crate) const EXIT_0: i32 = 0;
pub(crate) const EXIT_1: i32 = 1 << 8;
pub(crate) const SIGTERM: i32 = 15;
pub(crate) const SIGKILL: i32 = 9;

/// What the load generator tells a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// End as a SIGTERM would.
    Term,
    /// End as a SIGKILL would: the connection drops, nothing said.
    Kill,
    /// Say `Finished` and end with exit 0.
    Finish,
}

/// Who a worker is and whom it dials.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub(crate) id: u32,
    pub(crate) host: String,
    pub(crate) slot: u32,
    pub(crate) coordinator: Reach,
    pub(crate) secret: Arc<Secret>,
}

/// Where a worker finds its coordinator.
#[derive(Clone, Debug)]
pub(crate) enum Reach {
    /// At one address, for good: a lost connection ends the worker.
    At(SocketAddr),
    /// Wherever the job's leader is now (a pod of etcd mode): a lost
    /// connection is dialled again, to the leader of the moment, and the
    /// worker registers again in its generation.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Leader(Arc<dyn Leader>),
}

/// The address of the coordinator that leads now, if one does.
pub(crate) trait Leader: Send + Sync + std::fmt::Debug {
    fn addr(&self) -> Option<SocketAddr>;
}

impl Reach {
    fn addr(&self) -> Option<SocketAddr> {
        match self {
            Reach::At(a) => Some(*a),
            Reach::Leader(l) => l.addr(),
        }
    }
}

/// The live workers' command channels.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    live: Mutex<HashMap<u32, mpsc::UnboundedSender<Command>>>,
}

impl Roster {
    pub(crate) fn add(&self, id: u32) -> mpsc::UnboundedReceiver<Command> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(id, tx);
        rx
    }

    pub(crate) fn remove(&self, id: u32) {
        self.lock().remove(&id);
    }

    /// Tells worker `id`, if it still runs; whether it did.
    pub(crate) fn tell(&self, id: u32, command: Command) -> bool {
        self.lock()
            .get(&id)
            .is_some_and(|tx| tx.send(command).is_ok())
    }

    /// Tells every live worker; how many.
    pub(crate) fn tell_all(&self, command: Command) -> usize {
        self.lock()
            .values()
            .filter(|tx| tx.send(command).is_ok())
            .count()
    }

    pub(crate) fn ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.lock().keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, mpsc::UnboundedSender<Command>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs worker `who` until it ends; its raw wait status.
pub(crate) async fn run(
    who: Identity,
    stats: Arc<Stats>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) -> i32 {
    let mut me = Life {
        data_addr: data_address(who.id),
        generation: 0,
        steps: 0,
        placed: false,
        rejoining: false,
    };
    let mut again = false;
    loop {
        let stream = tokio::select! {
            s = dial(&who, &stats) => s,
            c = commands.recv() => return ended_by(c),
        };
        let link = match stream {
            Ok(link) => link,
            Err(why) => {
                stats.failed(format!(
                    "worker {} ({}:{}): {why}",
                    who.id, who.host, who.slot
                ));
                return EXIT_1;
            }
        };
        match session(&who, &stats, &mut me, link, &mut commands, again).await {
            Some(status) => return status,
            // The coordinator went away: a pod follows the next leader.
            None if matches!(who.coordinator, Reach::Leader(_)) => again = true,
            None => return EXIT_1,
        }
    }
}

/// One connection's life: registers (`again`: in its generation, to a new
/// leader) and speaks until the worker ends (`Some`, its status) or the
/// connection is lost (`None`).
async fn session(
    who: &Identity,
    stats: &Stats,
    me: &mut Life,
    mut link: Link,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    again: bool,
) -> Option<i32> {
    let register = WorkerMsg::Register(Registration {
        host: who.host.clone(),
        slot: who.slot,
        pid: who.id,
        data_addr: me.data_addr.clone(),
        generation: Generation(me.generation),
    });
    link.send(register).await.ok()?;
    if again {
        stats.reattached();
    } else {
        stats.registered();
    }
    // Heartbeats spread over the second, as workers started apart are.
    let phase = Duration::from_millis(u64::from(who.id.wrapping_mul(7919) % 1000));
    let mut beat = tokio::time::interval_at(Instant::now() + phase, HEARTBEAT);
    loop {
        let says = tokio::select! {
            c = commands.recv() => {
                if c == Some(Command::Finish) {
                    let _ = link.send(WorkerMsg::Finished).await;
                    let _ = link.close().await;
                }
                return Some(ended_by(c));
            }
            msg = link.next() => match msg {
                Some(Ok(msg)) => match me.hear(msg, stats) {
                    Heard::Say(says) => says,
                    Heard::Nothing => continue,
                    Heard::End(status) => return Some(status),
                },
                // The coordinator closed the connection or sent garbage.
                _ => return None,
            },
            _ = beat.tick() => vec![me.heartbeat()],
        };
        for say in says {
            link.send(say).await.ok()?;
        }
    }
}

fn ended_by(command: Option<Command>) -> i32 {
    match command {
        Some(Command::Finish) => EXIT_0,
        Some(Command::Term) => SIGTERM,
        Some(Command::Kill) | None => SIGKILL,
    }
}

/// A simulated worker's place and progress.
struct Life {
    data_addr: PeerAddress,
    generation: u64,
    steps: u64,
    /// Whether it has trained in a generation yet.
    placed: bool,
    /// Whether it asked to rejoin and waits for its assignment.
    rejoining: bool,
}

enum Heard {
    Say(Vec<WorkerMsg>),
    Nothing,
    End(i32),
}

impl Life {
    fn hear(&mut self, msg: CoordinatorMsg, stats: &Stats) -> Heard {
        match msg {
            CoordinatorMsg::Assign(a) if a.generation.0 > self.generation => {
                stats.assigned(a.generation.0, self.placed);
                self.generation = a.generation.0;
                if std::mem::take(&mut self.rejoining) {
                    stats.rejoining(false);
                }
                let reached = self.placed.then_some(self.steps);
                self.placed = true;
                let mut says = vec![WorkerMsg::Running {
                    generation: a.generation,
                    step: self.steps,
                    reached,
                }];
                // A partial table: the peer half the world away is looked
                // up, as a collective that first reaches it would.
                if matches!(a.peers, PeerTable::Some(_)) {
                    let far = (a.rank + a.size / 2) % a.size.max(1);
                    stats.looking_up();
                    says.push(WorkerMsg::Lookup {
                        id: a.rank,
                        generation: a.generation,
                        ranks: vec![far],
                    });
                }
                Heard::Say(says)
            }
            CoordinatorMsg::Addresses { entries, .. } => {
                stats.looked_up(!entries.is_empty());
                Heard::Nothing
            }
            CoordinatorMsg::Reset { .. } | CoordinatorMsg::HostsUpdated { .. }
                if !self.rejoining =>
            {
                self.rejoining = true;
                stats.rejoining(true);
                Heard::Say(vec![WorkerMsg::Rejoin {
                    generation: Generation(self.generation + 1),
                    data_addr: self.data_addr.clone(),
                }])
            }
            CoordinatorMsg::Stop { reason } => {
                stats.failed(format!("stopped: {reason}"));
                Heard::End(EXIT_1)
            }
            CoordinatorMsg::Leave { .. } => Heard::End(EXIT_0),
            _ => Heard::Nothing,
        }
    }

    fn heartbeat(&mut self) -> WorkerMsg {
        if self.placed {
            self.steps += 1;
        }
        WorkerMsg::Heartbeat {
            generation: Generation(self.generation),
            steps: self.steps,
            collective_bytes: 0,
            collective_wait: Duration::ZERO,
            pending: PendingReport::default(),
        }
    }
}

/// A data-plane address for worker `id`, distinct from every other's (the
/// coordinator only passes it on).
fn data_address(id: u32) -> PeerAddress {
    let [_, a, b, c] = id.to_be_bytes();
    let ip = std::net::Ipv4Addr::new(127, a.max(1), b, c);
    PeerAddress::tcp(SocketAddr::from((ip, 29_500)))
}

type Link = control::WorkerLink<Counted>;

/// Dials the coordinator until it answers, then proves the job's key; a
/// pod tries again, at whoever leads then, when the handshake fails too (a
/// replica that stops leading, or stands by, drops its connections).
async fn dial(who: &Identity, stats: &Stats) -> Result<Link, String> {
    let deadline = Instant::now() + DIAL_FOR;
    let mut pause = Duration::from_millis(20);
    loop {
        let stream = connected(who, deadline, &mut pause).await?;
        // Where this stream goes (the leader may have changed since).
        let dialled = stream.peer_addr().ok();
        let counted = Counted {
            inner: stream,
            bytes: stats.bytes_in(),
        };
        // As a worker pod's runtime does (worker/src/reconnect.rs): a try
        // ends when another leader is elected, since a connection made to a
        // leader while it died may be left open with no one behind it.
        let handshake = tokio::select! {
            h = control::connect(counted, &who.secret, HANDSHAKE_FOR) => h.map_err(|e| e.to_string()),
            () = moved(who, dialled) => Err("another leader was elected meanwhile".to_owned()),
        };
        match handshake {
            Ok(link) => return Ok(link),
            Err(e)
                if matches!(who.coordinator, Reach::Leader(_))
                    && Instant::now() + pause < deadline =>
            {
                tracing::debug!(id = who.id, error = %e, "the handshake failed; dialling the leader again");
                back_off(&mut pause).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Resolves once the leader is no longer at `dialled` (never for a worker
/// with one coordinator).
async fn moved(who: &Identity, dialled: Option<SocketAddr>) {
    if matches!(who.coordinator, Reach::At(_)) {
        return std::future::pending().await;
    }
    while who.coordinator.addr() == dialled {
        tokio::time::sleep(LEADER_POLL).await;
    }
}

/// A TCP connection to the coordinator, dialled until it answers.
async fn connected(
    who: &Identity,
    deadline: Instant,
    pause: &mut Duration,
) -> Result<TcpStream, String> {
    loop {
        let Some(addr) = who.coordinator.addr() else {
            if Instant::now() + *pause >= deadline {
                return Err(format!("no coordinator led the job in {DIAL_FOR:?}"));
            }
            tokio::time::sleep(*pause).await;
            continue;
        };
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) if Instant::now() + *pause < deadline => {
                tracing::debug!(id = who.id, error = %e, "dialling the coordinator again");
                back_off(pause).await;
            }
            Ok(Err(e)) => return Err(format!("cannot reach the coordinator: {e}")),
            Err(_) => return Err(format!("no connection to the coordinator in {DIAL_FOR:?}")),
        }
    }
}

/// Waits `pause`, then doubles it (up to 500 ms) for the next try.
async fn back_off(pause: &mut Duration) {
    tokio::time::sleep(*pause).await;
    *pause = (*pause * 2).min(Duration::from_millis(500));
}

/// A TCP stream that counts the bytes it reads: what the coordinator sent.
pub(crate) struct Counted {
    inner: TcpStream,
    bytes: Arc<AtomicU64>,
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        this.bytes.fetch_add(read as u64, Ordering::Relaxed);
        poll
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
