//! Building a generation's transport: gloo's `transport::Device`.
//!
//! ```text
//!  bind/create endpoint ─> publish address() ─> (coordinator gathers every
//!  rank's address) ─> connect(rank, generation, peers) ─> Transport
//! ```
//! An endpoint exists before its generation does: its address goes to the
//! coordinator with the worker's registration, and the assignment brings back
//! every rank's. One endpoint builds one generation's transport; the next
//! generation gets a fresh endpoint.

use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;

use super::Transport;
use super::quic::{QuicAddress, QuicEndpoint, QuicTransport};
use super::tcp::{TcpEndpoint, TcpTransport};
use crate::error::TransportError;
use crate::tag::{Generation, Rank};

/// Where a rank's data plane can be reached, and how to build the connected
/// transport of a generation from every rank's address. A new transport
/// (QUIC, shared memory) implements this and [`Transport`].
pub trait Endpoint: Send + Sized {
    /// What peers need to reach this endpoint.
    type Address: Clone + Debug + Send + Sync;
    /// The transport this endpoint builds.
    type Transport: Transport;

    /// This endpoint's address, to hand to the peers.
    fn address(&self) -> Result<Self::Address, TransportError>;

    /// Connects to every peer (`peers[i]` is rank `i`'s address; this rank's
    /// own entry is its own) and returns the transport of `generation`.
    fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[Self::Address],
    ) -> impl Future<Output = Result<Self::Transport, TransportError>> + Send;
}

impl Endpoint for TcpEndpoint {
    type Address = SocketAddr;
    type Transport = TcpTransport;

    fn address(&self) -> Result<SocketAddr, TransportError> {
        self.local_addr()
    }

    fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[SocketAddr],
    ) -> impl Future<Output = Result<TcpTransport, TransportError>> + Send {
        TcpEndpoint::connect(self, rank, generation, peers)
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

    async fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[QuicAddress],
    ) -> Result<QuicTransport, TransportError> {
        let addrs: Vec<SocketAddr> = peers.iter().map(|p| p.addr).collect();
        QuicEndpoint::connect(self, rank, generation, &addrs).await
    }
}
