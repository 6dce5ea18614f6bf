//! [`TwoLevel`]: allreduce of GPU buffers in two levels, as Horovod's
//! hierarchical allreduce does, with the cross-host step on elasticrun's own
//! data plane (TCP or QUIC, authenticated, elastic) instead of NCCL's
//! sockets:
//!
//! ```text
//!  1. reduce-scatter among the GPUs of the host (NCCL)      block `local rank` on each GPU
//!  2. the block to host memory, allreduce among the ranks
//!     with this local rank on every host (host data plane)  the block complete
//!  3. the block back to the GPU, allgather on the host (NCCL) every block everywhere
//! ```
//! With one GPU per host step 1 and 3 are one-rank NCCL calls and all the
//! traffic is the host data plane's, so two processes on one GPU can act as
//! two hosts. An average is a sum on both levels, divided by the world size
//! in host memory (integers exactly as the host path divides them).

use std::sync::Arc;
use std::time::Duration;

use collectives::schedule::even_counts;
use collectives::{
    CollectiveError, Collectives, Element, GroupCollectives, Hierarchy, Host, ReduceOp,
};
use cudarc::driver::CudaStream;

use crate::buffer::{DeviceBuffer, HostStage};
use crate::comm::NcclComm;
use crate::error::GpuError;

/// This rank's NCCL communicator among its host's GPUs, and the grid.
#[derive(Debug)]
pub struct TwoLevel {
    local: NcclComm,
    hierarchy: Arc<Hierarchy>,
    rank: usize,
    /// Where this rank's block crosses to the host data plane and back.
    stage: HostStage,
}

impl TwoLevel {
    /// Makes the host's NCCL communicator: its first rank makes the unique
    /// id, `host` carries it among the host's ranks. Every rank of the world
    /// calls this at the same point.
    pub async fn connect<C: GroupCollectives<Host>>(
        host: &C,
        hierarchy: Arc<Hierarchy>,
        stream: Arc<CudaStream>,
        timeout: Duration,
    ) -> Result<Self, GpuError> {
        crate::probe()?;
        let rank = host.rank();
        let local_rank = hierarchy.local_rank(rank);
        let mut id = match local_rank {
            0 => crate::sys::unique_id().map_err(|code| GpuError::Nccl {
                call: "ncclGetUniqueId",
                code,
            })?,
            _ => [0u8; 128],
        };
        host.broadcast_among(hierarchy.host_ranks(rank), &mut id[..], 0)
            .await
            .map_err(|e| GpuError::Usage {
                what: "sharing NCCL's unique id among the host's ranks",
                detail: e.to_string(),
            })?;
        let local =
            NcclComm::init(stream, local_rank, hierarchy.local_size(), &id, timeout).await?;
        Ok(Self {
            local,
            hierarchy,
            rank,
            stage: HostStage::default(),
        })
    }

    /// The host's communicator (for the collectives that stay on one host).
    pub fn local(&self) -> &NcclComm {
        &self.local
    }

    /// Reduces `buf` over every rank of the world, in place.
    pub async fn allreduce<T: Element, C: GroupCollectives<Host>>(
        &mut self,
        host: &C,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<(), CollectiveError> {
        let level_op = match op {
            ReduceOp::Average => ReduceOp::Sum,
            op => op,
        };
        let counts = even_counts(buf.len(), self.hierarchy.local_size());
        let mine = self.local.reducescatter(buf, &counts, level_op).await?;
        let column = self.hierarchy.cross_ranks(self.rank);
        let block = self.stage.fill(buf, mine.clone())?;
        host.allreduce_among(&column, block, level_op).await?;
        if op == ReduceOp::Average {
            let n = self.hierarchy.size();
            if T::DTYPE.is_float() {
                T::scale(block, 1.0 / n as f64);
            } else {
                T::divide(block, n);
            }
        }
        self.stage
            .drain(buf, mine.start, mine.len(), self.local.stream())?;
        self.local.allgather_in_place(buf, &counts).await
    }
}
