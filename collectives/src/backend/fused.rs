//! A fused allreduce on the host ring: several tensors run as one collective
//! laid out so that every element meets the same partners in the same order
//! as when its tensor runs alone, which keeps fused and unfused results
//! bit-identical on every path.
//!
//! Flat ring: block-major (block `c` of every tensor, then block `c+1` of
//! every tensor), the blocks cut as each tensor alone would be cut. Recursive
//! doubling: plain concatenation (every element takes the same exchanges).
//! On both flat paths the layout is only a view: each message is sent from
//! the tensors' own memory and received or combined into it
//! ([`Communicator::allreduce_parts`]), so nothing is copied into a fusion
//! buffer and out again. The hierarchical path packs into `buf`.
//! Between two ranks the fused buffer takes the algorithm its whole size
//! calls for, whatever each tensor alone would take: with two ranks every
//! path gives the same bits.
//! Hierarchical: piece by piece, each tensor cut as it would be alone
//! ([`HierarchicalLayout::even`]: one block per local rank, one piece per host
//! within each block), piece (c, d) of every tensor followed by piece
//! (c, d+1) of every tensor.
//!
//! ```text
//!  tensors a, b; 2 local ranks x 2 hosts
//!  buffer  [ a00 b00 | a01 b01 | a10 b10 | a11 b11 ]
//!           \ local block 0   / \ local block 1   /
//! ```

use std::ops::Range;
use std::time::Instant;

use super::FusedPhases;
use crate::algorithms::Cutter;
use crate::comm::{Communicator, Layout, Scaling};
use crate::dtype::Element;
use crate::error::Result;
use crate::reduce::ReduceOp;
use crate::schedule::{CrossStep, HierarchicalLayout, block_ranges, even_counts};
use crate::transport::Transport;

/// Allreduces `data` in one collective, packed into `buf` (empty).
pub(super) async fn allreduce<T: Element, X: Transport>(
    comm: &Communicator<X>,
    data: &mut [Vec<T>],
    op: ReduceOp,
    buf: &mut Vec<T>,
    phases: &mut FusedPhases,
) -> Result<()> {
    let mut tensors: Vec<Vec<&mut [T]>> = data.iter_mut().map(|d| vec![d.as_mut_slice()]).collect();
    allreduce_segments(comm, &mut tensors, op, buf, phases).await
}

/// Allreduces the tensors of `data`, each the concatenation of its segments,
/// in one collective (the hierarchical path packs into `buf`, left empty).
pub(super) async fn allreduce_segments<T: Element, X: Transport>(
    comm: &Communicator<X>,
    data: &mut [Vec<&mut [T]>],
    op: ReduceOp,
    buf: &mut Vec<T>,
    phases: &mut FusedPhases,
) -> Result<()> {
    buf.clear();
    if let [one] = data
        && let [whole] = &mut one[..]
    {
        return comm.allreduce(whole, op).await;
    }
    let lens: Vec<usize> = data.iter().map(|d| total(d)).collect();
    let bytes = |n: usize| n * std::mem::size_of::<T>();
    // The fusion planner groups tensors of one size class, so the first says
    // which algorithm each of them takes alone. Between two ranks every
    // algorithm combines each element once, the two ranks' values in either
    // order (which the combine kernels make the same bits, as recursive
    // doubling needs to agree with itself across ranks), so a fused group of
    // small tensors may take the algorithm its whole size calls for: the ring
    // moves and reduces half as much per rank as doubling the whole buffer.
    let sized_as = if comm.size() == 2 || lens.len() == 1 {
        bytes(lens.iter().sum())
    } else {
        bytes(lens.first().copied().unwrap_or(0))
    };
    let doubling = comm.allreduce_is_doubling(sized_as);
    let Some(h) = comm.options().hierarchical_allreduce.clone() else {
        phases.packed = Some(Instant::now());
        let (mut parts, layout) = flat_view(data, comm.size(), doubling);
        comm.allreduce_parts(&mut parts, op, Scaling::default(), layout)
            .await?;
        phases.reduced = Some(Instant::now());
        return Ok(());
    };
    let cross = if doubling {
        CrossStep::Doubling
    } else {
        CrossStep::Ring
    };
    let (local, hosts) = (h.local_size(), h.cross_size());
    let ranges: Vec<Vec<Range<usize>>> = lens
        .iter()
        .map(|&len| {
            let l = HierarchicalLayout::even(len, local, hosts, cross);
            block_ranges(&l.pieces.concat())
        })
        .collect();
    let mut pieces = vec![vec![0; hosts]; local];
    for p in 0..local * hosts {
        pieces[p / hosts][p % hosts] = ranges.iter().map(|r| r[p].len()).sum();
    }
    let layout = Layout::Hierarchical(HierarchicalLayout { pieces, cross });
    for p in 0..local * hosts {
        for (d, r) in data.iter().zip(&ranges) {
            copy_out(d, r[p].clone(), buf);
        }
    }
    phases.packed = Some(Instant::now());
    comm.allreduce_layout(buf, op, Scaling::default(), layout)
        .await?;
    phases.reduced = Some(Instant::now());
    let mut at = 0;
    for p in 0..local * hosts {
        for (d, r) in data.iter_mut().zip(&ranges) {
            let len = r[p].len();
            copy_in(d, r[p].clone(), &buf[at..at + len]);
            at += len;
        }
    }
    Ok(())
}

