//! Two-level collectives: within each host, and across hosts among the ranks
//! with the same local rank (the grid is a [`Hierarchy`], the buffer's cut a
//! [`HierarchicalLayout`]).
//!
//! ```text
//!  allreduce, 2 hosts x 2 local ranks, every buffer cut into local blocks [B0|B1]
//!
//!               host 0                        host 1
//!        rank 0        rank 1          rank 2        rank 3
//!        [B0|B1]       [B0|B1]         [B0|B1]       [B0|B1]
//!  1. reduce-scatter within each host (ring among the host's ranks)
//!        B0 host 0     B1 host 0       B0 host 1     B1 host 1
//!  2. allreduce across hosts among equal local ranks: {0, 2} on B0, {1, 3} on B1
//!        B0 all        B1 all          B0 all        B1 all
//!  3. allgather within each host
//!        [B0|B1] all   [B0|B1] all     [B0|B1] all   [B0|B1] all
//! ```
//! With L ranks on each of C hosts, each rank moves 2(L-1)/L of the buffer
//! within its host and 2(C-1)/C of one 1/L block across hosts, and the L
//! cross-host allreduces run side by side.
//!
//! Allgather has nothing to combine and runs in two steps: each rank gathers,
//! across hosts, the inputs of the ranks with its local rank (one column of the
//! grid), the host's ranks then allgather their columns, and every rank copies
//! the blocks into rank order.
//!
//! The intra-host steps sit behind [`IntraHost`]: today a ring over the world's
//! transport restricted to the host ([`HostRing`]); a shared-memory or NCCL
//! path implements the same two calls. Each sub-collective runs under its own
//! op id ([`part_op_id`]), so none of its messages can meet another's.
//!
//! Reduction order: each element is combined within its host first and across
//! hosts second, which is not the flat ring's order. Integer results equal the
//! flat ones exactly; floating-point ones may differ in the last bits.

use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::dtype::Element;
use crate::error::{CollectiveError, Result};
use crate::reduce::Combine;
use crate::schedule::{
    CrossStep, HierarchicalLayout, allgather_ring, allreduce_ring, block_ranges, reducescatter_ring,
};
use crate::topology::Hierarchy;
use crate::transport::Transport;
use crate::transport::group::{GroupView, part_op_id};

use super::{Op, doubling_allreduce, ring_pass};

/// Part numbers: the intra-host sub-collectives of one operation count up from
/// the first, the cross-host one has its own.
const FIRST_INTRA_PART: u8 = 1;
const CROSS_PART: u8 = 64;

/// The collectives among the ranks of one host that the hierarchical
/// algorithms need.
pub(crate) trait IntraHost {
    /// This rank's position among the host's ranks.
    fn local_rank(&self) -> usize;

    /// Number of ranks on the host.
    fn local_size(&self) -> usize;

    /// Combines `buf` over the host's ranks so that block `local_rank` of
    /// `counts` (one count per local rank) ends complete here; the rest of
    /// `buf` is scratch afterwards.
    fn reducescatter<T: Element>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        combine: Combine,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Block `local_rank` of `buf` (cut by `counts`) holds this rank's data;
    /// afterwards every block holds its owner's.
    fn allgather<T: Element>(
        &self,
        buf: &mut [T],
        counts: &[usize],
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The intra-host steps as segmented rings over the world's transport,
/// restricted to the host's ranks.
#[derive(Debug)]
pub(crate) struct HostRing<'a, X> {
    view: GroupView<'a, X>,
    op_id: u64,
    next_part: AtomicU8,
    segment_bytes: usize,
}

impl<X: Transport> HostRing<'_, X> {
    fn next_op(&self) -> Result<Op<'_, GroupView<'_, X>>> {
        let part = self.next_part.fetch_add(1, Ordering::Relaxed);
        if part >= CROSS_PART {
            return Err(CollectiveError::OpIdSpace { op_id: self.op_id });
        }
        Ok(Op {
            tr: &self.view,
            id: part_op_id(self.op_id, part)?,
        })
    }
}

fn seg<T>(segment_bytes: usize) -> usize {
    (segment_bytes / std::mem::size_of::<T>()).max(1)
}

impl<X: Transport> IntraHost for HostRing<'_, X> {
    fn local_rank(&self) -> usize {
        self.view.rank()
    }

    fn local_size(&self) -> usize {
        self.view.size()
    }

    async fn reducescatter<T: Element>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        combine: Combine,
    ) -> Result<()> {
        let op = self.next_op()?;
        let steps = reducescatter_ring(self.local_size(), self.local_rank());
        let seg = seg::<T>(self.segment_bytes);
        ring_pass(&op, buf, counts, &steps, seg, combine).await
    }

    async fn allgather<T: Element>(&self, buf: &mut [T], counts: &[usize]) -> Result<()> {
        let op = self.next_op()?;
        let steps = allgather_ring(self.local_size(), self.local_rank());
        let seg = seg::<T>(self.segment_bytes);
        ring_pass(&op, buf, counts, &steps, seg, Combine::Sum).await
    }
}

/// One rank's two levels for one world operation: its host's ranks and the
/// ranks with its local rank.
struct Levels<'a, X> {
    host: HostRing<'a, X>,
    cross: GroupView<'a, X>,
    cross_op: u64,
}

impl<'a, X: Transport> Levels<'a, X> {
    fn new(world: &'a X, h: &Hierarchy, op_id: u64, segment_bytes: usize) -> Result<Self> {
        let mismatch = || CollectiveError::HierarchySize {
            layout: h.size(),
            size: world.size(),
        };
        if h.size() != world.size() {
            return Err(mismatch());
        }
        let me = world.rank();
        let host = GroupView::new(world, h.host_ranks(me).to_vec()).ok_or_else(mismatch)?;
        let cross = GroupView::new(world, h.cross_ranks(me)).ok_or_else(mismatch)?;
        Ok(Self {
            host: HostRing {
                view: host,
                op_id,
                next_part: AtomicU8::new(FIRST_INTRA_PART),
                segment_bytes,
            },
            cross,
            cross_op: part_op_id(op_id, CROSS_PART)?,
        })
    }

