//! TLS around the control connection (`--transport quic`): the coordinator
//! presents a leaf of the job's certificate authority named
//! [`COORDINATOR_NAME`], which a worker checks against the authority it
//! derives from the job secret itself; the HMAC handshake and the sealed
//! frames ([`crate::accept`], [`crate::connect`]) then run inside, as over
//! plain TCP, and prove the worker to the coordinator.
//!
//! ```text
//!  worker ── TCP ── TLS 1.3 (server: job CA leaf) ── HMAC challenge ── frames
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::either::Either;

use crate::auth::Secret;
use crate::pki::{JobCa, LeafKey, PkiError};

/// The name in the coordinator's leaf, which workers ask for.
pub const COORDINATOR_NAME: &str = "coordinator.elasticrun";

/// Why TLS for the control plane could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ControlTlsError {
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error("the control plane's TLS settings: {0}")]
    Settings(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The coordinator's side: a fresh key, certified by the job's authority.
#[derive(Clone)]
pub struct ControlAcceptor(TlsAcceptor);

impl std::fmt::Debug for ControlAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlAcceptor(..)")
    }
}

impl ControlAcceptor {
    pub fn new(ca: &JobCa) -> Result<Self, ControlTlsError> {
        let key = LeafKey::generate()?;
        let now = SystemTime::now();
        let from = now.checked_sub(crate::pki::LEAF_BACKDATE).unwrap_or(now);
        // Valid as long as a coordinator may run.
        let until = now + Duration::from_secs(10 * 365 * 86_400);
        let grant = ca.certify(&key.public(), COORDINATOR_NAME, from, until)?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(vec![grant.leaf_der()], key.private_der())?;
        Ok(Self(TlsAcceptor::from(Arc::new(config))))
    }

    /// TLS's server handshake on an accepted connection.
    pub async fn accept(
        &self,
        s: TcpStream,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<TcpStream>> {
        self.0.accept(s).await
    }
}

/// The worker's side: trusts only the job's authority, derived from the
/// secret.
#[derive(Clone)]
pub struct ControlConnector(TlsConnector);

impl std::fmt::Debug for ControlConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlConnector(..)")
    }
}

impl ControlConnector {
    pub fn new(secret: &Secret) -> Result<Self, ControlTlsError> {
        let ca = JobCa::from_secret(secret)?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.certificate().to_vec().into())?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self(TlsConnector::from(Arc::new(config))))
    }

    /// TLS's client handshake on a connection to the coordinator.
    pub async fn connect(&self, s: TcpStream) -> std::io::Result<ClientStream> {
        let name = ServerName::try_from(COORDINATOR_NAME).map_err(std::io::Error::other)?;
        let tls = self.0.connect(name, s).await?;
        Ok(Either::Right(Box::new(tls)))
    }
}

/// A worker's control connection: plain TCP (`Left`), or TLS over it
/// (`Right`).
pub type ClientStream = Either<TcpStream, Box<tokio_rustls::client::TlsStream<TcpStream>>>;

/// The local address of a worker's control connection: the address this
/// host reaches the coordinator from.
pub fn local_ip(stream: &ClientStream) -> Option<std::net::IpAddr> {
    let tcp = match stream {
        Either::Left(s) => s,
        Either::Right(tls) => tls.get_ref().0,
    };
    tcp.local_addr().ok().map(|a| a.ip())
}

/// Connects to `addr` (no Nagle) and, with `tls`, runs its handshake.
pub async fn dial(
    addr: std::net::SocketAddr,
    tls: Option<&ControlConnector>,
) -> std::io::Result<ClientStream> {
    let s = TcpStream::connect(addr).await?;
    let _ = s.set_nodelay(true);
    over(s, tls).await
}

/// `s` as is, or with TLS's handshake run on it.
pub async fn over(s: TcpStream, tls: Option<&ControlConnector>) -> std::io::Result<ClientStream> {
    match tls {
        Some(t) => t.connect(s).await,
        None => Ok(Either::Left(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CoordinatorMsg, WorkerMsg};
    use futures::{SinkExt, StreamExt};

    const LIMIT: Duration = Duration::from_secs(10);

    async fn pair(
        server_secret: &Secret,
        client_secret: &Secret,
    ) -> (
        std::io::Result<ClientStream>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = ControlAcceptor::new(&JobCa::from_secret(server_secret).unwrap()).unwrap();
        let secret = server_secret.clone();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await?;
            let tls = acceptor.accept(s).await?;
            let mut link = crate::accept(tls, &secret, LIMIT)
                .await
                .map_err(std::io::Error::other)?;
            link.send(CoordinatorMsg::Stop {
                reason: "over TLS".into(),
            })
            .await
            .map_err(std::io::Error::other)?;
            Ok(())
        });
        let connector = ControlConnector::new(client_secret).unwrap();
        (dial(addr, Some(&connector)).await, server)
    }

    #[tokio::test]
    async fn a_worker_of_the_job_talks_to_its_coordinator_over_tls() {
        let secret = Secret::generate().unwrap();
        let (stream, server) = pair(&secret, &secret).await;
        let stream = stream.unwrap();
        assert!(matches!(stream, Either::Right(_)));
        let mut link = crate::connect(stream, &secret, LIMIT).await.unwrap();
        let Some(Ok(CoordinatorMsg::Stop { reason })) = link.next().await else {
            panic!("no message over TLS");
        };
        assert_eq!(reason, "over TLS");
        link.send(WorkerMsg::Finished).await.unwrap();
        server.await.unwrap().unwrap();
    }

    /// A coordinator of another job cannot present a leaf the worker
    /// trusts: the worker refuses it before any byte of the control plane.
    #[tokio::test]
    async fn a_coordinator_of_another_job_is_refused_by_tls() {
        let (ours, theirs) = (Secret::generate().unwrap(), Secret::generate().unwrap());
        let (stream, server) = pair(&theirs, &ours).await;
        let e = stream.unwrap_err();
        assert!(e.to_string().contains("certificate"), "{e}");
        assert!(server.await.unwrap().is_err());
    }
}
