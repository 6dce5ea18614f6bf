//! [`Communicator`]: the collectives of one world over one [`Transport`].

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::algorithms::{self, Op};
use crate::dtype::Element;
use crate::error::{CollectiveError, Result};
use crate::reduce::ReduceOp;
use crate::schedule::{
    CrossStep, HierarchicalLayout, allgather_ring, allreduce_ring, binomial_tree, block_ranges,
    chain, dissemination_rounds, reducescatter_ring,
};
use crate::tag::Rank;
use crate::topology::Hierarchy;
use crate::transport::Transport;
use crate::transport::group::GroupView;

/// Allreduce algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllreduceAlgorithm {
    /// Recursive doubling up to [`CollectiveOptions::small_message_bytes`], ring above.
    #[default]
    Auto,
    /// Ring reduce-scatter + allgather: bandwidth-optimal, 2(n-1) steps.
    Ring,
    /// Recursive doubling: log2(n) whole-buffer exchanges, latency-optimal.
    RecursiveDoubling,
}

/// Broadcast algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BroadcastAlgorithm {
    /// Binomial tree up to [`CollectiveOptions::small_message_bytes`], chain above.
    #[default]
    Auto,
    /// Binomial tree, whole buffer per message: log2(n) hops.
    Tree,
    /// Pipelined chain, one segment per message: each link carries the buffer once.
    Chain,
}

/// How [`Communicator::allreduce_layout`] runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Recursive doubling over the whole buffer.
    Doubling,
    /// The ring, block `r` of the buffer (`counts[r]` elements) finishing on
    /// rank `r` after the reduce-scatter.
    RingBlocks(Vec<usize>),
    /// Within hosts, then across them, over the grid in
    /// [`CollectiveOptions::hierarchical_allreduce`] (which must be set).
    Hierarchical(HierarchicalLayout),
}

/// Tuning of the collective algorithms. Every rank must use the same values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectiveOptions {
    /// Bytes per message in the segmented (ring, chain, alltoall) algorithms. Default
    /// 512 KiB: large enough that per-message overhead vanishes, small enough that a
    /// received segment is combined while still in cache (measured in
    /// docs/BENCHMARKS.md).
    pub segment_bytes: usize,
    /// Messages up to this size take the latency-optimal algorithms. Default 64 KiB.
    pub small_message_bytes: usize,
    pub allreduce: AllreduceAlgorithm,
    pub broadcast: BroadcastAlgorithm,
    /// Ranks grouped by host: when set, allreduce reduces within each host,
    /// then across hosts, then shares within the host (the cross-host step
    /// takes the ring or recursive doubling as `allreduce` says for the whole
    /// buffer). Default `None`: flat.
    pub hierarchical_allreduce: Option<Arc<Hierarchy>>,
    /// When set, allgather gathers across hosts, then within each host.
    /// Default `None`: flat.
    pub hierarchical_allgather: Option<Arc<Hierarchy>>,
    /// The grid of the GPU allreduce's two levels (NCCL within each host,
    /// this data plane across hosts), one rank per host included
    /// ([`crate::Topology::device_hierarchy`]). The host collectives do not
    /// read it. Default `None`: GPU allreduces run flat in NCCL.
    pub device_hierarchical_allreduce: Option<Arc<Hierarchy>>,
}

impl Default for CollectiveOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 512 * 1024,
            small_message_bytes: 64 * 1024,
            allreduce: AllreduceAlgorithm::Auto,
            broadcast: BroadcastAlgorithm::Auto,
            hierarchical_allreduce: None,
            hierarchical_allgather: None,
            device_hierarchical_allreduce: None,
        }
    }
}

/// Factors applied around a reduction: `prescale` to every input before it is
/// combined, `postscale` to the result. Floating-point types only.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scaling {
    pub prescale: f64,
    pub postscale: f64,
}

impl Default for Scaling {
    fn default() -> Self {
        Self {
            prescale: 1.0,
            postscale: 1.0,
        }
    }
}

/// Where a communicator numbers its operations. Two communicators over one
/// transport (the engine's data and negotiation communicators over one TCP
/// mesh) take different spaces, so their messages never meet: op ids of the
/// data space count from 0, those of the negotiation space from 2^55, and
/// both stay below the 2^56 where the ids of composite operations' parts
/// begin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpSpace {
    #[default]
    Data,
    Negotiation,
}

