//! Building a generation's transport: gloo's `transport::Device`.
//!
//! ```text
//!  bind/create endpoint ─> publish address() ─> (coordinator gathers every
//!  rank's address) ─> connect(rank, generation, peers, admission) ─> Transport
//! ```
//! An endpoint exists before its generation does: its address goes to the
//! coordinator with the worker's registration, and the assignment brings back
//! every rank's, with what admits this rank to the generation's mesh (the
//! key the data-plane handshake proves and, on an encrypted plane, its
//! certificate: [`Admission`]). One endpoint builds one generation's
//! transport; the next generation gets a fresh endpoint.
//!
//! Every transport implements [`Endpoint`] (TCP with shared memory, TLS,
//! QUIC, in-memory); [`crate::PlaneEndpoint`] is the one a worker binds, any
//! of them chosen at run time.

use std::fmt::Debug;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use control::{DataKey, LeafPublicKey, PeerAddress, TlsGrant};

use super::Transport;
use super::book::PeerBook;
use super::quic::{QuicAddress, QuicEndpoint, QuicTransport};
use super::tcp::{TcpEndpoint, TcpTransport};
use super::tls::{TlsEndpoint, TlsSetupError, TlsTransport};
use crate::error::TransportError;
use crate::tag::{Generation, Rank};

/// What admits a rank to one generation's mesh besides its peers'
/// addresses, from the coordinator's assignment.
#[derive(Clone, Debug)]
pub struct Admission<'a> {
    /// The key the data-plane handshake proves (the job secret's, for this
    /// generation's token).
    pub key: DataKey,
    /// This rank's certificate, which an encrypted data plane needs.
    pub grant: Option<&'a TlsGrant>,
    /// How long connecting the mesh may take.
    pub within: Duration,
}

/// Where a rank's data plane can be reached, and how to build the connected
/// transport of a generation from every rank's address. A new transport
/// implements this and [`Transport`], in a folder of its own under
/// `transport/`, with a [`DataEndpoint`](control::DataEndpoint) kind for its address.
pub trait Endpoint: Send + Sized {
    /// What peers need to reach this endpoint.
    type Address: Clone + Debug + Send + Sync;
    /// The transport this endpoint builds.
    type Transport: Transport;

    /// This endpoint's address, to hand to the peers.
    fn address(&self) -> Result<Self::Address, TransportError>;

    /// What the coordinator is told: this endpoint's address, with `ip` (the
    /// address this host reaches the coordinator from) in place of the one
    /// it listens on, which may be every interface's.
    fn published(&self, ip: IpAddr) -> Result<PeerAddress, TransportError>;

    /// This transport's address among those a peer published, if it offers
    /// one.
    fn pick(peer: &PeerAddress) -> Option<Self::Address>;

    /// Connects to every peer (`peers[i]` is rank `i`'s address; this rank's
    /// own entry is its own) and returns the transport of `generation`.
    fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[Self::Address],
        admission: Admission<'_>,
    ) -> impl Future<Output = Result<Self::Transport, TransportError>> + Send;

    /// Connects with the generation's `book` of addresses (some given, the
    /// rest looked up). The default looks every missing one up first and
    /// connects as [`Endpoint::connect`]; a transport that connects on
    /// demand looks a peer up when it first dials it.
    fn connect_book(
        self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
        admission: Admission<'_>,
    ) -> impl Future<Output = Result<Self::Transport, TransportError>> + Send {
        connect_all(self, rank, generation, book, admission)
    }
}

/// [`Endpoint::connect_book`]'s default: every address first.
pub(crate) async fn connect_all<E: Endpoint>(
    endpoint: E,
    rank: Rank,
    generation: Generation,
    book: Arc<PeerBook>,
    admission: Admission<'_>,
) -> Result<E::Transport, TransportError> {
    let peers = book.all().await?;
    connect_published(endpoint, rank, generation, &peers, admission).await
}