    fn cross(&self) -> Op<'_, GroupView<'a, X>> {
        Op {
            tr: &self.cross,
            id: self.cross_op,
        }
    }
}

/// Hierarchical allreduce of `buf` over the world `world` (grid `h`) as world
/// operation `op_id`.
pub(crate) async fn hierarchical_allreduce<T: Element, X: Transport>(
    world: &X,
    h: &Hierarchy,
    op_id: u64,
    segment_bytes: usize,
    buf: &mut [T],
    layout: &HierarchicalLayout,
    combine: Combine,
) -> Result<()> {
    let levels = Levels::new(world, h, op_id, segment_bytes)?;
    let seg = seg::<T>(segment_bytes);
    two_level_allreduce(&levels.host, &levels.cross(), buf, layout, seg, combine).await
}

/// Hierarchical allgather: every rank's `input` (`counts[r]` elements from
/// rank `r`, checked by the caller) into `out` in rank order.
pub(crate) async fn hierarchical_allgatherv<T: Element, X: Transport>(
    world: &X,
    h: &Hierarchy,
    op_id: u64,
    segment_bytes: usize,
    input: &[T],
    counts: &[usize],
    out: &mut [T],
) -> Result<()> {
    let levels = Levels::new(world, h, op_id, segment_bytes)?;
    let seg = seg::<T>(segment_bytes);
    let stage = two_level_allgather(&levels.host, &levels.cross(), h, input, counts, seg).await?;
    copy_to_rank_order(h, counts, &stage, out);
    Ok(())
}

fn check_layout(layout: &HierarchicalLayout, local: usize, cross: usize, len: usize) -> Result<()> {
    if layout.pieces.len() != local {
        return Err(CollectiveError::CountsLength {
            what: "hierarchical layout (one block per local rank)",
            got: layout.pieces.len(),
            size: local,
        });
    }
    if let Some(p) = layout.pieces.iter().find(|p| p.len() != cross) {
        return Err(CollectiveError::CountsLength {
            what: "hierarchical layout block (one piece per host)",
            got: p.len(),
            size: cross,
        });
    }
    if layout.len() != len {
        return Err(CollectiveError::CountsSum {
            what: "hierarchical layout pieces",
            sum: layout.len(),
            len,
        });
    }
    Ok(())
}

/// Steps 1-3 of the picture: intra-host reduce-scatter, cross-host allreduce
/// of this rank's block, intra-host allgather.
async fn two_level_allreduce<T: Element, H: IntraHost, X: Transport>(
    host: &H,
    cross: &Op<'_, X>,
    buf: &mut [T],
    layout: &HierarchicalLayout,
    seg: usize,
    combine: Combine,
) -> Result<()> {
    let (c, size) = (cross.tr.rank(), cross.tr.size());
    check_layout(layout, host.local_size(), size, buf.len())?;
    let counts = layout.local_counts();
    host.reducescatter(buf, &counts, combine).await?;
    let mine = host.local_rank();
    let block = &mut buf[block_ranges(&counts)[mine].clone()];
    match layout.cross {
        CrossStep::Doubling => doubling_allreduce(cross, block, combine).await?,
        CrossStep::Ring => {
            let steps = allreduce_ring(size, c);
            ring_pass(cross, block, &layout.pieces[mine], &steps, seg, combine).await?;
        }
    }
    host.allgather(buf, &counts).await
}

/// `columns[l][c]`: elements that the rank with local rank `l` on host `c`
/// contributes.
fn columns(h: &Hierarchy, counts: &[usize]) -> Vec<Vec<usize>> {
    (0..h.local_size())
        .map(|l| {
            (0..h.cross_size())
                .map(|c| counts[h.rank_at(c, l)])
                .collect()
        })
        .collect()
}

/// Gathers every input into a buffer laid out column by column (local rank
/// major, host minor) and returns it.
async fn two_level_allgather<T: Element, H: IntraHost, X: Transport>(
    host: &H,
    cross: &Op<'_, X>,
    h: &Hierarchy,
    input: &[T],
    counts: &[usize],
    seg: usize,
) -> Result<Vec<T>> {
    let cols = columns(h, counts);
    let col_counts: Vec<usize> = cols.iter().map(|c| c.iter().sum()).collect();
    let (l, c) = (host.local_rank(), cross.tr.rank());
    let mut stage = vec![T::zeroed(); col_counts.iter().sum()];
    let col = &mut stage[block_ranges(&col_counts)[l].clone()];
    col[block_ranges(&cols[l])[c].clone()].copy_from_slice(input);
    let steps = allgather_ring(cross.tr.size(), c);
    ring_pass(cross, col, &cols[l], &steps, seg, Combine::Sum).await?;
    host.allgather(&mut stage, &col_counts).await?;
    Ok(stage)
}

/// Copies the column-major `stage` into `out` in rank order.
fn copy_to_rank_order<T: Element>(h: &Hierarchy, counts: &[usize], stage: &[T], out: &mut [T]) {
    let cols = columns(h, counts);
    let out_ranges = block_ranges(counts);
    let mut at = 0;
    for (l, col) in cols.iter().enumerate() {
        for (c, &n) in col.iter().enumerate() {
            out[out_ranges[h.rank_at(c, l)].clone()].copy_from_slice(&stage[at..at + n]);
            at += n;
        }
    }
}
