//! NCCL as a [`Collectives`] backend for [`Device`] buffers: the same
//! collectives, with the same arguments and errors, as the host
//! `Communicator` runs over a byte transport.

use std::ops::Range;

use collectives::{
    CollectiveError, CollectiveOptions, Collectives, DType, Element, FusedPhases, Rank, ReduceOp,
};
use cudarc::nccl::sys::{ncclDataType_t, ncclRedOp_t};

use crate::buffer::{Device, DeviceBuffer};
use crate::comm::NcclComm;
use crate::error::GpuError;
use crate::sys::Call;

/// NCCL's name for an element type.
pub(crate) fn nccl_dtype(d: DType) -> ncclDataType_t {
    match d {
        DType::F32 => ncclDataType_t::ncclFloat32,
        DType::F64 => ncclDataType_t::ncclFloat64,
        DType::F16 => ncclDataType_t::ncclFloat16,
        DType::BF16 => ncclDataType_t::ncclBfloat16,
        DType::I32 => ncclDataType_t::ncclInt32,
        DType::I64 => ncclDataType_t::ncclInt64,
        DType::U8 => ncclDataType_t::ncclUint8,
    }
}

/// NCCL's operator for a reduction. `Average` is NCCL's own: floating-point
/// values are pre-multiplied by 1/n, integers summed and divided (as the host
/// path divides them).
pub(crate) fn nccl_op(op: ReduceOp) -> ncclRedOp_t {
    match op {
        ReduceOp::Sum => ncclRedOp_t::ncclSum,
        ReduceOp::Average => ncclRedOp_t::ncclAvg,
        ReduceOp::Min => ncclRedOp_t::ncclMin,
        ReduceOp::Max => ncclRedOp_t::ncclMax,
        ReduceOp::Product => ncclRedOp_t::ncclProd,
    }
}

/// Byte offset of element `at`.
fn off<T>(at: usize) -> u64 {
    (at * std::mem::size_of::<T>()) as u64
}

/// Checks `counts` against the world and a buffer of `len` elements.
fn check_counts(
    what: &'static str,
    counts: &[usize],
    size: usize,
    len: usize,
) -> Result<(), CollectiveError> {
    if counts.len() != size {
        return Err(CollectiveError::CountsLength {
            what,
            got: counts.len(),
            size,
        });
    }
    let sum: usize = counts.iter().sum();
    if sum != len {
        return Err(CollectiveError::CountsSum { what, sum, len });
    }
    Ok(())
}

/// `out[r]` = first element of block `r`.
fn starts(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |acc, &c| {
            let s = *acc;
            *acc += c;
            Some(s)
        })
        .collect()
}

impl NcclComm {
    /// Reduces `buf` in place.
    async fn allreduce_in_place<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<(), GpuError> {
        let count = buf.len();
        let event = {
            let (p, _g) = buf.write_ptr(&self.stream);
            let call = Call::AllReduce {
                send: p,
                recv: p,
                count,
                op: nccl_op(op),
            };
            self.issue("allreduce", &[call], nccl_dtype(T::DTYPE))?
        };
        self.complete("allreduce", event).await
    }
}

impl Collectives<Device> for NcclComm {
    fn rank(&self) -> Rank {
        NcclComm::rank(self)
    }

    fn size(&self) -> usize {
        NcclComm::size(self)
    }

    fn options(&self) -> &CollectiveOptions {
        &self.options
    }

    fn options_mut(&mut self) -> &mut CollectiveOptions {
        &mut self.options
    }