/// Connects `endpoint` to the peers an assignment lists (`peers[i]` is what
/// rank `i` published): a peer that offers no address of this transport is
/// a handshake error naming its rank.
pub async fn connect_published<E: Endpoint>(
    endpoint: E,
    rank: Rank,
    generation: Generation,
    peers: &[PeerAddress],
    admission: Admission<'_>,
) -> Result<E::Transport, TransportError> {
    let addresses = peers
        .iter()
        .enumerate()
        .map(|(peer, p)| E::pick(p).ok_or_else(|| no_address(peer)))
        .collect::<Result<Vec<_>, _>>()?;
    endpoint
        .connect(rank, generation, &addresses, admission)
        .await
}

/// The error of a peer that published no address of this data plane.
pub(crate) fn no_address(rank: Rank) -> TransportError {
    TransportError::Handshake {
        rank,
        reason: "the peer offers no address of this data plane \
                 (is every worker's ELASTICRUN_TRANSPORT the same?)",
    }
}

/// What an encrypted endpoint was prepared with (its TLS settings); the
/// error of `rank`'s endpoint that was granted no certificate.
pub(crate) fn granted<T>(prepared: Option<T>, rank: Rank) -> Result<T, TransportError> {
    prepared.ok_or(TransportError::Handshake {
        rank,
        reason: "no certificate was granted to this rank",
    })
}

/// `addr` with `ip` in place of its address.
fn at(ip: IpAddr, addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(ip, addr.port())
}

impl Endpoint for TcpEndpoint {
    type Address = SocketAddr;
    type Transport = TcpTransport;

    fn address(&self) -> Result<SocketAddr, TransportError> {
        self.local_addr()
    }

    fn published(&self, ip: IpAddr) -> Result<PeerAddress, TransportError> {
        let address = PeerAddress::tcp(at(ip, self.local_addr()?));
        Ok(match self.carries() {
            Some(carry) => address.with_process(carry.process()),
            None => address,
        })
    }

    fn pick(peer: &PeerAddress) -> Option<SocketAddr> {
        peer.tcp_addr()
    }

    fn connect(
        mut self,
        rank: Rank,
        generation: Generation,
        peers: &[SocketAddr],
        admission: Admission<'_>,
    ) -> impl Future<Output = Result<TcpTransport, TransportError>> + Send {
        self.prepare(admission.key, admission.within);
        TcpEndpoint::connect(self, rank, generation, peers)
    }

    async fn connect_book(
        mut self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
        admission: Admission<'_>,
    ) -> Result<TcpTransport, TransportError> {
        if !self.on_demand_set() {
            return connect_all(self, rank, generation, book, admission).await;
        }
        self.prepare(admission.key, admission.within);
        self.on_demand_book(rank, generation, book)
    }
}

/// What peers need to reach a TLS endpoint: its address, and the public key
/// the coordinator certifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsAddress {
    pub addr: SocketAddr,
    pub key: LeafPublicKey,
}

/// What an encrypted plane (TLS, QUIC) connects with: every peer's socket
/// address, this rank's own, and its certificate (none is an error).
fn sealed(
    peers: impl Iterator<Item = SocketAddr>,
    rank: Rank,
    grant: Option<&TlsGrant>,
) -> Result<(Vec<SocketAddr>, SocketAddr, &TlsGrant), TransportError> {
    let addrs: Vec<SocketAddr> = peers.collect();
    let size = addrs.len();
    let addr = addrs
        .get(rank)
        .copied()
        .ok_or(TransportError::InvalidRank { rank, size })?;
    let grant = grant.ok_or_else(|| TransportError::Tls {
        rank,
        addr,
        reason: "the coordinator granted this worker no certificate".into(),
    })?;
    Ok((addrs, addr, grant))
}

/// The error of TLS settings that could not be made from a grant.
fn tls_setup(rank: Rank, addr: SocketAddr) -> impl FnOnce(TlsSetupError) -> TransportError {
    move |e| TransportError::Tls {
        rank,
        addr,
        reason: e.to_string(),
    }
}

