//! TCP transport: one connection per pair of ranks, each carrying the stream
//! transport's frames ([`crate::transport::stream`]).
//!
//! Set-up: every rank binds a [`TcpEndpoint`], the addresses are exchanged by
//! whoever launches the ranks, then [`TcpEndpoint::connect`] builds the full mesh
//! (higher ranks dial lower ones, retrying until `connect_timeout`), each
//! connection proving job membership with the handshake before any payload;
//! or, with [`TcpConfig::on_demand`], connects to a peer only when a send
//! first needs it (`on_demand.rs`).
//! A peer on the same host then moves to shared memory
//! ([`crate::transport::shm`]), unless either side has it switched off.

use std::time::Duration;

use tokio::net::tcp::OwnedWriteHalf;
use tokio_util::either::Either;

use super::shm::{ShmConfig, ShmRead, ShmWrite};
use super::stream::StreamTransport;

pub(crate) mod carry;
pub(crate) mod mesh;
pub(crate) mod on_demand;
pub(crate) mod polled;

pub use carry::LinkCarry;
pub use mesh::TcpEndpoint;
pub use polled::{OnSocket, Polled, PolledRead, PolledTcp};

/// The reading half of a TCP mesh's link to one peer: the socket itself,
/// looked at for a while before it sleeps (`Left`), or, for a peer on the
/// same host, a shared-memory link (`crate::transport::shm`) whose doorbell
/// is that socket (`Right`).
pub type TcpRead = Either<PolledRead, ShmRead>;

/// The writing half of a TCP mesh's link to one peer (see [`TcpRead`]).
pub type TcpWrite = Either<OwnedWriteHalf, ShmWrite>;

/// One rank's end of a TCP mesh. Built by [`TcpEndpoint::connect`].
pub type TcpTransport = StreamTransport<TcpRead, TcpWrite>;

/// Settings of the TCP data plane, with the defaults a training job wants.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Longest time mesh set-up may take, peers starting late included. Default 30 s.
    pub connect_timeout: Duration,
    /// Longest wait for one message, or for the socket to take one send, before the
    /// peer is declared unresponsive. Default 60 s: generous enough for a slow peer's
    /// compute step between collectives, short enough that a hung job ends.
    pub io_timeout: Duration,
    /// `SO_SNDBUF`/`SO_RCVBUF` for every connection. Default `None` keeps Linux's
    /// buffer autotuning, the more generous choice: explicit sizes are capped at
    /// `net.core.{r,w}mem_max` (typically a few MiB), while autotuning grows a
    /// receive buffer up to `net.ipv4.tcp_rmem`'s maximum (32 MiB on Debian), and
    /// fixed sizes measured no faster (docs/BENCHMARKS.md).
    pub socket_buffer_bytes: Option<usize>,
    /// Largest payload accepted in one frame (a larger length prefix from a peer
    /// breaks the connection before anything is allocated). Default 1 GiB.
    pub max_frame_bytes: u32,
    /// The job's data-plane key: a connection that does not prove it holds
    /// it (the handshake's HMAC over a fresh nonce) is refused before any
    /// payload is read. Default: all zeroes (tests and benchmarks).
    pub job_key: control::DataKey,
    /// Shared memory with peers on the same host. Default on.
    pub shared_memory: ShmConfig,
    /// Connect to a peer only when a collective first sends to it (and
    /// accept peers' dials all through the generation), instead of the full
    /// mesh before the generation starts. Default off.
    pub on_demand: bool,
    /// With `on_demand`, this process's links between generations: each
    /// generation's links park when it ends and the next takes up those
    /// to peers still in it ([`LinkCarry`]). Default `None`: they close.
    pub carry: Option<LinkCarry>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(60),
            socket_buffer_bytes: None,
            max_frame_bytes: 1 << 30,
            job_key: control::DataKey::default(),
            shared_memory: ShmConfig::default(),
            on_demand: false,
            carry: None,
        }
    }
}
