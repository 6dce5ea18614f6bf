//! The endpoint a worker binds: any transport, chosen at run time, behind
//! the one [`Endpoint`] seam. It builds a [`DataPlane`] of the same kind.
//!
//! ```text
//!  PlaneEndpoint::bind(kind, listen, config) ─> published(ip) ─> coordinator
//!  assignment ─> connect(rank, generation, every rank's PeerAddress, admission)
//!  ─> DataPlane::{Tcp, Quic, Tls, Mem}
//! ```
//! A new transport is a variant here and in [`DataPlane`], beside its own
//! folder and its [`control::DataEndpoint`] kind.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use control::PeerAddress;
use control::env::TransportKind;

use super::book::PeerBook;
use super::endpoint::{Admission, Endpoint, connect_published};
use super::mem_fabric::MemEndpoint;
use super::plane::DataPlane;
use super::quic::{QuicConfig, QuicEndpoint};
use super::tcp::{TcpConfig, TcpEndpoint};
use super::tls::TlsEndpoint;
use crate::error::TransportError;
use crate::tag::{Generation, Rank};

/// A bound endpoint of any transport, before its generation's mesh.
#[derive(Debug)]
pub enum PlaneEndpoint {
    /// TCP, shared memory with the ranks of this host as its config says.
    Tcp(TcpEndpoint),
    /// QUIC under mutual TLS.
    Quic(QuicEndpoint),
    /// TCP under mutual TLS, shared memory offered inside the session.
    Tls(TlsEndpoint),
    /// The in-process fabric (tests, an in-process cluster).
    Mem(MemEndpoint),
}

/// The settings of every transport a [`PlaneEndpoint`] may bind (TLS runs
/// on the TCP ones).
#[derive(Clone, Debug, Default)]
pub struct PlaneConfig {
    pub tcp: TcpConfig,
    pub quic: QuicConfig,
}

impl PlaneEndpoint {
    /// Binds and listens on `listen` (port 0 picks a free port) with the
    /// transport `kind` names.
    pub async fn bind(
        kind: TransportKind,
        listen: SocketAddr,
        config: PlaneConfig,
    ) -> Result<Self, TransportError> {
        Ok(match kind {
            TransportKind::Tcp => Self::Tcp(TcpEndpoint::bind(listen, config.tcp).await?),
            TransportKind::Quic => Self::Quic(QuicEndpoint::bind(listen, config.quic).await?),
            TransportKind::Tls => Self::Tls(TlsEndpoint::bind(listen, config.tcp).await?),
        })
    }
}

impl From<MemEndpoint> for PlaneEndpoint {
    fn from(ep: MemEndpoint) -> Self {
        Self::Mem(ep)
    }
}

impl Endpoint for PlaneEndpoint {
    type Address = PeerAddress;
    type Transport = DataPlane;

    /// The address as bound (every interface's, where it listens on all).
    fn address(&self) -> Result<PeerAddress, TransportError> {
        match self {
            Self::Tcp(ep) => ep.published(ep.local_addr()?.ip()),
            Self::Quic(ep) => ep.published(ep.local_addr()?.ip()),
            Self::Tls(ep) => ep.published(ep.local_addr()?.ip()),
            Self::Mem(ep) => ep.published(IpAddr::from([127, 0, 0, 1])),
        }
    }

    fn published(&self, ip: IpAddr) -> Result<PeerAddress, TransportError> {
        each_plane!(PlaneEndpoint, self, ep => ep.published(ip))
    }

    /// Everything the peer published: each variant picks its own kind.
    fn pick(peer: &PeerAddress) -> Option<PeerAddress> {
        Some(peer.clone())
    }

    async fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[PeerAddress],
        admission: Admission<'_>,
    ) -> Result<DataPlane, TransportError> {
        let plane = each_plane!(PlaneEndpoint, self, ep => {
            connect_published(ep, rank, generation, peers, admission)
                .await?
                .into()
        });
        Ok(plane)
    }

    async fn connect_book(
        self,
        rank: Rank,
        generation: Generation,
        book: Arc<PeerBook>,
        admission: Admission<'_>,
    ) -> Result<DataPlane, TransportError> {
        let plane = each_plane!(PlaneEndpoint, self, ep => {
            ep.connect_book(rank, generation, book, admission).await?.into()
        });
        Ok(plane)
    }
}