impl Endpoint for TlsEndpoint {
    type Address = TlsAddress;
    type Transport = TlsTransport;

    fn address(&self) -> Result<TlsAddress, TransportError> {
        Ok(TlsAddress {
            addr: self.local_addr()?,
            key: self.public_key(),
        })
    }

    fn published(&self, ip: IpAddr) -> Result<PeerAddress, TransportError> {
        let addr = at(ip, self.local_addr()?);
        Ok(PeerAddress::tls(addr, self.public_key()))
    }

    fn pick(peer: &PeerAddress) -> Option<TlsAddress> {
        peer.tls_addr().map(|(addr, key)| TlsAddress { addr, key })
    }

    async fn connect(
        mut self,
        rank: Rank,
        generation: Generation,
        peers: &[TlsAddress],
        admission: Admission<'_>,
    ) -> Result<TlsTransport, TransportError> {
        let (addrs, addr, grant) = sealed(peers.iter().map(|p| p.addr), rank, admission.grant)?;
        self.prepare(admission.key, grant, admission.within)
            .map_err(tls_setup(rank, addr))?;
        TlsEndpoint::connect(self, rank, generation, &addrs).await
    }

    fn connect_book(
        self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
        admission: Admission<'_>,
    ) -> impl Future<Output = Result<TlsTransport, TransportError>> + Send {
        sealed_book(self, rank, generation, book, admission)
    }
}

impl Sealed for TlsEndpoint {
    fn on_demand(&self) -> bool {
        self.on_demand_set()
    }

    fn own(peer: &PeerAddress) -> Option<SocketAddr> {
        peer.tls_addr().map(|(a, _)| a)
    }

    fn granted(&mut self, a: &Admission<'_>, grant: &TlsGrant) -> Result<(), TlsSetupError> {
        self.prepare(a.key.clone(), grant, a.within)
    }

    fn on_book(
        self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
    ) -> Result<TlsTransport, TransportError> {
        self.on_demand_book(rank, generation, book)
    }
}

impl Endpoint for QuicEndpoint {
    type Address = QuicAddress;
    type Transport = QuicTransport;

    fn address(&self) -> Result<QuicAddress, TransportError> {
        Ok(QuicAddress {
            addr: self.local_addr()?,
            key: self.public_key(),
        })
    }

    fn published(&self, ip: IpAddr) -> Result<PeerAddress, TransportError> {
        let addr = at(ip, self.local_addr()?);
        Ok(PeerAddress::quic(addr, self.public_key()))
    }

    fn pick(peer: &PeerAddress) -> Option<QuicAddress> {
        peer.quic_addr()
            .map(|(addr, key)| QuicAddress { addr, key })
    }

    async fn connect(
        mut self,
        rank: Rank,
        generation: Generation,
        peers: &[QuicAddress],
        admission: Admission<'_>,
    ) -> Result<QuicTransport, TransportError> {
        let (addrs, addr, grant) = sealed(peers.iter().map(|p| p.addr), rank, admission.grant)?;
        self.prepare(admission.key, grant, admission.within)
            .map_err(tls_setup(rank, addr))?;
        QuicEndpoint::connect(self, rank, generation, &addrs).await
    }

    fn connect_book(
        self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
        admission: Admission<'_>,
    ) -> impl Future<Output = Result<QuicTransport, TransportError>> + Send {
        sealed_book(self, rank, generation, book, admission)
    }
}

impl Sealed for QuicEndpoint {
    fn on_demand(&self) -> bool {
        self.on_demand_set()
    }

    fn own(peer: &PeerAddress) -> Option<SocketAddr> {
        peer.quic_addr().map(|(a, _)| a)
    }

    fn granted(&mut self, a: &Admission<'_>, grant: &TlsGrant) -> Result<(), TlsSetupError> {
        self.prepare(a.key.clone(), grant, a.within)
    }

    fn on_book(
        self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
    ) -> Result<QuicTransport, TransportError> {
        self.on_demand_book(rank, generation, book)
    }
}