impl OpSpace {
    fn first_op(self) -> u64 {
        match self {
            OpSpace::Data => 0,
            OpSpace::Negotiation => 1 << 55,
        }
    }

    /// The op ids of this space's operations (their parts' ids lie above).
    fn ops(self) -> std::ops::Range<u64> {
        match self {
            OpSpace::Data => 0..1 << 55,
            OpSpace::Negotiation => 1 << 55..1 << 56,
        }
    }
}

/// The collectives of one world. Every rank must call the same collectives in the
/// same order with matching sizes (the worker engine's negotiation guarantees it);
/// each call gets the next operation id, which tags its messages.
#[derive(Debug)]
pub struct Communicator<X> {
    transport: X,
    options: CollectiveOptions,
    space: OpSpace,
    next_op: AtomicU64,
}

impl<X: Transport> Communicator<X> {
    pub fn new(transport: X, options: CollectiveOptions) -> Self {
        Self::in_space(transport, options, OpSpace::Data)
    }

    /// A communicator numbering its operations in `space` (see [`OpSpace`]).
    pub fn in_space(transport: X, options: CollectiveOptions, space: OpSpace) -> Self {
        Self {
            transport,
            options,
            space,
            next_op: AtomicU64::new(space.first_op()),
        }
    }

    pub fn rank(&self) -> Rank {
        self.transport.rank()
    }

    pub fn size(&self) -> usize {
        self.transport.size()
    }

    pub fn options(&self) -> &CollectiveOptions {
        &self.options
    }

    /// Changes the options between collectives. Every rank must make the same
    /// change before its next collective (the worker engine does so at the
    /// same negotiation round).
    pub fn options_mut(&mut self) -> &mut CollectiveOptions {
        &mut self.options
    }

    pub fn transport(&self) -> &X {
        &self.transport
    }

    pub fn into_transport(self) -> X {
        self.transport
    }

