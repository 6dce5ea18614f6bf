//! Why a submitted tensor did not complete, with the facts as fields.

use std::sync::Arc;

use collectives::{CollectiveError, DType};

/// Why a submitted tensor did not complete.
#[derive(Clone, Debug, thiserror::Error)]
pub enum EngineError {
    /// The ranks disagreed about the tensor.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
    /// The data plane failed (a peer lost, a timeout); the engine has stopped.
    #[error("collective failed: {0}")]
    Collective(Arc<CollectiveError>),
    #[error("the engine has shut down")]
    ShutDown,
    /// The submission was refused before it reached the other ranks.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// A broken invariant of the engine, or ranks running different builds.
    #[error("internal error: {0}")]
    Internal(#[from] Internal),
    /// Something this build or this version does not do, and what to do
    /// instead.
    #[error("{what} is not supported: {instead}")]
    Unsupported {
        what: &'static str,
        instead: &'static str,
    },
}

impl EngineError {
    /// Whether the data plane stopped because its owner ended the
    /// generation on purpose ([`collectives::TransportError::Ended`]): an
    /// elastic worker moving to its next generation, not a failure.
    pub fn is_generation_ended(&self) -> bool {
        matches!(
            self,
            EngineError::Collective(c)
                if matches!(**c, CollectiveError::Transport(collectives::TransportError::Ended { .. }))
        )
    }
}

impl From<CollectiveError> for EngineError {
    fn from(e: CollectiveError) -> Self {
        EngineError::Collective(Arc::new(e))
    }
}

/// How the ranks' submissions of tensor `name` disagreed; every rank that
/// submitted it gets the same error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("tensor {name}: rank(s) {ranks:?} shut down without submitting it")]
    ShutDown { name: String, ranks: Vec<usize> },
    #[error("tensor {name}: no rank submitted it")]
    NoSubmitter { name: String },
    #[error(
        "tensor {name}: rank(s) {ranks:?} have joined; only allreduce and allgather run while ranks have joined"
    )]
    Joined { name: String, ranks: Vec<usize> },
    /// `views[r]` is rank `r`'s description ("allreduce(Sum) F32 \[4\]").
    #[error(
        "tensor {name} was submitted differently across ranks: {}",
        each_rank(views)
    )]
    Differs { name: String, views: Vec<String> },
}

impl Mismatch {
    /// The tensor the ranks disagreed about.
    pub fn name(&self) -> &str {
        match self {
            Mismatch::ShutDown { name, .. }
            | Mismatch::NoSubmitter { name }
            | Mismatch::Joined { name, .. }
            | Mismatch::Differs { name, .. } => name,
        }
    }
}

fn each_rank(views: &[String]) -> String {
    views
        .iter()
        .enumerate()
        .map(|(r, v)| format!("rank {r}: {v}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A submission refused on this rank, before negotiation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("tensor data has {elements} elements but shape {shape:?}")]
    Shape { elements: usize, shape: Vec<usize> },
    #[error("broadcast root {root} is not a rank of this job (size {size})")]
    Root { root: usize, size: usize },
    #[error("alltoall splits {splits:?} do not divide {elements} elements among {size} ranks")]
    Splits {
        splits: Vec<usize>,
        elements: usize,
        size: usize,
    },
    #[error("join called twice, or after shutdown")]
    Join,
    #[error("backward_passes_per_step must be at least 1")]
    PassesPerStep,
    #[error("gradient {name} was submitted twice in one pass")]
    Resubmitted { name: String },
    #[error("gradient(s) {names:?} were accumulated but not submitted in the step's last pass")]
    Unsent { names: Vec<String> },
    #[error("gradient {name} changed length from {was} to {now} between passes")]
    Length {
        name: String,
        was: usize,
        now: usize,
    },
}

/// A broken invariant inside the engine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Internal {
    #[error("tensor {name} holds {held}, not {wanted}")]
    ElementType {
        name: String,
        held: DType,
        wanted: DType,
    },
    #[error("{name}: lent memory's result came back in the engine's own {held} memory")]
    NotLent { name: String, held: DType },
    #[error("a GPU tensor's result came back in host memory ({held})")]
    NotOnGpu { held: DType },
    #[error("a negotiated group is empty")]
    EmptyGroup,
    #[error("tensor {name} ran but was not submitted here")]
    NotSubmitted { name: String },
    #[error(
        "the negotiation communicator is rank {} of {}, the data plane rank {} of {}",
        negotiation.0, negotiation.1, data.0, data.1
    )]
    Planes {
        /// (rank, size) of each communicator.
        negotiation: (usize, usize),
        data: (usize, usize),
    },
    #[error("cannot encode this rank's negotiation message: {why}")]
    Encode { why: String },
    /// `why` says what was wrong with rank `rank`'s message.
    #[error("negotiation round refused: {why}")]
    Decode { rank: usize, why: String },
    #[error("negotiation: {why}")]
    Negotiation { why: String },
    #[error("the engine task failed: {why}")]
    Task { why: String },
}

#[cfg(test)]
mod tests {
    use collectives::{Generation, LossCause, TransportError};

    use super::*;

    #[test]
    fn only_a_generation_ended_on_purpose_is_no_failure() {
        let ended = TransportError::Ended {
            generation: Generation(2),
            why: "this worker is rejoining the job".into(),
        };
        assert!(EngineError::from(CollectiveError::from(ended)).is_generation_ended());
        let lost = TransportError::PeerLost {
            rank: 1,
            generation: Generation(2),
            cause: LossCause::Closed,
        };
        assert!(!EngineError::from(CollectiveError::from(lost)).is_generation_ended());
        assert!(!EngineError::ShutDown.is_generation_ended());
    }
}
