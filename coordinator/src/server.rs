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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use control::{CoordinatorLink, Registration, Secret, WorkerMsg};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long one connection may take to authenticate and register.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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
}

/// Listening coordinator.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    arrivals: Arrivals,
}

impl Server {
    /// Listens on `addr` and starts authenticating connections with `secret`.
    pub async fn bind(addr: SocketAddr, secret: Secret) -> Result<Self, ServerError> {
        let listener = TcpListener::bind(addr).await.map_err(ServerError::Listen)?;
        let addr = listener.local_addr().map_err(ServerError::Listen)?;
        let (tx, rx) = mpsc::channel(ARRIVALS);
        let listener = tokio::spawn(listen(listener, Arc::new(secret), tx));
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

async fn listen(listener: TcpListener, secret: Arc<Secret>, arrivals: mpsc::Sender<Arrival>) {
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (secret, arrivals) = (secret.clone(), arrivals.clone());
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            let stream: Box<dyn ControlStream> = Box::<TcpStream>::new(stream);
            hand_over(stream, &secret, &arrivals, &from.to_string()).await;
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
    match admit(stream, secret).await {
        Ok(a) => {
            let _ = arrivals.send(a).await;
        }
        Err(why) => tracing::warn!(%from, %why, "control connection refused"),
    }
}

/// Authenticates a connection and reads its registration.
async fn admit(stream: Box<dyn ControlStream>, secret: &Secret) -> Result<Arrival, String> {
    let mut link = control::accept(stream, secret, HANDSHAKE_TIMEOUT)
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