    /// Resolves once a message of another rank's next collective on this
    /// communicator's space has arrived (or a receive would fail at once):
    /// another rank has started a collective that this one must join. `None`
    /// where the transport cannot tell ([`Transport::arrival`]).
    pub fn arrival(&self) -> Option<impl std::future::Future<Output = ()> + Send + '_> {
        self.transport.arrival(self.space.ops())
    }

    fn op(&self) -> Op<'_, X> {
        Op {
            tr: &self.transport,
            id: self.next_op.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn seg<T>(&self) -> usize {
        (self.options.segment_bytes / std::mem::size_of::<T>()).max(1)
    }

    fn is_small<T>(&self, len: usize) -> bool {
        len * std::mem::size_of::<T>() <= self.options.small_message_bytes
    }

    /// Reduces `buf` element-wise over all ranks, in place, on every rank.
    pub async fn allreduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        self.allreduce_scaled(buf, op, Scaling::default()).await
    }

    /// [`Communicator::allreduce`] with pre- and post-scaling factors.
    pub async fn allreduce_scaled<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        scaling: Scaling,
    ) -> Result<()> {
        let doubling = self.allreduce_is_doubling(std::mem::size_of_val(buf));
        let layout = match (&self.options.hierarchical_allreduce, doubling) {
            (Some(h), _) => {
                let cross = if doubling {
                    CrossStep::Doubling
                } else {
                    CrossStep::Ring
                };
                let l = HierarchicalLayout::even(buf.len(), h.local_size(), h.cross_size(), cross);
                Layout::Hierarchical(l)
            }
            (None, true) => Layout::Doubling,
            (None, false) => {
                Layout::RingBlocks(crate::schedule::even_counts(buf.len(), self.size()))
            }
        };
        self.allreduce_layout(buf, op, scaling, layout).await
    }

    /// Allreduce with the algorithm and (for the ring) the blocks given: the
    /// ring reduces block `c` of `counts` in the same order of ranks whatever
    /// its size, and recursive doubling every element in the same order, so a
    /// buffer packed block by block from several tensors (each split with
    /// [`crate::schedule::even_counts`]) gives each element exactly the value
    /// it would get alone. The same holds for the hierarchical layout packed
    /// piece by piece (see [`HierarchicalLayout`]).
    pub async fn allreduce_layout<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
        scaling: Scaling,
        layout: Layout,
    ) -> Result<()> {
        self.allreduce_parts(&mut [buf], op, scaling, layout).await
    }

    /// [`Communicator::allreduce_layout`] of the concatenation of `parts`,
    /// each reduced where it lies: a fused group's tensors run as one
    /// collective without being copied together (every message is sent from
    /// the pieces it covers and received or combined into them). The
    /// hierarchical layout takes one buffer only.
    pub async fn allreduce_parts<T: Element>(
        &self,
        parts: &mut [&mut [T]],
        op: ReduceOp,
        scaling: Scaling,
        layout: Layout,
    ) -> Result<()> {
        let n = self.size();
        if matches!(layout, Layout::Hierarchical(_)) && parts.len() != 1 {
            return Err(CollectiveError::PiecesOnHierarchy {
                pieces: parts.len(),
            });
        }
        let post = prepare_scaling::<T>(&mut [], op, scaling, n)?;
        for p in parts.iter_mut() {
            prepare_scaling(p, op, scaling, n)?;
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let o = self.op();
        match layout {
            Layout::Doubling => algorithms::doubling_parts(&o, parts, op.combine()).await?,
            Layout::RingBlocks(counts) if n > 1 => {
                self.check_counts("allreduce blocks", &counts, len)?;
                let steps = allreduce_ring(n, self.rank());
                let seg = self.seg::<T>();
                // The scaling goes with the reduce-scatter: each rank scales
                // the block it completes, before the allgather.
                let finish = |p: &mut [T]| finish_scaling(p, op, post, n);
                let ring = algorithms::ring_pass_parts;
                ring(&o, parts, &counts, &steps, seg, op.combine(), Some(&finish)).await?;
                return Ok(());
            }
            Layout::RingBlocks(counts) => self.check_counts("allreduce blocks", &counts, len)?,
            Layout::Hierarchical(layout) => {
                let [buf] = parts else {
                    return Err(CollectiveError::PiecesOnHierarchy {
                        pieces: parts.len(),
                    });
                };
                let h = self
                    .options
                    .hierarchical_allreduce
                    .as_deref()
                    .ok_or(CollectiveError::NoHierarchy)?;
                let seg = self.options.segment_bytes;
                algorithms::hierarchical_allreduce(
                    &self.transport,
                    h,
                    o.id,
                    seg,
                    buf,
                    &layout,
                    op.combine(),
                )
                .await?;
            }
        }
        for p in parts.iter_mut() {
            finish_scaling(p, op, post, n);
        }
        Ok(())
    }

    /// Whether [`Communicator::allreduce`] runs recursive doubling for `bytes`
    /// (on the hierarchical path: whether its cross-host step does).
    pub fn allreduce_is_doubling(&self, bytes: usize) -> bool {
        match self.options.allreduce {
            AllreduceAlgorithm::Auto => bytes <= self.options.small_message_bytes,
            AllreduceAlgorithm::Ring => false,
            AllreduceAlgorithm::RecursiveDoubling => true,
        }
    }

    /// Reduces `buf` over all ranks and leaves block `rank` of `counts` (one count
    /// per rank, summing to `buf.len()`) complete on each rank; returns that block's
    /// range. The rest of `buf` is scratch afterwards.
    pub async fn reducescatter<T: Element>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<Range<usize>> {
        self.check_counts("reducescatter counts", counts, buf.len())?;
        let post = prepare_scaling(buf, op, Scaling::default(), self.size())?;
        let steps = reducescatter_ring(self.size(), self.rank());
        algorithms::ring_pass(
            &self.op(),
            buf,
            counts,
            &steps,
            self.seg::<T>(),
            op.combine(),
        )
        .await?;
        let mine = block_ranges(counts)[self.rank()].clone();
        finish_scaling(&mut buf[mine.clone()], op, post, self.size());
        Ok(mine)
    }

    /// Gathers every rank's `input` (`counts[r]` elements on rank `r`) into one
    /// buffer, in rank order, on every rank.
    pub async fn allgatherv<T: Element>(&self, input: &[T], counts: &[usize]) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); counts.iter().sum()];
        self.allgatherv_into(input, counts, &mut out).await?;
        Ok(out)
    }

    /// [`Communicator::allgatherv`] into a caller-provided buffer of
    /// `counts.iter().sum()` elements.
    pub async fn allgatherv_into<T: Element>(
        &self,
        input: &[T],
        counts: &[usize],
        out: &mut [T],
    ) -> Result<()> {
        self.check_counts("allgather counts", counts, out.len())?;
        let mine = block_ranges(counts)[self.rank()].clone();
        if mine.len() != input.len() {
            return Err(CollectiveError::CountsSum {
                what: "allgather count of this rank",
                sum: mine.len(),
                len: input.len(),
            });
        }
        let o = self.op();
        if let Some(h) = self.options.hierarchical_allgather.as_deref() {
            let seg = self.options.segment_bytes;
            return algorithms::hierarchical_allgatherv(
                &self.transport,
                h,
                o.id,
                seg,
                input,
                counts,
                out,
            )
            .await;
        }
        out[mine].copy_from_slice(input);
        let steps = allgather_ring(self.size(), self.rank());
        algorithms::ring_pass(
            &o,
            out,
            counts,
            &steps,
            self.seg::<T>(),
            crate::reduce::Combine::Sum,
        )
        .await
    }

    /// Gathers every rank's `input`, whatever its length; returns the concatenation
    /// and each rank's count. Buffers up to the small-message size travel with
    /// their counts in one ring pass; larger ones take a second, segmented pass.
    pub async fn allgather<T: Element>(&self, input: &[T]) -> Result<(Vec<T>, Vec<usize>)> {
        let o = self.op();
        let told = algorithms::announce(&o, input, self.options.small_message_bytes).await?;
        if let Some(all) = told.all {
            return Ok((all, told.counts));
        }
        let counts = told.counts;
        let out = self.allgatherv(input, &counts).await?;
        Ok((out, counts))
    }

    /// Copies `root`'s `buf` into every rank's `buf`.
    pub async fn broadcast<T: Element>(&self, buf: &mut [T], root: Rank) -> Result<()> {
        let (n, rank) = (self.size(), self.rank());
        if root >= n {
            return Err(CollectiveError::InvalidRoot { root, size: n });
        }
        let tree = match self.options.broadcast {
            BroadcastAlgorithm::Auto => self.is_small::<T>(buf.len()),
            BroadcastAlgorithm::Tree => true,
            BroadcastAlgorithm::Chain => false,
        };
        let (links, seg) = if tree {
            (binomial_tree(n, root, rank), buf.len().max(1))
        } else {
            (chain(n, root, rank), self.seg::<T>())
        };
        algorithms::pipeline_broadcast(&self.op(), buf, &links, seg).await
    }

    /// Sends block `j` of `input` (`send_counts[j]` elements) to rank `j`; returns
    /// what every rank sent this one, in rank order, and the per-rank counts (which
    /// travel first, so receivers need not know them).
    pub async fn alltoall<T: Element>(
        &self,
        input: &[T],
        send_counts: &[usize],
    ) -> Result<(Vec<T>, Vec<usize>)> {
        self.check_counts("alltoall send counts", send_counts, input.len())?;
        let recv_counts = algorithms::exchange_counts(&self.op(), send_counts).await?;
        let mut out = vec![T::zeroed(); recv_counts.iter().sum()];
        self.alltoallv_into(input, send_counts, &mut out, &recv_counts)
            .await?;
        Ok((out, recv_counts))
    }

    /// Alltoall with counts known on both sides: `recv_counts[j]` elements from
    /// rank `j` land in block `j` of `out`.
    pub async fn alltoallv_into<T: Element>(
        &self,
        input: &[T],
        send_counts: &[usize],
        out: &mut [T],
        recv_counts: &[usize],
    ) -> Result<()> {
        self.check_counts("alltoall send counts", send_counts, input.len())?;
        self.check_counts("alltoall receive counts", recv_counts, out.len())?;
        let o = self.op();
        algorithms::alltoall(&o, input, send_counts, out, recv_counts, self.seg::<T>()).await
    }

    /// Returns once every rank has entered the barrier.
    pub async fn barrier(&self) -> Result<()> {
        let o = self.op();
        for (k, (to, from)) in dissemination_rounds(self.size(), self.rank())
            .into_iter()
            .enumerate()
        {
            tokio::try_join!(o.send::<u8>(to, k, &[]), o.recv::<u8>(from, k, 0))?;
        }
        Ok(())
    }

    /// The view of `members` (world ranks, in that order) for one operation:
    /// its own op id, so every rank must call it at the same point, each with
    /// the group it belongs to.
    fn among(&self, members: &[Rank]) -> Result<(GroupView<'_, X>, u64)> {
        let id = self.op().id;
        let view = GroupView::new(&self.transport, members.to_vec()).ok_or_else(|| {
            CollectiveError::NotAMember {
                rank: self.rank(),
                members: members.to_vec(),
            }
        })?;
        Ok((view, id))
    }

    /// Reduces `buf` over the world ranks `members` only (this rank one of
    /// them). Every rank of the world calls it at the same point, each with
    /// its own group (disjoint groups run side by side), as the cross-host
    /// step of a two-level collective does. An average divides by the
    /// group's size.
    pub async fn allreduce_among<T: Element>(
        &self,
        members: &[Rank],
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<()> {
        let (view, id) = self.among(members)?;
        let o = Op { tr: &view, id };
        let n = members.len();
        let post = prepare_scaling(buf, op, Scaling::default(), n)?;
        if self.allreduce_is_doubling(std::mem::size_of_val(buf)) {
            algorithms::doubling_allreduce(&o, buf, op.combine()).await?;
        } else {
            let counts = crate::schedule::even_counts(buf.len(), n);
            let steps = allreduce_ring(n, view.rank());
            algorithms::ring_pass(&o, buf, &counts, &steps, self.seg::<T>(), op.combine()).await?;
        }
        finish_scaling(buf, op, post, n);
        Ok(())
    }

    /// Copies `buf` of `members[root]` to every rank of `members`, under the
    /// same rules as [`Communicator::allreduce_among`].
    pub async fn broadcast_among<T: Element>(
        &self,
        members: &[Rank],
        buf: &mut [T],
        root: usize,
    ) -> Result<()> {
        let (view, id) = self.among(members)?;
        let n = members.len();
        if root >= n {
            return Err(CollectiveError::InvalidRoot { root, size: n });
        }
        let o = Op { tr: &view, id };
        let links = binomial_tree(n, root, view.rank());
        algorithms::pipeline_broadcast(&o, buf, &links, buf.len().max(1)).await
    }

    fn check_len(&self, what: &'static str, got: usize) -> Result<()> {
        if got != self.size() {
            return Err(CollectiveError::CountsLength {
                what,
                got,
                size: self.size(),
            });
        }
        Ok(())
    }

    fn check_counts(&self, what: &'static str, counts: &[usize], len: usize) -> Result<()> {
        self.check_len(what, counts.len())?;
        let sum: usize = counts.iter().sum();
        if sum != len {
            return Err(CollectiveError::CountsSum { what, sum, len });
        }
        Ok(())
    }
}

/// Applies the prescale and returns the factor still to apply after the reduction
/// (the postscale, with an average's 1/n folded in for floating-point types).
fn prepare_scaling<T: Element>(buf: &mut [T], op: ReduceOp, s: Scaling, n: usize) -> Result<f64> {
    if !T::DTYPE.is_float() {
        if s.prescale != 1.0 || s.postscale != 1.0 {
            return Err(CollectiveError::ScaleOnInteger { dtype: T::DTYPE });
        }
        return Ok(1.0);
    }
    if s.prescale != 1.0 {
        T::scale(buf, s.prescale);
    }
    let avg = if op == ReduceOp::Average {
        1.0 / n as f64
    } else {
        1.0
    };
    Ok(s.postscale * avg)
}

fn finish_scaling<T: Element>(buf: &mut [T], op: ReduceOp, post: f64, n: usize) {
    if !T::DTYPE.is_float() {
        if op == ReduceOp::Average {
            T::divide(buf, n);
        }
    } else if post != 1.0 {
        T::scale(buf, post);
    }
}
