//! Building the TLS mesh of one generation: the TCP mesh's dials and
//! accepts ([`crate::transport::tcp`]) with a TLS session over each
//! connection before the handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use control::pki::{LeafKey, leaf_name};
use control::{DataKey, LeafPublicKey, PeerAddress, TlsGrant};
use rustls_pki_types::ServerName;
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};

use super::TlsTransport;
use super::settings::{self, TlsSetupError};
use crate::error::TransportError;
use crate::tag::{Generation, Rank};
use crate::transport::book::PeerBook;
use crate::transport::endpoint::granted;
use crate::transport::stream::handshake::Hello;
use crate::transport::tcp::mesh::{Layer, failure, local_ranks};
use crate::transport::tcp::on_demand::PeerAddrs;
use crate::transport::tcp::{PolledTcp, TcpConfig, TcpEndpoint};

/// A bound, listening TLS endpoint whose address and public key can be
/// handed to peers before the mesh is built.
#[derive(Debug)]
pub struct TlsEndpoint {
    tcp: TcpEndpoint,
    key: LeafKey,
    layer: Option<Tls>,
}

impl TlsEndpoint {
    /// Binds and listens on `addr` (port 0 picks a free port) and makes this
    /// endpoint's TLS key. With `config`'s shared memory on, a peer on this
    /// host is offered it inside the TLS session, as over TCP.
    pub async fn bind(addr: SocketAddr, config: TcpConfig) -> Result<Self, TransportError> {
        let tcp = TcpEndpoint::bind(addr, config).await?;
        let key =
            LeafKey::generate().map_err(|e| TransportError::socket(std::io::Error::other(e)))?;
        Ok(Self {
            tcp,
            key,
            layer: None,
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        self.tcp.local_addr()
    }

    /// The public half of this endpoint's TLS key, for the coordinator to
    /// certify.
    pub fn public_key(&self) -> LeafPublicKey {
        self.key.public()
    }

    /// Sets the job key the handshake proves, the coordinator's `grant` and
    /// how long [`TlsEndpoint::connect`] may take.
    pub fn prepare(
        &mut self,
        job_key: DataKey,
        grant: &TlsGrant,
        connect_timeout: Duration,
    ) -> Result<(), TlsSetupError> {
        self.tcp.prepare(job_key, connect_timeout);
        let server = settings::server(grant, self.key.private_der())?;
        let client = settings::client(grant, self.key.private_der())?;
        self.layer = Some(Tls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        });
        Ok(())
    }

    /// Connects with connections on demand, each peer's address found in
    /// `book` when it is first dialled. [`TlsEndpoint::prepare`] must have
    /// been called, and [`TcpConfig::on_demand`] set.
    pub(crate) fn on_demand_book(
        self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
    ) -> Result<TlsTransport, TransportError> {
        let (me, _) = self.tcp.start(rank, generation, book.size())?;
        let layer = granted(self.layer, rank)?;
        let pick = |a: &PeerAddress| a.tls_addr().map(|(addr, _)| addr);
        Ok(self
            .tcp
            .on_demand(me, PeerAddrs::Book { book, pick }, layer))
    }

    /// Whether it connects on demand ([`TcpConfig::on_demand`]).
    pub(crate) fn on_demand_set(&self) -> bool {
        self.tcp.on_demand_set()
    }

    /// Connects to every peer (`peers[i]` is rank `i`'s address) and starts
    /// the transport. [`TlsEndpoint::prepare`] must have been called.
    pub async fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[SocketAddr],
    ) -> Result<TlsTransport, TransportError> {
        let (me, deadline) = self.tcp.start(rank, generation, peers.len())?;
        let layer = granted(self.layer, rank)?;
        if self.tcp.on_demand_set() {
            return Ok(self
                .tcp
                .on_demand(me, PeerAddrs::Listed(peers.to_vec()), layer));
        }
        let proven = self.tcp.proven(me, deadline, peers, layer).await?;
        let local = local_ranks(me, peers);
        self.tcp.linked::<Tls>(me, deadline, proven, local).await
    }
}

/// Both ends of the job's TLS.
#[derive(Clone)]
struct Tls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(..)")
    }
}

impl Layer for Tls {
    type Stream = TlsStream<PolledTcp>;
    type Read = ReadHalf<TlsStream<PolledTcp>>;
    type Write = WriteHalf<TlsStream<PolledTcp>>;

    /// A session with `peer`, which must present the leaf of its rank and
    /// generation.
    async fn dial(
        &self,
        s: TcpStream,
        me: Hello,
        peer: Rank,
        addr: SocketAddr,
    ) -> Result<Self::Stream, TransportError> {
        let name = ServerName::try_from(leaf_name(peer, me.generation)).map_err(|e| {
            TransportError::Tls {
                rank: peer,
                addr,
                reason: e.to_string(),
            }
        })?;
        let started = Instant::now();
        let s = PolledTcp::new(s, Duration::ZERO);
        match self.connector.connect(name, s).await {
            Ok(s) => Ok(TlsStream::Client(s)),
            Err(e) => Err(failure(me.rank, peer, addr, started, e)),
        }
    }

    async fn accept(&self, s: TcpStream) -> Result<Self::Stream, String> {
        match self
            .acceptor
            .accept(PolledTcp::new(s, Duration::ZERO))
            .await
        {
            Ok(s) => Ok(TlsStream::Server(s)),
            Err(e) => Err(format!("TLS: {e}")),
        }
    }

    fn socket(s: &Self::Stream) -> &TcpStream {
        s.get_ref().0.get_ref()
    }

    /// The session's halves, its socket's reads looking for `spin` (the
    /// handshake's did not).
    fn split(mut s: Self::Stream, spin: Duration) -> (Self::Read, Self::Write) {
        s.get_mut().0.set_spin(spin);
        tokio::io::split(s)
    }

    /// The socket, the session dropped: a pair that shares memory says
    /// nothing more on it (the offer and answer were the last records).
    fn into_socket(s: Self::Stream) -> TcpStream {
        match s {
            TlsStream::Client(c) => c.into_inner().0.into_inner(),
            TlsStream::Server(c) => c.into_inner().0.into_inner(),
        }
    }
}
