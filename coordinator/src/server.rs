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
//! At most [`HANDSHAKES`] TCP connections are in their handshake at once
//! (more wait in the listen backlog), each with [`PROOF_TIMEOUT`] to prove it
//! knows the secret, so that a flood of silent or foreign connections cannot
//! hold the door shut for long; refusals are logged a few per window with a
//! count of the rest ([`control::Throttle`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use control::tls::ControlAcceptor;
use control::{CoordinatorLink, Registration, Say, Secret, Throttle, WorkerMsg};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

/// How long one connection may take to authenticate and register.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new TCP connection has to prove that it knows the secret (two
/// round trips): short, since until then it holds one of the [`HANDSHAKES`].
pub const PROOF_TIMEOUT: Duration = Duration::from_secs(3);
/// How many TCP connections may be in their handshake at once.
pub const HANDSHAKES: usize = 256;
/// The control listener's backlog: Linux's default cap (`somaxconn`), so
/// that thousands of workers starting at once wait in it rather than have
/// their connections dropped (and retried after 1, 3, 7, 15 s).
const BACKLOG: u32 = 4096;
/// Refused connections said per [`REFUSALS_WINDOW`]; the rest are counted.
const REFUSALS_SAID: u32 = 5;
const REFUSALS_WINDOW: Duration = Duration::from_secs(10);
static REFUSALS: Mutex<Throttle> = Mutex::new(Throttle::new(REFUSALS_WINDOW, REFUSALS_SAID));
/// How many arrivals may wait for the driver.
const ARRIVALS: usize = 1024;
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
    rx: mpsc::Receiver<Arrival>,
    /// The TCP listener's task, if any.
    listener: Option<JoinHandle<()>>,
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        if let Some(l) = &self.listener {
            l.abort();
        }
    }
}

impl Arrivals {
    /// The next authenticated, registered worker; `None` once nothing can
    /// arrive any more.
    pub async fn next(&mut self) -> Option<Arrival> {
        self.rx.recv().await
    }

    /// The next worker if one has arrived already.
    pub fn try_next(&mut self) -> Option<Arrival> {
        self.rx.try_recv().ok()
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
        let listener = listener(addr).map_err(ServerError::Listen)?;
        let addr = listener.local_addr().map_err(ServerError::Listen)?;
        let (tx, rx) = mpsc::channel(ARRIVALS);
        let listener = tokio::spawn(listen(listener, Arc::new(secret), tls, tx));
        let arrivals = Arrivals {
            rx,
            listener: Some(listener),
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

/// A listening socket on `addr` with a backlog of [`BACKLOG`].
fn listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(BACKLOG)
}

/// Arrivals over in-memory connections, which the returned dialer makes.
pub fn in_memory(secret: Secret) -> (Arrivals, MemDialer) {
    let (tx, rx) = mpsc::channel(ARRIVALS);
    let arrivals = Arrivals { rx, listener: None };
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
    arrivals: mpsc::Sender<Arrival>,
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

async fn listen(
    listener: TcpListener,
    secret: Arc<Secret>,
    tls: Option<ControlAcceptor>,
    arrivals: mpsc::Sender<Arrival>,
) {
    let handshakes = Arc::new(Semaphore::new(HANDSHAKES));
    loop {
        // Connections beyond the cap wait in the backlog, not in memory.
        let Ok(permit) = handshakes.clone().acquire_owned().await else {
            return;
        };
        let (stream, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (secret, arrivals, tls) = (secret.clone(), arrivals.clone(), tls.clone());
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let admitted = match wrap(stream, tls.as_ref()).await {
                Ok(stream) => admit(stream, &secret, PROOF_TIMEOUT).await,
                Err(why) => Err(why),
            };
            drop(permit);
            pass_on(admitted, &arrivals, &from.to_string()).await;
        });
    }
}

/// Admits a connection and passes it on.
async fn hand_over(
    stream: Box<dyn ControlStream>,
    secret: &Secret,
    arrivals: &mpsc::Sender<Arrival>,
    from: &str,
) {
    let admitted = admit(stream, secret, HANDSHAKE_TIMEOUT).await;
    pass_on(admitted, arrivals, from).await;
}

/// Hands an admitted worker to the driver, or says why it was refused
/// (a few times per window; see [`REFUSALS`]).
async fn pass_on(admitted: Result<Arrival, String>, arrivals: &mpsc::Sender<Arrival>, from: &str) {
    match admitted {
        Ok(a) => {
            let _ = arrivals.send(a).await;
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

    /// [`HANDSHAKES`] connections that never prove anything fill every
    /// handshake slot: a worker behind them waits in the backlog until the
    /// first of them is dropped after [`PROOF_TIMEOUT`], then gets in.
    #[tokio::test]
    async fn silent_connections_hold_at_most_the_cap_and_only_for_the_proof_timeout() {
        let secret = Secret::generate().unwrap();
        let server = Server::bind("127.0.0.1:0".parse().unwrap(), secret.clone(), None)
            .await
            .unwrap();
        let addr = server.local_addr();
        let mut arrivals = server.into_arrivals();
        let mut silent = Vec::new();
        for _ in 0..HANDSHAKES {
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
            "the worker got in while all {HANDSHAKES} silent connections were still held"
        );
        drop(worker.await.unwrap());
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