/// An encrypted plane's endpoint (TLS, QUIC), as [`sealed_book`] connects
/// it with a book of addresses.
trait Sealed: Endpoint {
    /// Whether it connects on demand.
    fn on_demand(&self) -> bool;
    /// The socket address of this plane in what a peer published.
    fn own(peer: &PeerAddress) -> Option<SocketAddr>;
    /// Takes the job key and this rank's certificate.
    fn granted(&mut self, a: &Admission<'_>, grant: &TlsGrant) -> Result<(), TlsSetupError>;
    /// The transport on demand, addresses from `book`.
    fn on_book(
        self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
    ) -> Result<Self::Transport, TransportError>;
}

/// [`Endpoint::connect_book`] of an encrypted plane: on demand, this rank's
/// own address (for its certificate's errors) and its grant, then the
/// transport; otherwise every address first.
async fn sealed_book<E: Sealed>(
    mut endpoint: E,
    rank: Rank,
    generation: Generation,
    book: Arc<PeerBook>,
    admission: Admission<'_>,
) -> Result<E::Transport, TransportError> {
    if !endpoint.on_demand() {
        return connect_all(endpoint, rank, generation, book, admission).await;
    }
    let own = book.get(rank).await?;
    let own = E::own(&own).ok_or(TransportError::Handshake {
        rank,
        reason: "this rank's own address offers no endpoint of this data plane",
    })?;
    let (_, addr, grant) = sealed(std::iter::once(own), 0, admission.grant)?;
    endpoint
        .granted(&admission, grant)
        .map_err(tls_setup(rank, addr))?;
    endpoint.on_book(rank, generation, book)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataPlane, MemFabric, PlaneEndpoint, TcpConfig};

    fn admission() -> Admission<'static> {
        Admission {
            key: DataKey::new([7; 32]),
            grant: None,
            within: Duration::from_secs(5),
        }
    }

    fn local() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    #[tokio::test]
    async fn a_peer_without_an_address_of_this_plane_is_named() {
        let ep = TcpEndpoint::bind(local(), TcpConfig::default())
            .await
            .unwrap();
        let me = ep.published(IpAddr::from([127, 0, 0, 1])).unwrap();
        let peers = [me, PeerAddress::mem(3)];
        let e = connect_published(ep, 0, Generation(1), &peers, admission())
            .await
            .unwrap_err();
        assert!(
            matches!(e, TransportError::Handshake { rank: 1, .. }),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn an_encrypted_plane_without_a_certificate_is_refused() {
        let config = TcpConfig::default();
        let ep = PlaneEndpoint::bind(
            control::env::TransportKind::Tls,
            local(),
            crate::PlaneConfig {
                tcp: config,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let me = ep.published(IpAddr::from([127, 0, 0, 1])).unwrap();
        assert!(me.tls_addr().is_some(), "{me:?}");
        let e = ep
            .connect(0, Generation(1), &[me], admission())
            .await
            .unwrap_err();
        match e {
            TransportError::Tls {
                rank: 0, reason, ..
            } => {
                assert!(reason.contains("no certificate"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn plane_endpoints_of_a_fabric_build_its_world() {
        let fabric = MemFabric::new(Duration::from_secs(5));
        let eps: Vec<PlaneEndpoint> = (0..2).map(|_| fabric.endpoint().into()).collect();
        let ip = IpAddr::from([10, 0, 0, 1]);
        let peers: Vec<PeerAddress> = eps.iter().map(|e| e.published(ip).unwrap()).collect();
        assert_eq!(eps[0].address().unwrap(), peers[0], "the fabric has no IP");
        let joins = eps
            .into_iter()
            .enumerate()
            .map(|(r, e)| e.connect(r, Generation(2), &peers, admission()));
        let planes = futures::future::join_all(joins).await;
        for (r, p) in planes.into_iter().enumerate() {
            let p = p.unwrap();
            assert!(matches!(p, DataPlane::Mem(_)));
            assert_eq!((p.rank(), p.size(), p.generation()), (r, 2, Generation(2)));
        }
    }
}
