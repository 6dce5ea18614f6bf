//! [`Collectives`]: the seam between the worker engine and whatever runs its
//! collectives. Today's implementation is [`Communicator`] (ring and tree
//! algorithms over a byte [`Transport`], host memory); a collective library
//! that moves device buffers (NCCL) implements the same trait for its own
//! [`Memory`], not [`Transport`], since it is a library of collectives and not
//! a byte pipe.
//!
//! The trait is generic over the memory its buffers live in, so that the
//! engine's host path is written once against `Collectives<Host>` (whose
//! slices are `[T]`) and a device path against `Collectives<Device>`.

mod fused;

use std::future::Future;
use std::ops::Range;
use std::time::Instant;

use crate::comm::{CollectiveOptions, Communicator};
use crate::dtype::Element;
use crate::error::{CollectiveError, Result};
use crate::reduce::ReduceOp;
use crate::tag::Rank;
use crate::transport::Transport;

/// Where a backend's buffers live.
pub trait Memory: Send + Sync + 'static {
    /// A tensor's elements in this memory, borrowed.
    type Slice<T: Element>: ?Sized + Send + Sync;
    /// Owned elements in this memory: what a backend hands back, and the
    /// fusion buffer a fused collective packs into.
    type Owned<T: Element>: Send + Sync;
}

/// Host memory: slices are `[T]`, owned buffers `Vec<T>`.
#[derive(Debug)]
pub enum Host {}

impl Memory for Host {
    type Slice<T: Element> = [T];
    type Owned<T: Element> = Vec<T>;
}

/// When a fused collective's phases ended: packing into the fusion buffer,
/// and the collective itself (the timeline's memcpy phases).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FusedPhases {
    pub packed: Option<Instant>,
    pub reduced: Option<Instant>,
}

/// The collectives of one world, on buffers in memory `M`. Every rank must
/// call the same collectives in the same order with matching sizes (the
/// worker engine's negotiation guarantees it).
pub trait Collectives<M: Memory>: Send + Sync {
    fn rank(&self) -> Rank;

    fn size(&self) -> usize;

    /// The algorithm tuning (segment size, small-message threshold,
    /// hierarchy) that the autotuner adjusts. A backend that chooses its own
    /// algorithms keeps the values and may ignore them.
    fn options(&self) -> &CollectiveOptions;

    /// Changes the tuning between collectives; every rank makes the same
    /// change at the same point.
    fn options_mut(&mut self) -> &mut CollectiveOptions;