    async fn allreduce<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        op: ReduceOp,
    ) -> collectives::Result<()> {
        Ok(self.allreduce_in_place(buf, op).await?)
    }

    async fn allreduce_fused<T: Element>(
        &self,
        tensors: &mut [DeviceBuffer<T>],
        op: ReduceOp,
        scratch: &mut DeviceBuffer<T>,
        phases: &mut FusedPhases,
    ) -> collectives::Result<()> {
        let mut each: Vec<Vec<&mut DeviceBuffer<T>>> =
            tensors.iter_mut().map(|t| vec![t]).collect();
        Collectives::<Device>::allreduce_segments(self, &mut each, op, scratch, phases).await
    }

    /// Packs every segment into `scratch` (resized to the group), one
    /// allreduce, and copies the results back, all on the communicator's
    /// stream.
    async fn allreduce_segments<T: Element>(
        &self,
        tensors: &mut [Vec<&mut DeviceBuffer<T>>],
        op: ReduceOp,
        scratch: &mut DeviceBuffer<T>,
        phases: &mut FusedPhases,
    ) -> collectives::Result<()> {
        let total: usize = tensors.iter().flatten().map(|t| t.len()).sum();
        if scratch.len() != total {
            *scratch = DeviceBuffer::zeros(&self.stream, total)?;
        }
        let mut at = 0;
        for t in tensors.iter().flatten() {
            scratch.copy_in(at, t, &self.stream)?;
            at += t.len();
        }
        phases.packed = Some(std::time::Instant::now());
        self.allreduce_in_place(scratch, op).await?;
        phases.reduced = Some(std::time::Instant::now());
        let mut at = 0;
        for t in tensors.iter_mut().flatten() {
            scratch.copy_out(at, t, &self.stream)?;
            at += t.len();
        }
        Ok(())
    }

    async fn allgatherv_into<T: Element>(
        &self,
        input: &DeviceBuffer<T>,
        counts: &[usize],
        out: &mut DeviceBuffer<T>,
    ) -> collectives::Result<()> {
        check_counts("allgather counts", counts, self.size(), out.len())?;
        let mine = counts[self.rank()];
        if input.len() != mine {
            return Err(CollectiveError::CountsSum {
                what: "this rank's allgather count",
                sum: mine,
                len: input.len(),
            });
        }
        let event = {
            let (src, _gs) = input.read_ptr(&self.stream);
            let (dst, _gd) = out.write_ptr(&self.stream);
            let calls: Vec<Call> = if counts.iter().all(|&c| c == mine) {
                vec![Call::AllGather {
                    send: src,
                    recv: dst,
                    count: mine,
                }]
            } else {
                // Unequal blocks: one broadcast per root, in one group.
                let first = starts(counts);
                (0..self.size())
                    .map(|r| Call::Broadcast {
                        send: src,
                        recv: dst + off::<T>(first[r]),
                        count: counts[r],
                        root: r,
                    })
                    .collect()
            };
            self.issue("allgather", &calls, nccl_dtype(T::DTYPE))?
        };
        Ok(self.complete("allgather", event).await?)
    }

    async fn broadcast<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        root: Rank,
    ) -> collectives::Result<()> {
        if root >= self.size() {
            return Err(CollectiveError::InvalidRoot {
                root,
                size: self.size(),
            });
        }
        let count = buf.len();
        let event = {
            let (p, _g) = buf.write_ptr(&self.stream);
            let call = Call::Broadcast {
                send: p,
                recv: p,
                count,
                root,
            };
            self.issue("broadcast", &[call], nccl_dtype(T::DTYPE))?
        };
        Ok(self.complete("broadcast", event).await?)
    }

    async fn reducescatter<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        counts: &[usize],
        op: ReduceOp,
    ) -> collectives::Result<Range<usize>> {
        check_counts("reducescatter counts", counts, self.size(), buf.len())?;
        let first = starts(counts);
        let (rank, mine) = (self.rank(), counts[self.rank()]);
        let event = {
            let (p, _g) = buf.write_ptr(&self.stream);
            let calls: Vec<Call> = if counts.iter().all(|&c| c == mine) {
                // In place: NCCL's receive buffer is the block this rank keeps.
                vec![Call::ReduceScatter {
                    send: p,
                    recv: p + off::<T>(first[rank]),
                    count: mine,
                    op: nccl_op(op),
                }]
            } else {
                (0..self.size())
                    .map(|r| Call::Reduce {
                        send: p + off::<T>(first[r]),
                        recv: p + off::<T>(first[r]),
                        count: counts[r],
                        op: nccl_op(op),
                        root: r,
                    })
                    .collect()
            };
            self.issue("reducescatter", &calls, nccl_dtype(T::DTYPE))?
        };
        self.complete("reducescatter", event).await?;
        Ok(first[rank]..first[rank] + mine)
    }

    async fn alltoall<T: Element>(
        &self,
        input: &DeviceBuffer<T>,
        splits: &[usize],
    ) -> collectives::Result<(DeviceBuffer<T>, Vec<usize>)> {
        check_counts("alltoall splits", splits, self.size(), input.len())?;
        let got = self.exchange_splits(splits).await?;
        let total: usize = got.iter().sum();
        let mut out = DeviceBuffer::zeros(&self.stream, total)?;
        let (send_at, recv_at) = (starts(splits), starts(&got));
        let event = {
            let (src, _gs) = input.read_ptr(&self.stream);
            let (dst, _gd) = out.write_ptr(&self.stream);
            let mut calls = Vec::with_capacity(2 * self.size());
            for r in 0..self.size() {
                calls.push(Call::Send {
                    send: src + off::<T>(send_at[r]),
                    count: splits[r],
                    peer: r,
                });
                calls.push(Call::Recv {
                    recv: dst + off::<T>(recv_at[r]),
                    count: got[r],
                    peer: r,
                });
            }
            self.issue("alltoall", &calls, nccl_dtype(T::DTYPE))?
        };
        self.complete("alltoall", event).await?;
        Ok((out, got))
    }

    async fn barrier(&self) -> collectives::Result<()> {
        let mut one = DeviceBuffer::<i32>::zeros(&self.stream, 1)?;
        Ok(self.allreduce_in_place(&mut one, ReduceOp::Sum).await?)
    }
}

