//! The coordinator's control-plane listener: authenticates every connection
//! and reads its registration; the job driver takes the arrivals.
//!
//! ```text
//!  listener task ──(authenticated, registered)──> Arrival ──> job driver
//!        │ garbage / wrong secret: that connection closes, nothing else
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use control::{CoordinatorLink, Registration, Secret, WorkerMsg};
use futures::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long one connection may take to authenticate and register.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker's authenticated control connection.
pub type Link = CoordinatorLink<TcpStream>;

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

/// Listening coordinator.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    arrivals: mpsc::Receiver<Arrival>,
    listener: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl Server {
    /// Listens on `addr` and starts authenticating connections with `secret`.
    pub async fn bind(addr: SocketAddr, secret: Secret) -> Result<Self, ServerError> {
        let listener = TcpListener::bind(addr).await.map_err(ServerError::Listen)?;
        let addr = listener.local_addr().map_err(ServerError::Listen)?;
        let (tx, arrivals) = mpsc::channel(1024);
        let listener = tokio::spawn(listen(listener, Arc::new(secret), tx));
        Ok(Self {
            addr,
            arrivals,
            listener,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next authenticated, registered worker; `None` once the listener
    /// has stopped.
    pub async fn next_arrival(&mut self) -> Option<Arrival> {
        self.arrivals.recv().await
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
            match admit(stream, &secret).await {
                Ok(a) => {
                    let _ = arrivals.send(a).await;
                }
                Err(why) => tracing::warn!(%from, %why, "control connection refused"),
            }
        });
    }
}

/// Authenticates a connection and reads its registration.
async fn admit(stream: TcpStream, secret: &Secret) -> Result<Arrival, String> {
    let _ = stream.set_nodelay(true);
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
