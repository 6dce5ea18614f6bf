//! QUIC transport: one connection per pair of ranks, under mutual TLS 1.3
//! with the job's certificate authority ([`control::pki`]), each carrying one
//! bi-directional stream with the stream transport's frames
//! ([`crate::transport::stream`]), so framing, direct receives, goodbyes and
//! loss work as over TCP. Inside the encrypted stream the data-plane
//! handshake still proves the job key, generation and rank, as over TCP.
//!
//! Set-up: every rank binds a [`QuicEndpoint`] (which makes its TLS key) and
//! publishes its address and public key; the coordinator's grant (the job's
//! CA certificate and this rank's leaf) arrives with the assignment
//! ([`QuicEndpoint::prepare`]); then [`QuicEndpoint::connect`] builds the
//! mesh, higher ranks dialing lower ones and asking for the exact name of the
//! peer's leaf.
//!
//! With [`QuicConfig::on_demand`] no mesh is built: a rank connects to a
//! peer when a send first needs it (`on_demand.rs`), as over TCP.
//!
//! Loss: as over TCP, plus the QUIC idle timeout: a killed peer's host says
//! nothing over UDP, so its connection is lost once nothing has come from it
//! for [`QuicConfig::idle_timeout`] (keep-alives flow four times as often).

use std::time::Duration;

use bytes::Bytes;
use quinn::{Endpoint as QuinnEndpoint, RecvStream, VarInt};

use super::Transport;
use super::end::Breaker;
use super::stream::{StreamLimits, StreamTransport};
use crate::error::TransportError;
use crate::tag::{Generation, Rank, Tag};
use on_demand::Conns;
use sender::Sender;

mod mesh;
mod on_demand;
mod path;
mod sender;
mod tls;

pub use mesh::{QuicAddress, QuicEndpoint};

/// Settings of the QUIC data plane, with the defaults a training job wants.
#[derive(Clone, Debug)]
pub struct QuicConfig {
    /// Longest time mesh set-up may take, peers starting late included. Default 30 s.
    pub connect_timeout: Duration,
    /// Longest wait for one message, or for a stream to take one send. Default 60 s.
    pub io_timeout: Duration,
    /// A connection from which nothing (not even a keep-alive) came for this
    /// long is lost: how soon a killed peer is noticed. Default 5 s.
    pub idle_timeout: Duration,
    /// Largest payload accepted in one frame. Default 1 GiB.
    pub max_frame_bytes: u32,
    /// Flow-control window of a stream; the connection's send window is
    /// twice it. Default 2 MiB: four of the ring's default 512 KiB segments,
    /// far above what a link's round trip keeps in flight at QUIC's speed,
    /// and small enough that what a sender runs ahead by stays in the CPU's
    /// caches and under quinn's reassembly limit of 2,048 pieces (past which
    /// it copies what it holds): 16 MiB allreduces ran 1.10-1.20x faster than
    /// with 32 MiB (docs/BENCHMARKS.md). At 512 KiB (one segment) senders
    /// wait for credit.
    pub stream_window_bytes: u64,
    /// Largest UDP payload this endpoint sends or takes (path MTU discovery
    /// finds what the path allows, up to this). Default 65,000: loopback and
    /// jumbo-frame links carry it, and each packet pays its own encryption,
    /// header protection and acknowledgement.
    pub max_udp_payload: u16,
    /// The packet size a connection starts with, before discovery. Default 1,200.
    pub initial_mtu: u16,
    /// The congestion window a connection starts with (Cubic's initial
    /// window), in bytes. Default: quinn's (14,720).
    pub initial_window_bytes: u64,
    /// `SO_SNDBUF`/`SO_RCVBUF` of the UDP socket (forced above the system's
    /// maximum where the process may). Default 8 MiB.
    pub socket_buffer_bytes: usize,
    /// The job's data-plane key, which the handshake inside each connection
    /// proves. Default: all zeroes (tests and benchmarks).
    pub job_key: control::DataKey,
    /// Connect a peer only when a send first needs it, accepting peers'
    /// dials all through the generation, instead of the full mesh before
    /// the generation starts. Default: false (the full mesh).
    pub on_demand: bool,
}

impl QuicConfig {
    /// The stream transport's limits under these settings.
    fn limits(&self) -> StreamLimits {
        StreamLimits {
            io_timeout: self.io_timeout,
            max_frame_bytes: self.max_frame_bytes,
        }
    }
}

