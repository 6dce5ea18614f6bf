//! Typed errors of the data plane. Anything that can arrive from the network is a
//! value here, never a panic.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::dtype::DType;
use crate::tag::{Generation, Rank, Tag};

/// Why a peer is considered lost.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LossCause {
    #[error("connection closed")]
    Closed,
    #[error("i/o error: {0:?}")]
    Io(io::ErrorKind),
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    #[error("frame of {len} bytes exceeds the {limit}-byte limit")]
    FrameTooLarge { len: u64, limit: u64 },
    #[error("a send to it was abandoned half-way")]
    AbandonedSend,
    #[error("a receive from it was abandoned half-way")]
    AbandonedRecv,
    #[error("the transport was shut down")]
    Shutdown,
    #[error("it left the generation (finished its work and closed cleanly)")]
    Departed,
    #[error("it left the generation for the next one, keeping the link")]
    Carried,
}

/// Errors of a [`Transport`](crate::Transport).
///
/// Apart from [`TransportError::GenerationMismatch`] and [`TransportError::InvalidRank`]
/// (mistakes of the caller), an error leaves the transport broken: every later call
/// fails too, and the owner rebuilds the data plane for the next generation.
#[derive(Clone, Debug, thiserror::Error)]
pub enum TransportError {
    #[error("peer rank {rank} lost in generation {generation}: {cause}")]
    PeerLost {
        rank: Rank,
        generation: Generation,
        cause: LossCause,
    },
    #[error("timed out after {after:?} waiting on rank {rank} ({tag})")]
    Timeout {
        rank: Rank,
        tag: Tag,
        after: Duration,
    },
    #[error("message of generation {got} refused: this transport serves generation {current}")]
    GenerationMismatch {
        got: Generation,
        current: Generation,
    },
    /// The owner ended this generation (see [`crate::Transport::breaker`]):
    /// elastic jobs do so when the coordinator says workers failed.
    #[error("generation {generation} was ended: {why}")]
    Ended {
        generation: Generation,
        why: Arc<str>,
    },
    #[error("rank {rank} is outside a world of size {size}")]
    InvalidRank { rank: Rank, size: usize },
    /// Rank `from` could not open its data-plane connection to rank `rank`.
    #[error("rank {from} cannot reach rank {rank} at {addr}: {source} (tried for {after:.1?})")]
    Connect {
        from: Rank,
        rank: Rank,
        addr: SocketAddr,
        after: Duration,
        source: Arc<io::Error>,
    },
    #[error(
        "mesh set-up for generation {generation} timed out after {after:?}; missing ranks {missing:?}"
    )]
    SetupTimeout {
        generation: Generation,
        after: Duration,
        missing: Vec<Rank>,
    },
    #[error("handshake with rank {rank} failed: {reason}")]
    Handshake { rank: Rank, reason: &'static str },
    /// Rank `rank`'s data-plane address, which the assignment did not
    /// carry, could not be had.
    #[error("no data-plane address for rank {rank}: {reason}")]
    Lookup { rank: Rank, reason: String },
    #[error("TLS with rank {rank} at {addr} failed: {reason}")]
    Tls {
        rank: Rank,
        addr: std::net::SocketAddr,
        reason: String,
    },
    #[error("rank {rank} sent {got} bytes where {expected} were expected ({tag})")]
    WrongLength {
        rank: Rank,
        tag: Tag,
        expected: usize,
        got: usize,
    },
    #[error("payload of {len} bytes exceeds the {limit}-byte frame limit")]
    PayloadTooLarge { len: usize, limit: u64 },
    #[error("socket set-up failed: {0}")]
    Socket(Arc<io::Error>),
}

impl TransportError {
    pub(crate) fn socket(e: io::Error) -> Self {
        Self::Socket(Arc::new(e))
    }
}

/// Errors of a collective operation.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CollectiveError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(
        "rank {from} sent {got} bytes where {expected} were expected ({tag}); ranks disagree on the tensor size"
    )]
    LengthMismatch {
        from: Rank,
        tag: Tag,
        expected: usize,
        got: usize,
    },
    #[error("rank {from} sent a gather message ({tag}) with {what} (the block of rank {block})")]
    BadGather {
        from: Rank,
        tag: Tag,
        what: &'static str,
        block: u64,
    },
    #[error("rank {from} sent {got} bytes ({tag}), not a whole number of {dtype} elements")]
    RaggedPayload {
        from: Rank,
        tag: Tag,
        got: usize,
        dtype: DType,
    },
    #[error("{what} has {got} entries; the world has {size} ranks")]
    CountsLength {
        what: &'static str,
        got: usize,
        size: usize,
    },
    #[error("{what} add up to {sum} elements but the buffer holds {len}")]
    CountsSum {
        what: &'static str,
        sum: usize,
        len: usize,
    },
    #[error("root rank {root} is outside a world of size {size}")]
    InvalidRoot { root: Rank, size: usize },
    #[error("scale factors apply to floating-point tensors only, not {dtype}")]
    ScaleOnInteger { dtype: DType },
    #[error("rank {from} announced an impossible element count {count}")]
    BadCount { from: Rank, count: i64 },
    #[error("the schedule needs more than 2^32 messages; raise the segment size")]
    TooManyMessages,
    #[error("operation id {op_id} leaves no room for the ids of its parts")]
    OpIdSpace { op_id: u64 },
    #[error("the host layout describes {layout} ranks; the world has {size}")]
    HierarchySize { layout: usize, size: usize },
    #[error("a hierarchical layout was given but no host layout is set in the options")]
    NoHierarchy,
    #[error("the hierarchical allreduce runs on one buffer, not {pieces} pieces")]
    PiecesOnHierarchy { pieces: usize },
    #[error("this backend takes each tensor in one piece of memory, not in segments")]
    SegmentsUnsupported,
    #[error("rank {rank} is not among the ranks {members:?} of a group collective")]
    NotAMember { rank: Rank, members: Vec<Rank> },
    /// A collective library that runs its own collectives (NCCL) failed; its
    /// communicator is unusable and the generation must be rebuilt.
    #[error("{backend}: {message}")]
    BackendFailed {
        backend: &'static str,
        message: String,
    },
    /// A collective library's operation did not finish in time (a peer is
    /// gone or stuck); its communicator was aborted.
    #[error("{backend} {op} did not finish within {after:?}; the communicator was aborted")]
    BackendTimeout {
        backend: &'static str,
        op: &'static str,
        after: std::time::Duration,
    },
}

pub type Result<T, E = CollectiveError> = std::result::Result<T, E>;
