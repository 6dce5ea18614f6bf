//! What ranks tell each other every cycle, and what they decide from it.

use autotune::SampleRecord;
use collectives::{DType, ReduceOp};
use serde::{Deserialize, Serialize};

use super::error::Mismatch;

/// The collective a tensor was submitted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    Allreduce(ReduceOp),
    Allgather,
    Broadcast {
        root: u32,
    },
    /// A broadcast whose length `root` alone knows: the other ranks' tensors
    /// may be of any length and take root's shape (an encoded object in one
    /// round, not its length and then its bytes).
    BroadcastSized {
        root: u32,
    },
    Alltoall,
    Reducescatter(ReduceOp),
}

impl Kind {
    /// Whether a rank that has joined can take part without a tensor of its
    /// own: as zeros in an allreduce, as no rows in an allgather.
    pub fn runs_with_joined_ranks(self) -> bool {
        matches!(self, Kind::Allreduce(_) | Kind::Allgather)
    }

    /// The request a joined `rank` stands in with, given `like` from a rank
    /// that submitted.
    pub fn stand_in(self, like: &Request) -> Request {
        let mut r = like.clone();
        if self == Kind::Allgather
            && let Some(rows) = r.shape.first_mut()
        {
            *rows = 0;
        }
        r
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Allreduce(_) => "allreduce",
            Kind::Allgather => "allgather",
            Kind::Broadcast { .. } | Kind::BroadcastSized { .. } => "broadcast",
            Kind::Alltoall => "alltoall",
            Kind::Reducescatter(_) => "reducescatter",
        }
    }
}

/// Where a submitted tensor's elements live. Every rank must submit a name's
/// tensor in the same place: host tensors run on the host data plane, GPU
/// tensors through NCCL (docs/gpu.md).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum Location {
    #[default]
    Host,
    Gpu,
}

/// One rank's description of a submitted tensor. Ranks must agree on all of it
/// except where a collective allows per-rank sizes (allgather's first
/// dimension, alltoall's splits).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Request {
    pub name: String,
    pub kind: Kind,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Sizes of the members of a grouped submission (they travel as one
    /// tensor); empty otherwise.
    pub parts: Vec<usize>,
    /// Host or GPU memory.
    pub place: Location,
}

impl Request {
    /// Elements of the tensor (saturating: a peer's request was checked to
    /// fit in memory when it was decoded).
    pub fn elements(&self) -> usize {
        self.shape.iter().fold(1, |n, &d| n.saturating_mul(d))
    }

    /// Whether `other` (another rank's request under the same name) can run
    /// in the same collective as this one.
    pub fn agrees_with(&self, other: &Request) -> bool {
        if self.kind != other.kind
            || self.dtype != other.dtype
            || self.parts != other.parts
            || self.place != other.place
        {
            return false;
        }
        match self.kind {
            // Per-rank first dimension; the rest must match.
            Kind::Allgather => {
                self.shape.len() == other.shape.len() && self.shape.get(1..) == other.shape.get(1..)
            }
            // Per-rank splits, or root's length for all; only the element
            // type must match.
            Kind::Alltoall | Kind::BroadcastSized { .. } => true,
            _ => self.shape == other.shape,
        }
    }

    /// "allreduce(sum) f32 [4, 3]" for error messages.
    pub fn describe(&self) -> String {
        let kind = match self.kind {
            Kind::Allreduce(op) | Kind::Reducescatter(op) => {
                format!("{}({op:?})", self.kind.name())
            }
            Kind::Broadcast { root } => format!("broadcast(root {root})"),
            Kind::BroadcastSized { root } => format!("broadcast(root {root}, its length)"),
            k => k.name().to_owned(),
        };
        let place = match self.place {
            Location::Host => "",
            Location::Gpu => " on a GPU",
        };
        if self.parts.is_empty() {
            format!("{kind} {:?} {:?}{place}", self.dtype, self.shape)
        } else {
            format!(
                "{kind} {:?} {:?} in parts {:?}{place}",
                self.dtype, self.shape, self.parts
            )
        }
    }
}

/// What one rank sends in one negotiation round: the tensors it submitted
/// since the last round, as bits for those in the response cache and as full
/// requests for the rest, and whether it is shutting down.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct RankMsg {
    pub cached: Vec<u64>,
    pub new: Vec<Request>,
    pub shutdown: bool,
    /// This rank has called `join`: it has no more data and takes part in
    /// the others' allreduces and allgathers with nothing of its own.
    pub joined: bool,
    /// Rank 0 only: engine settings every rank switches to at the end of
    /// this round (the autotuner's choice). Other ranks' values are ignored.
    pub retune: Option<Tuning>,
    /// Rank 0 only: the autotune sample it completed, which every rank adds to
    /// its replica of the per-world-size memory.
    pub sample: Option<SampleRecord>,
}

/// Engine settings that may change while the engine runs, all ranks at the
/// same round: every knob the autotuner moves. Hierarchical collectives are
/// switched on only where the host layout has a grid.
pub use control::Tuning;

impl RankMsg {
    pub(super) fn set_bit(&mut self, bit: usize) {
        let word = bit / 64;
        if self.cached.len() <= word {
            self.cached.resize(word + 1, 0);
        }
        self.cached[word] |= 1 << (bit % 64);
    }

    pub(super) fn bits(&self) -> impl Iterator<Item = usize> + '_ {
        self.cached.iter().enumerate().flat_map(|(w, &word)| {
            (0..64)
                .filter(move |b| word & (1 << b) != 0)
                .map(move |b| w * 64 + b)
        })
    }
}

