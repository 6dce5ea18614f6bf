//! A fused allreduce on the hierarchical path. The tensors are packed piece by
//! piece: each tensor is cut as it would be alone
//! ([`HierarchicalLayout::even`]: one block per local rank, one piece per host
//! within each block), and piece (c, d) of every tensor is followed by piece
//! (c, d+1) of every tensor.
//!
//! ```text
//!  tensors a, b; 2 local ranks x 2 hosts
//!  buffer  [ a00 b00 | a01 b01 | a10 b10 | a11 b11 ]
//!           \ local block 0   / \ local block 1   /
//! ```
//! Every element then meets the same partners in the same order as when its
//! tensor runs alone, so fused and unfused results stay bit-identical with
//! hierarchical allreduce on, as they are on the flat path.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use collectives::schedule::{CrossStep, HierarchicalLayout, block_ranges};
use collectives::{Communicator, Element, Hierarchy, Layout, ReduceOp, Scaling, Transport};

use super::marks::Marks;
use super::tensor::EngineError;

/// Allreduces `data` (two or more tensors) in one hierarchical collective,
/// packed into `buf` (the engine's fusion buffer, empty).
pub(super) async fn allreduce<T: Element, X: Transport>(
    comm: &Communicator<X>,
    op: ReduceOp,
    data: &mut [Vec<T>],
    buf: &mut Vec<T>,
    h: &Hierarchy,
    marks: &mut Marks,
) -> Result<(), EngineError> {
    // The fusion planner groups tensors of one size class, so the first says
    // which cross-host step each of them takes alone.
    let bytes0 = std::mem::size_of_val(data.first().map_or(&[][..], Vec::as_slice));
    let cross = if comm.allreduce_is_doubling(bytes0) {
        CrossStep::Doubling
    } else {
        CrossStep::Ring
    };
    let (local, hosts) = (h.local_size(), h.cross_size());
    // ranges[t][p]: piece p = c * hosts + d of tensor t, cut as alone.
    let ranges: Vec<Vec<Range<usize>>> = data
        .iter()
        .map(|d| {
            block_ranges(
                &HierarchicalLayout::even(d.len(), local, hosts, cross)
                    .pieces
                    .concat(),
            )
        })
        .collect();
    let mut pieces = vec![vec![0; hosts]; local];
    for p in 0..local * hosts {
        for (d, r) in data.iter().zip(&ranges) {
            pieces[p / hosts][p % hosts] += r[p].len();
            buf.extend_from_slice(&d[r[p].clone()]);
        }
    }
    marks.packed = Some(Instant::now());
    let layout = Layout::Hierarchical(HierarchicalLayout { pieces, cross });
    comm.allreduce_layout(buf, op, Scaling::default(), layout)
        .await
        .map_err(|e| EngineError::Collective(Arc::new(e)))?;
    marks.reduced = Some(Instant::now());
    let mut at = 0;
    for p in 0..local * hosts {
        for (d, r) in data.iter_mut().zip(&ranges) {
            let len = r[p].len();
            d[r[p].clone()].copy_from_slice(&buf[at..at + len]);
            at += len;
        }
    }
    Ok(())
}