impl NcclComm {
    /// Block `rank` of `buf` (cut by `counts`) holds this rank's part;
    /// afterwards every block holds its owner's.
    pub(crate) async fn allgather_in_place<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        counts: &[usize],
    ) -> Result<(), CollectiveError> {
        check_counts("allgather counts", counts, self.size(), buf.len())?;
        let first = starts(counts);
        let event = {
            let (p, _g) = buf.write_ptr(&self.stream);
            let calls: Vec<Call> = (0..self.size())
                .map(|r| Call::Broadcast {
                    send: p + off::<T>(first[r]),
                    recv: p + off::<T>(first[r]),
                    count: counts[r],
                    root: r,
                })
                .collect();
            self.issue("allgather", &calls, nccl_dtype(T::DTYPE))?
        };
        Ok(self.complete("allgather", event).await?)
    }

    /// What every rank sends this one: an allgather of the split lists.
    async fn exchange_splits(&self, splits: &[usize]) -> Result<Vec<usize>, GpuError> {
        let n = self.size();
        let mine: Vec<i64> = splits.iter().map(|&s| s as i64).collect();
        let input = DeviceBuffer::from_host(&self.stream, &mine)?;
        let mut all = DeviceBuffer::<i64>::zeros(&self.stream, n * n)?;
        let event = {
            let (src, _gs) = input.read_ptr(&self.stream);
            let (dst, _gd) = all.write_ptr(&self.stream);
            let call = Call::AllGather {
                send: src,
                recv: dst,
                count: n,
            };
            self.issue("alltoall splits", &[call], ncclDataType_t::ncclInt64)?
        };
        self.complete("alltoall splits", event).await?;
        let all = all.to_host()?;
        (0..n)
            .map(|r| {
                let v = all[r * n + self.rank()];
                usize::try_from(v).map_err(|_| GpuError::Usage {
                    what: "alltoall splits",
                    detail: format!("rank {r} announced {v} elements"),
                })
            })
            .collect()
    }
}