impl Default for QuicConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(5),
            max_frame_bytes: 1 << 30,
            stream_window_bytes: 2 << 20,
            max_udp_payload: 65_000,
            initial_mtu: 1200,
            initial_window_bytes: 14_720,
            socket_buffer_bytes: 8 << 20,
            job_key: control::DataKey::default(),
            on_demand: false,
        }
    }
}

/// Application close codes.
const CLOSE_DONE: u32 = 0;
const CLOSE_ABANDONED: u32 = 1;

/// Longest a rank that leaves waits for its peers to acknowledge its goodbye.
const LINGER: Duration = Duration::from_secs(5);

/// One rank's end of a QUIC mesh. Built by [`QuicEndpoint::connect`].
#[derive(Debug)]
pub struct QuicTransport {
    inner: Option<StreamTransport<RecvStream, Sender>>,
    connections: Conns,
    endpoint: QuinnEndpoint,
}

impl QuicTransport {
    fn inner(&self) -> &StreamTransport<RecvStream, Sender> {
        // Taken out only by `shutdown`, which consumes the transport.
        self.inner.as_ref().unwrap_or_else(|| unreachable!())
    }

    /// How many links (QUIC connections) this rank holds: every other
    /// rank's in the full mesh; on demand, those its collectives needed.
    pub fn link_count(&self) -> usize {
        self.inner().link_count()
    }
}

impl Transport for QuicTransport {
    fn rank(&self) -> Rank {
        self.inner().rank()
    }

    fn size(&self) -> usize {
        self.inner().size()
    }

    fn generation(&self) -> Generation {
        self.inner().generation()
    }

    async fn send(&self, to: Rank, tag: Tag, payload: &[u8]) -> Result<(), TransportError> {
        self.inner().send(to, tag, payload).await
    }

    async fn recv(&self, from: Rank, tag: Tag) -> Result<Bytes, TransportError> {
        self.inner().recv(from, tag).await
    }

    async fn recv_into(&self, from: Rank, tag: Tag, dst: &mut [u8]) -> Result<(), TransportError> {
        self.inner().recv_into(from, tag, dst).await
    }

    async fn send_parts(&self, to: Rank, tag: Tag, parts: &[&[u8]]) -> Result<(), TransportError> {
        self.inner().send_parts(to, tag, parts).await
    }

    async fn recv_into_parts(
        &self,
        from: Rank,
        tag: Tag,
        dst: &mut [&mut [u8]],
    ) -> Result<(), TransportError> {
        self.inner().recv_into_parts(from, tag, dst).await
    }

    fn arrival(
        &self,
        ops: std::ops::Range<u64>,
    ) -> Option<impl std::future::Future<Output = ()> + Send + '_> {
        self.inner().arrival(ops)
    }

    fn stale_refused(&self) -> u64 {
        self.inner().stale_refused()
    }

    fn breaker(&self) -> Breaker {
        self.inner().breaker()
    }

    /// Says goodbye, waits (at most `LINGER`) until each peer's QUIC stack
    /// has acknowledged everything sent, then leaves the connections open
    /// until each peer closes its end (at most `LINGER` more, in the
    /// background): closing at once would drop data still unsent, which
    /// TCP's kernel would have delivered, and a peer's QUIC stack that
    /// acknowledged the goodbye but was not read yet would lose it to the
    /// close (the peer would see a lost connection, not a departure).
    async fn shutdown(mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        let writers = inner.leave().await;
        let acked = futures::future::join_all(
            writers
                .iter()
                .filter_map(Sender::stream)
                .map(|s| s.stopped()),
        );
        let _ = tokio::time::timeout(LINGER, acked).await;
        let connections = self.connections.take();
        let endpoint = self.endpoint.clone();
        tokio::spawn(async move {
            let closed = futures::future::join_all(connections.iter().map(|c| c.closed()));
            let _ = tokio::time::timeout(LINGER, closed).await;
            for c in connections {
                tracing::debug!(peer = %c.remote_address(), stats = ?c.stats(), "QUIC connection done");
                c.close(VarInt::from_u32(CLOSE_DONE), b"done");
            }
            drop(endpoint);
        });
    }
}

impl Drop for QuicTransport {
    fn drop(&mut self) {
        // Without a goodbye: the peers see the connections closed and treat
        // this rank as crashed, at once rather than after the idle timeout.
        self.connections.close(CLOSE_ABANDONED, b"abandoned");
        let _ = &self.endpoint;
    }
}
