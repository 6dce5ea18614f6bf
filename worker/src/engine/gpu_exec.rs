//! Running a negotiated group of GPU tensors (docs/gpu.md): the executor's
//! one path (`exec`) in a GPU's room, on NCCL.
//!
//! The generation's NCCL communicator is made when its first GPU group runs:
//! negotiation puts that group at the same point on every rank, and the
//! host data plane carries NCCL's unique id. It lives and dies with the
//! engine, so a new generation (a new engine) makes a new one, and an NCCL
//! failure aborts it and fails the engine like any data-plane failure.
//! A fused group is packed into a GPU buffer kept across cycles, one per
//! element type, copied in and out on the communicator's stream. The
//! two-level allreduce (`--hierarchical-allreduce`) is the GPU's own: NCCL
//! on the host, the host data plane across hosts.

use collectives::{FusedPhases, GroupCollectives, Host};

use super::error::EngineError;
use super::exec::Failed;
use super::messages::Ready;
use super::tensor::Submission;

/// What the engine keeps for GPU tensors: nothing without the `cuda`
/// feature (no GPU tensor can be submitted then).
#[derive(Debug, Default)]
pub(super) struct GpuSide {
    /// How long one NCCL operation may take before its communicator is
    /// aborted (a peer is gone or stuck): the data plane's timeout.
    #[cfg(feature = "cuda")]
    timeout: std::time::Duration,
    #[cfg(feature = "cuda")]
    comm: Option<gpu::NcclComm>,
    /// The host's communicator of the two-level allreduce.
    #[cfg(feature = "cuda")]
    two_level: Option<gpu::TwoLevel>,
    #[cfg(feature = "cuda")]
    scratch: std::collections::HashMap<collectives::DType, gpu::DeviceTensor>,
}

impl GpuSide {
    /// Nothing yet; each NCCL operation may take `timeout`
    /// (`--gloo-timeout-seconds`, as one data-plane operation).
    pub(super) fn new(timeout: std::time::Duration) -> Self {
        #[cfg(feature = "cuda")]
        {
            Self {
                timeout,
                ..Self::default()
            }
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = timeout;
            Self::default()
        }
    }

    /// Runs `group` (GPU tensors, one kind and element type) with this
    /// rank's submissions `locals`; `host` carries NCCL's unique id when the
    /// communicator is made.
    pub(super) async fn run<B: GroupCollectives<Host>>(
        &mut self,
        host: &B,
        group: &[Ready],
        locals: Vec<Submission>,
        marks: &mut FusedPhases,
        active: usize,
    ) -> Result<(), Failed> {
        #[cfg(feature = "cuda")]
        {
            self.run_on_gpu(host, group, locals, marks, active).await
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (host, group, marks, active);
            Err((
                EngineError::Unsupported {
                    what: "a GPU tensor in a build without the `cuda` feature",
                    instead: "build with `--features cuda` (docs/gpu.md)",
                },
                locals,
            ))
        }
    }
}

/// What a joined rank cannot do with GPU tensors.
#[cfg(feature = "cuda")]
fn unsupported_join() -> EngineError {
    EngineError::Unsupported {
        what: "join() while GPU tensors are reduced",
        instead: "join only after the last GPU collective, or keep tensors on the host",
    }
}

#[cfg(feature = "cuda")]
mod cuda;
