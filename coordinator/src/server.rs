//! Where the coordinator's workers arrive: every control connection is
//! authenticated and its registration read before the job driver takes it
//! from [`Arrivals`]. A job listens on TCP ([`Server`]); an in-process
//! cluster hands the driver in-memory pipes ([`in_memory`], [`MemDialer`]),
//! which go through the same handshake and codec.
//!
//! ```text
//!  TCP listener ─┐
//!                ├─(authenticated, registered)──> Arrival ──> Arrivals ──> job driver
//!  MemDialer ────┘   garbage / wrong secret: that connection closes, nothing else
//! ```
//!
//! Connections are taken from the kernel's backlog as fast as they come,
//! by a thread of their own (the runtime's one thread may be busy with
//! thousands of handshakes and links), so that thousands of workers
//! dialling at once are not dropped from a full backlog and retried a
//! second or more later. At most [`HANDSHAKES`] are in their handshake at
//! once (more wait in the listen backlog), each with [`PROOF_TIMEOUT`] to
//! prove it knows the secret, so that a flood of silent or foreign
//! connections cannot hold the door shut for long; refusals are logged a
//! few per window with a count of the rest ([`control::Throttle`]).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use control::tls::ControlAcceptor;
use control::{CoordinatorLink, Registration, Say, Secret, Throttle, WorkerMsg};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::{TcpSocket, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// How long one connection may take to authenticate and register.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new TCP connection has to prove that it knows the secret (two
/// round trips): short, since until then it holds one of the [`HANDSHAKES`].
pub const PROOF_TIMEOUT: Duration = Duration::from_secs(3);
/// How many TCP connections may be in their handshake at once: more than
/// a job of 10,000 workers opens when they all start together (each in
/// handshake holds a socket, a task and its frame buffer, a few KiB).
/// With 256, 10,000 connections at once overflowed the backlog behind
/// them by thousands, each dropped one dialled again a second later.
pub const HANDSHAKES: usize = 16_384;
/// The control listener's backlog: Linux's default cap (`somaxconn`), so
/// that thousands of workers starting at once wait in it rather than have
/// their connections dropped (and retried after 1, 3, 7, 15 s).
const BACKLOG: u32 = 4096;
/// Refused connections said per [`REFUSALS_WINDOW`]; the rest are counted.
const REFUSALS_SAID: u32 = 5;
const REFUSALS_WINDOW: Duration = Duration::from_secs(10);
static REFUSALS: Mutex<Throttle> = Mutex::new(Throttle::new(REFUSALS_WINDOW, REFUSALS_SAID));
/// The accepting thread's stack: it holds nothing but a few handles.
const ACCEPT_STACK: usize = 64 << 10;
/// How many arrivals may wait for the driver.
const ARRIVALS: usize = 1024;

/// The channel arrivals wait in, each in a box of its own. A channel's
/// values lie in blocks of 32 that live as long as it does; an [`Arrival`]
/// is over 500 bytes, so a block of them would span five pages, each made
/// resident only as arrivals reach it (one a replacement): the coordinator's
/// memory would rise with the job's resets for the first sixty of them.
/// Boxed, a block is 288 bytes and each arrival a short-lived allocation.
type ArrivalTx = mpsc::Sender<Box<Arrival>>;

/// Bytes an in-memory control connection buffers each way.
const PIPE_BYTES: usize = 64 << 10;

/// The byte stream under a control connection: TCP in a job, an in-memory
/// pipe in an in-process cluster.
pub trait ControlStream: AsyncRead + AsyncWrite + Send + Unpin + std::fmt::Debug {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + std::fmt::Debug> ControlStream for T {}

/// A worker's authenticated control connection.
pub type Link = CoordinatorLink<Box<dyn ControlStream>>;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen for workers: {0}")]
    Listen(std::io::Error),
}

/// A worker that reached the rendezvous loop: authenticated and registered.
#[derive(Debug)]
pub struct Arrival {
    pub registration: Registration,
    pub link: Link,
}

/// The authenticated, registered workers, in arrival order; dropping this
/// stops whatever accepts their connections.
#[derive(Debug)]
pub struct Arrivals {
    rx: mpsc::Receiver<Box<Arrival>>,
    /// The TCP listener, if any, closed when these are dropped (held for
    /// its `Drop`).
    _door: Option<Closer>,
}

/// The TCP listener as its accepting thread and [`Arrivals`] share it.
#[derive(Debug)]
struct Door {
    listener: std::net::TcpListener,
    /// The handshakes' slots, closed with the door.
    handshakes: Arc<Semaphore>,
}

/// Closes the door: the accepting thread, waiting for a handshake's slot
/// or in accept(2), wakes and ends (a listening socket shut down fails
/// accept with `EINVAL`), and new connections are refused.
#[derive(Debug)]
struct Closer(Arc<Door>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.handshakes.close();
        let fd = self.0.listener.as_raw_fd();
        let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Both);
    }
}