/// Why the messages gathered in a round were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum RoundError {
    #[error(
        "rank {rank}'s negotiation message of {count} bytes runs past the {len} bytes gathered"
    )]
    Truncated {
        rank: usize,
        count: usize,
        len: usize,
    },
    #[error("undecodable negotiation message from rank {rank}: {why}")]
    Undecodable { rank: usize, why: String },
    #[error("rank {rank} submitted tensor {name} of shape {shape:?}: more bytes than memory holds")]
    TooLarge {
        rank: usize,
        name: String,
        shape: Vec<usize>,
    },
}

impl RoundError {
    /// The rank whose message was refused.
    pub(super) fn rank(&self) -> usize {
        match self {
            RoundError::Truncated { rank, .. }
            | RoundError::Undecodable { rank, .. }
            | RoundError::TooLarge { rank, .. } => *rank,
        }
    }
}

/// Largest negotiation message a rank sends or decodes: a round's new
/// requests (names, shapes) are small, and without a limit a forged length
/// inside a message would allocate it.
const MAX_ROUND_MESSAGE: usize = 64 << 20;

/// How negotiation messages are encoded, at both ends.
pub(super) fn round_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_ROUND_MESSAGE>()
}

/// Bytes of a tensor of `shape` and `dtype`, when they fit in an allocation.
pub(super) fn tensor_bytes(dtype: DType, shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .filter(|&b| isize::try_from(b).is_ok())
}

/// Every rank's message of a round, from the bytes the negotiation allgather
/// gathered (`counts[r]` of them from rank `r`, in rank order). A message
/// must fill its bytes exactly (and claim no more than
/// [`MAX_ROUND_MESSAGE`] inside), and every tensor it submits must fit in
/// memory, so that later sizes cannot overflow.
pub(super) fn decode_round(all: &[u8], counts: &[usize]) -> Result<Vec<RankMsg>, RoundError> {
    let mut msgs = Vec::with_capacity(counts.len());
    let mut at = 0usize;
    for (rank, &count) in counts.iter().enumerate() {
        let truncated = RoundError::Truncated {
            rank,
            count,
            len: all.len(),
        };
        let end = at.checked_add(count).ok_or(truncated.clone())?;
        let bytes = all.get(at..end).ok_or(truncated)?;
        let undecodable = |why: String| RoundError::Undecodable { rank, why };
        let (m, used): (RankMsg, usize) = bincode::serde::decode_from_slice(bytes, round_config())
            .map_err(|e| undecodable(e.to_string()))?;
        if used != count {
            return Err(undecodable(format!("{} bytes after it", count - used)));
        }
        if let Some(r) = m
            .new
            .iter()
            .find(|r| tensor_bytes(r.dtype, &r.shape).is_none())
        {
            return Err(RoundError::TooLarge {
                rank,
                name: r.name.clone(),
                shape: r.shape.clone(),
            });
        }
        msgs.push(m);
        at = end;
    }
    Ok(msgs)
}

/// A negotiated tensor: every rank's request (they agree), in rank order.
/// Shared, not copied, between the response cache and each round that runs
/// it: at 128 ranks a copy was 128 requests allocated and freed per tensor
/// per round on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Ready {
    pub per_rank: std::sync::Arc<[Request]>,
}

impl Ready {
    pub(super) fn name(&self) -> &str {
        &self.per_rank[0].name
    }
    pub(super) fn kind(&self) -> Kind {
        self.per_rank[0].kind
    }
    pub(super) fn dtype(&self) -> DType {
        self.per_rank[0].dtype
    }
    pub(super) fn place(&self) -> Location {
        self.per_rank[0].place
    }
}

/// What every rank does, in the same order, after a round (the [`Kind`]s that
/// run while ranks have joined: see [`Kind::runs_with_joined_ranks`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Run these tensors as one collective (several: fused).
    Run(Vec<Ready>),
    /// Fail this tensor on every rank that submitted it.
    Fail { name: String, why: Mismatch },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip() {
        let mut m = RankMsg::default();
        for b in [0, 3, 64, 130] {
            m.set_bit(b);
        }
        assert_eq!(m.bits().collect::<Vec<_>>(), vec![0, 3, 64, 130]);
    }

    #[test]
    fn allgather_allows_per_rank_rows_only() {
        let r = |shape: Vec<usize>| Request {
            name: "g".into(),
            kind: Kind::Allgather,
            dtype: DType::F32,
            shape,
            parts: vec![],
            place: Location::Host,
        };
        assert!(r(vec![2, 3]).agrees_with(&r(vec![5, 3])));
        assert!(!r(vec![2, 3]).agrees_with(&r(vec![2, 4])));
        let a = |shape: Vec<usize>| Request {
            name: "a".into(),
            kind: Kind::Allreduce(ReduceOp::Sum),
            dtype: DType::F32,
            shape,
            parts: vec![],
            place: Location::Host,
        };
        assert!(!a(vec![4]).agrees_with(&a(vec![5])));
    }

    #[test]
    fn a_tensor_on_a_gpu_here_and_in_host_memory_there_disagrees() {
        let host = Request {
            name: "w".into(),
            kind: Kind::Allreduce(ReduceOp::Sum),
            dtype: DType::F32,
            shape: vec![4],
            parts: vec![],
            place: Location::Host,
        };
        let gpu = Request {
            place: Location::Gpu,
            ..host.clone()
        };
        assert!(!host.agrees_with(&gpu));
        assert!(gpu.agrees_with(&gpu.clone()));
        assert_eq!(gpu.describe(), "allreduce(Sum) F32 [4] on a GPU");
        assert_eq!(host.describe(), "allreduce(Sum) F32 [4]");
    }
}