    /// Reduces `buf` element-wise over all ranks, in place.
    fn allreduce<T: Element>(
        &self,
        buf: &mut M::Slice<T>,
        op: ReduceOp,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Reduces two or more tensors in one collective, packed into `scratch`
    /// (empty; its memory is the caller's to keep), each element combined
    /// exactly as when its tensor runs alone, so that fusion never changes a
    /// result. `phases` gets when packing and the collective ended.
    fn allreduce_fused<T: Element>(
        &self,
        tensors: &mut [M::Owned<T>],
        op: ReduceOp,
        scratch: &mut M::Owned<T>,
        phases: &mut FusedPhases,
    ) -> impl Future<Output = Result<()>> + Send;

    /// [`Collectives::allreduce_fused`] of tensors that each lie in several
    /// pieces of memory (a tensor is the concatenation of its segments,
    /// reduced where they lie), each element combined as when its tensor
    /// runs alone. The default: [`CollectiveError::SegmentsUnsupported`].
    fn allreduce_segments<T: Element>(
        &self,
        tensors: &mut [Vec<&mut M::Slice<T>>],
        op: ReduceOp,
        scratch: &mut M::Owned<T>,
        phases: &mut FusedPhases,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (tensors, op, scratch, phases);
        std::future::ready(Err(CollectiveError::SegmentsUnsupported))
    }

    /// Gathers every rank's `input` (`counts[r]` elements from rank `r`) into
    /// `out`, in rank order.
    fn allgatherv_into<T: Element>(
        &self,
        input: &M::Slice<T>,
        counts: &[usize],
        out: &mut M::Slice<T>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Copies `root`'s `buf` into every rank's `buf`.
    fn broadcast<T: Element>(
        &self,
        buf: &mut M::Slice<T>,
        root: Rank,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Reduces `buf` and leaves block `rank` of `counts` complete on each
    /// rank; returns that block's range (the rest is scratch).
    fn reducescatter<T: Element>(
        &self,
        buf: &mut M::Slice<T>,
        counts: &[usize],
        op: ReduceOp,
    ) -> impl Future<Output = Result<Range<usize>>> + Send;

    /// Sends block `j` of `input` (`splits[j]` elements) to rank `j`; returns
    /// what every rank sent here, in rank order, and how much each sent.
    fn alltoall<T: Element>(
        &self,
        input: &M::Slice<T>,
        splits: &[usize],
    ) -> impl Future<Output = Result<(M::Owned<T>, Vec<usize>)>> + Send;

    /// Returns once every rank has entered the barrier.
    fn barrier(&self) -> impl Future<Output = Result<()>> + Send;
}

/// Collectives among a group of the world's ranks, for the cross-host step
/// of a two-level path: every rank of the world calls each one at the same
/// point, each with the group it belongs to (disjoint groups run side by
/// side).
pub trait GroupCollectives<M: Memory>: Collectives<M> {
    /// Reduces `buf` over the world ranks `members` (this rank one of them);
    /// an average divides by the group's size.
    fn allreduce_among<T: Element>(
        &self,
        members: &[Rank],
        buf: &mut M::Slice<T>,
        op: ReduceOp,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Copies `members[root]`'s `buf` to every rank of `members`.
    fn broadcast_among<T: Element>(
        &self,
        members: &[Rank],
        buf: &mut M::Slice<T>,
        root: usize,
    ) -> impl Future<Output = Result<()>> + Send;
}

impl<X: Transport> GroupCollectives<Host> for Communicator<X> {
    async fn allreduce_among<T: Element>(
        &self,
        members: &[Rank],
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        Communicator::allreduce_among(self, members, buf, op).await
    }

    async fn broadcast_among<T: Element>(
        &self,
        members: &[Rank],
        buf: &mut [T],
        root: usize,
    ) -> Result<()> {
        Communicator::broadcast_among(self, members, buf, root).await
    }
}

impl<X: Transport> Collectives<Host> for Communicator<X> {
    fn rank(&self) -> Rank {
        Communicator::rank(self)
    }

    fn size(&self) -> usize {
        Communicator::size(self)
    }

    fn options(&self) -> &CollectiveOptions {
        Communicator::options(self)
    }

    fn options_mut(&mut self) -> &mut CollectiveOptions {
        Communicator::options_mut(self)
    }

    async fn allreduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        Communicator::allreduce(self, buf, op).await
    }

    async fn allreduce_fused<T: Element>(
        &self,
        tensors: &mut [Vec<T>],
        op: ReduceOp,
        scratch: &mut Vec<T>,
        phases: &mut FusedPhases,
    ) -> Result<()> {
        fused::allreduce(self, tensors, op, scratch, phases).await
    }

    async fn allreduce_segments<T: Element>(
        &self,
        tensors: &mut [Vec<&mut [T]>],
        op: ReduceOp,
        scratch: &mut Vec<T>,
        phases: &mut FusedPhases,
    ) -> Result<()> {
        fused::allreduce_segments(self, tensors, op, scratch, phases).await
    }

    async fn allgatherv_into<T: Element>(
        &self,
        input: &[T],
        counts: &[usize],
        out: &mut [T],
    ) -> Result<()> {
        Communicator::allgatherv_into(self, input, counts, out).await
    }

    async fn broadcast<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<()> {
        Communicator::broadcast(self, buf, root).await
    }

    async fn reducescatter<T: Element>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<Range<usize>> {
        Communicator::reducescatter(self, buf, counts, op).await
    }

    async fn alltoall<T: Element>(
        &self,
        input: &[T],
        splits: &[usize],
    ) -> Result<(Vec<T>, Vec<usize>)> {
        Communicator::alltoall(self, input, splits).await
    }

    async fn barrier(&self) -> Result<()> {
        Communicator::barrier(self).await
    }
}