impl Arrivals {
    /// The next authenticated, registered worker; `None` once nothing can
    /// arrive any more.
    pub async fn next(&mut self) -> Option<Arrival> {
        self.rx.recv().await.map(|a| *a)
    }

    /// The next worker if one has arrived already.
    pub fn try_next(&mut self) -> Option<Arrival> {
        self.rx.try_recv().ok().map(|a| *a)
    }
}

/// Listening coordinator.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    arrivals: Arrivals,
}

impl Server {
    /// Listens on `addr` and starts authenticating connections with `secret`,
    /// each inside TLS first when `tls` is given (`--transport quic` or `tls`).
    pub async fn bind(
        addr: SocketAddr,
        secret: Secret,
        tls: Option<ControlAcceptor>,
    ) -> Result<Self, ServerError> {
        Self::bind_capped(addr, secret, tls, HANDSHAKES).await
    }

    /// [`Server::bind`] with at most `handshakes` connections in their
    /// handshake at once.
    async fn bind_capped(
        addr: SocketAddr,
        secret: Secret,
        tls: Option<ControlAcceptor>,
        handshakes: usize,
    ) -> Result<Self, ServerError> {
        let listener = listener(addr).map_err(ServerError::Listen)?;
        let addr = listener.local_addr().map_err(ServerError::Listen)?;
        let (tx, rx) = mpsc::channel(ARRIVALS);
        let door = Arc::new(Door {
            listener,
            handshakes: Arc::new(Semaphore::new(handshakes)),
        });
        let admit = Admit {
            secret: Arc::new(secret),
            tls,
            arrivals: tx,
        };
        let (theirs, runtime) = (door.clone(), Handle::current());
        std::thread::Builder::new()
            .name("accept".into())
            .stack_size(ACCEPT_STACK)
            .spawn(move || accept_all(&theirs, &runtime, &admit))
            .map_err(ServerError::Listen)?;
        let arrivals = Arrivals {
            rx,
            _door: Some(Closer(door)),
        };
        Ok(Self { addr, arrivals })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The workers arriving on this listener (which listens as long as they
    /// are kept).
    pub fn into_arrivals(self) -> Arrivals {
        self.arrivals
    }
}

/// A listening socket on `addr` with a backlog of [`BACKLOG`], for a
/// thread that waits in accept(2).
fn listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    let listener = s.listen(BACKLOG)?.into_std()?;
    listener.set_nonblocking(false)?;
    Ok(listener)
}

/// Arrivals over in-memory connections, which the returned dialer makes.
pub fn in_memory(secret: Secret) -> (Arrivals, MemDialer) {
    let (tx, rx) = mpsc::channel(ARRIVALS);
    let arrivals = Arrivals { rx, _door: None };
    let dialer = MemDialer {
        secret: Arc::new(secret),
        arrivals: tx,
    };
    (arrivals, dialer)
}

/// Makes control connections to a coordinator in the same process.
#[derive(Clone, Debug)]
pub struct MemDialer {
    secret: Arc<Secret>,
    arrivals: ArrivalTx,
}

impl MemDialer {
    /// A new connection: the worker's end of a pipe whose other end is
    /// authenticated and registered like a TCP connection. Refused
    /// (`ConnectionRefused`) once the coordinator's [`Arrivals`] are gone.
    pub fn dial(&self) -> std::io::Result<DuplexStream> {
        if self.arrivals.is_closed() {
            return Err(std::io::ErrorKind::ConnectionRefused.into());
        }
        let (near, far) = tokio::io::duplex(PIPE_BYTES);
        let (secret, arrivals) = (self.secret.clone(), self.arrivals.clone());
        tokio::spawn(async move {
            let far: Box<dyn ControlStream> = Box::new(far);
            hand_over(far, &secret, &arrivals, "memory").await;
        });
        Ok(near)
    }
}

/// What a connection accepted needs for its handshake.
#[derive(Clone)]
struct Admit {
    secret: Arc<Secret>,
    tls: Option<ControlAcceptor>,
    arrivals: ArrivalTx,
}

/// The accepting thread: takes each connection from the backlog as soon as
/// a handshake's slot is free and starts its handshake on `runtime`, until
/// the door closes.
fn accept_all(door: &Door, runtime: &Handle, admit: &Admit) {
    loop {
        // Connections beyond the cap wait in the backlog, not in memory.
        let Ok(permit) = runtime.block_on(door.handshakes.clone().acquire_owned()) else {
            return;
        };
        match door.listener.accept() {
            Ok((stream, from)) => {
                runtime.spawn(hand_in(stream, from, permit, admit.clone()));
            }
            Err(_) if door.handshakes.is_closed() => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of file descriptors or memory: a pause keeps an error
                // that stays from spinning the thread.
                tracing::warn!(%e, "accept failed");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// A connection from the accepting thread, on the runtime: authenticated,
/// its registration read, and handed to the driver.
async fn hand_in(
    stream: std::net::TcpStream,
    from: SocketAddr,
    permit: OwnedSemaphorePermit,
    admit: Admit,
) {
    let stream = stream
        .set_nonblocking(true)
        .and_then(|()| TcpStream::from_std(stream));
    let admitted = match stream {
        Ok(stream) => {
            let _ = stream.set_nodelay(true);
            match wrap(stream, admit.tls.as_ref()).await {
                Ok(stream) => self::admit(stream, &admit.secret, PROOF_TIMEOUT).await,
                Err(why) => Err(why),
            }
        }
        Err(e) => Err(format!("cannot serve the connection: {e}")),
    };
    drop(permit);
    pass_on(admitted, &admit.arrivals, &from.to_string()).await;
}

/// Admits a connection and passes it on.
async fn hand_over(
    stream: Box<dyn ControlStream>,
    secret: &Secret,
    arrivals: &ArrivalTx,
    from: &str,
) {
    let admitted = admit(stream, secret, HANDSHAKE_TIMEOUT).await;
    pass_on(admitted, arrivals, from).await;
}

/// Hands an admitted worker to the driver, or says why it was refused
/// (a few times per window; see [`REFUSALS`]).
async fn pass_on(admitted: Result<Arrival, String>, arrivals: &ArrivalTx, from: &str) {
    match admitted {
        Ok(a) => {
            let _ = arrivals.send(Box::new(a)).await;
        }
        Err(why) => {
            let say = REFUSALS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .note(std::time::Instant::now());
            match say {
                Say::Now { held: 0 } => tracing::warn!(%from, %why, "control connection refused"),
                Say::Now { held } => tracing::warn!(
                    %from,
                    %why,
                    "control connection refused ({held} more refused since the last such line)"
                ),
                Say::Hold => {}
            }
        }
    }
}

/// The connection as the control plane reads it: inside TLS (its handshake
/// bounded by [`PROOF_TIMEOUT`]) when `tls` is given.
async fn wrap(
    stream: TcpStream,
    tls: Option<&ControlAcceptor>,
) -> Result<Box<dyn ControlStream>, String> {
    let Some(tls) = tls else {
        return Ok(Box::new(stream));
    };
    match tokio::time::timeout(PROOF_TIMEOUT, tls.accept(stream)).await {
        Ok(Ok(s)) => Ok(Box::new(s)),
        Ok(Err(e)) => Err(format!("TLS: {e}")),
        Err(_) => Err(format!("no TLS handshake within {PROOF_TIMEOUT:?}")),
    }
}

/// Authenticates a connection and reads its registration.
/// `proof` bounds the authentication, [`HANDSHAKE_TIMEOUT`] the registration.
async fn admit(
    stream: Box<dyn ControlStream>,
    secret: &Secret,
    proof: Duration,
) -> Result<Arrival, String> {
    let mut link = control::accept(stream, secret, proof)
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, link.next()).await {
        Ok(Some(Ok(WorkerMsg::Register(registration)))) => Ok(Arrival { registration, link }),
        Ok(Some(Ok(_))) => Err("expected a registration".into()),
        Ok(Some(Err(e))) => Err(e.to_string()),
        Ok(None) => Err("closed before registering".into()),
        Err(_) => Err(format!("no registration within {HANDSHAKE_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use control::{Generation, PeerAddress};
    use futures::SinkExt;

    use super::*;

    /// Whether the server has closed `s` (whatever it sent before read).
    fn closed_by_server(s: &TcpStream) -> bool {
        let mut buf = [0u8; 256];
        loop {
            match s.try_read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
    }

    /// As many connections as the cap that never prove anything fill every
    /// handshake slot: a worker behind them waits in the backlog until the
    /// first of them is dropped after [`PROOF_TIMEOUT`], then gets in.
    #[tokio::test]
    async fn silent_connections_hold_at_most_the_cap_and_only_for_the_proof_timeout() {
        const CAP: usize = 64;
        let secret = Secret::generate().unwrap();
        let any = "127.0.0.1:0".parse().unwrap();
        let server = Server::bind_capped(any, secret.clone(), None, CAP)
            .await
            .unwrap();
        let addr = server.local_addr();
        let mut arrivals = server.into_arrivals();
        let mut silent = Vec::new();
        for _ in 0..CAP {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        let worker = tokio::spawn(async move {
            let s = TcpStream::connect(addr).await.unwrap();
            let mut link = control::connect(s, &secret, Duration::from_secs(60))
                .await
                .unwrap();
            let r = Registration {
                host: "h".into(),
                slot: 0,
                pid: 1,
                data_addr: PeerAddress::tcp("127.0.0.1:9".parse().unwrap()),
                generation: Generation(0),
            };
            link.send(WorkerMsg::Register(r)).await.unwrap();
            link
        });
        let arrival = tokio::time::timeout(PROOF_TIMEOUT * 5, arrivals.next())
            .await
            .expect("the worker never got past the silent connections")
            .unwrap();
        assert_eq!(arrival.registration.host, "h");
        let closed = silent.iter().filter(|s| closed_by_server(s)).count();
        assert!(
            closed >= 1,
            "the worker got in while all {CAP} silent connections were still held"
        );
        drop(worker.await.unwrap());
    }

    /// Dropping the arrivals closes the door, whether the accepting thread
    /// waits in accept(2) or for a handshake's slot: the next connection
    /// is refused.
    #[tokio::test]
    async fn dropped_arrivals_refuse_new_connections() {
        for cap in [4, 1] {
            let secret = Secret::generate().unwrap();
            let any = "127.0.0.1:0".parse().unwrap();
            let server = Server::bind_capped(any, secret, None, cap).await.unwrap();
            let addr = server.local_addr();
            let arrivals = server.into_arrivals();
            // With a cap of 1 this one holds the only slot.
            let _silent = TcpStream::connect(addr).await.unwrap();
            drop(arrivals);
            // At once: the kernel completes no handshake on a closed door.
            let next = TcpStream::connect(addr).await;
            assert!(
                matches!(&next, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
                "cap {cap}: a connection after the arrivals were dropped: {next:?}"
            );
        }
    }

    fn registration() -> Registration {
        Registration {
            host: "h".into(),
            slot: 0,
            pid: 1,
            data_addr: PeerAddress::tcp("127.0.0.1:9".parse().unwrap()),
            generation: Generation(0),
        }
    }

    /// With TLS (`--transport quic` or `tls`): a worker of the job registers through
    /// TLS and the HMAC handshake inside it; one that speaks the control
    /// plane in the clear, even with the right secret, is refused, and so is
    /// a TLS client that trusts another job's authority (it refuses the
    /// coordinator's certificate itself).
    #[tokio::test]
    async fn with_tls_only_a_tls_worker_of_the_job_gets_in() {
        let secret = Secret::generate().unwrap();
        let ca = control::pki::JobCa::from_secret(&secret).unwrap();
        let tls = ControlAcceptor::new(&ca).unwrap();
        let server = Server::bind("127.0.0.1:0".parse().unwrap(), secret.clone(), Some(tls))
            .await
            .unwrap();
        let addr = server.local_addr();
        let mut arrivals = server.into_arrivals();
        let limit = PROOF_TIMEOUT * 3;

        let plain = TcpStream::connect(addr).await.unwrap();
        let e = control::connect(plain, &secret, limit).await.unwrap_err();
        assert!(!e.to_string().is_empty());

        let other = control::tls::ControlConnector::new(&Secret::generate().unwrap()).unwrap();
        let e = control::tls::dial(addr, Some(&other)).await.unwrap_err();
        assert!(e.to_string().contains("certificate"), "{e}");

        let ours = control::tls::ControlConnector::new(&secret).unwrap();
        let s = control::tls::dial(addr, Some(&ours)).await.unwrap();
        assert!(matches!(s, tokio_util::either::Either::Right(_)));
        let mut link = control::connect(s, &secret, limit).await.unwrap();
        link.send(WorkerMsg::Register(registration()))
            .await
            .unwrap();
        let arrival = tokio::time::timeout(limit, arrivals.next())
            .await
            .expect("the TLS worker never arrived")
            .unwrap();
        assert_eq!(arrival.registration.host, "h");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), arrivals.next())
                .await
                .is_err(),
            "a refused connection arrived"
        );
    }
}