/// How many elements the segments hold together.
fn total<T>(segments: &[&mut [T]]) -> usize {
    segments.iter().map(|s| s.len()).sum()
}

/// Each segment of `segments` with the range of the concatenation it covers.
fn spans<'s, T>(segments: &'s [&mut [T]]) -> impl Iterator<Item = (Range<usize>, &'s [T])> {
    let mut at = 0;
    segments.iter().map(move |s| {
        let r = at..at + s.len();
        at = r.end;
        (r, &**s)
    })
}

/// Appends elements `range` of the concatenation of `segments` to `out`.
fn copy_out<T: Copy>(segments: &[&mut [T]], range: Range<usize>, out: &mut Vec<T>) {
    for (r, s) in spans(segments) {
        let (lo, hi) = (range.start.max(r.start), range.end.min(r.end));
        if lo < hi {
            out.extend_from_slice(&s[lo - r.start..hi - r.start]);
        }
    }
}

/// Writes `src` over elements `range` of the concatenation of `segments`.
fn copy_in<T: Copy>(segments: &mut [&mut [T]], range: Range<usize>, src: &[T]) {
    let mut at = 0;
    for s in segments.iter_mut() {
        let r = at..at + s.len();
        at = r.end;
        let (lo, hi) = (range.start.max(r.start), range.end.min(r.end));
        if lo < hi {
            let from = lo - range.start;
            s[lo - r.start..hi - r.start].copy_from_slice(&src[from..from + (hi - lo)]);
        }
    }
}

/// The tensors of `data` (each the concatenation of its segments) as the
/// pieces of one flat allreduce, where they lie: whole, one after another,
/// for recursive doubling; block-major (each cut into `n` blocks as it would
/// be alone) for the ring, with the ring's block sizes.
fn flat_view<'a, T>(
    data: &'a mut [Vec<&mut [T]>],
    n: usize,
    doubling: bool,
) -> (Vec<&'a mut [T]>, Layout) {
    if doubling {
        let whole = data
            .iter_mut()
            .flat_map(|d| d.iter_mut().map(|s| &mut **s))
            .collect();
        return (whole, Layout::Doubling);
    }
    let mut blocks: Vec<Vec<&mut [T]>> = (0..n).map(|_| Vec::with_capacity(data.len())).collect();
    let mut counts = vec![0; n];
    for d in data.iter_mut() {
        let lens = even_counts(total(d), n);
        let mut cutter = Cutter::new(d.iter_mut().map(|s| &mut **s));
        for (c, len) in lens.into_iter().enumerate() {
            counts[c] += len;
            cutter.cut(len, &mut blocks[c]);
        }
    }
    (
        blocks.into_iter().flatten().collect(),
        Layout::RingBlocks(counts),
    )
}
