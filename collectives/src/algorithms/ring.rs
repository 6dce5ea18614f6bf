//! The ring pass shared by allreduce, reduce-scatter and allgather (schedules in
//! [`crate::schedule::ring`]), segmented and pipelined:
//!
//! ```text
//!            sender half                      receiver half
//!   step s: send cell (send block, k)   recv cell (recv block, k) from the left,
//!           as soon as step s-1 has     combine or copy it, mark it received
//!           received that cell
//! ```
//! Both halves run concurrently in one task, so while segment k is combined,
//! segment k+1 is already on the wire in both directions.

use crate::dtype::Element;
use crate::error::Result;
use crate::reduce::Combine;
use crate::schedule::{RingStep, block_ranges, segment, segment_count};
use crate::transport::Transport;

use super::cells::Cells;
use super::{Op, apply};

/// Runs `steps` over `buf`, cut into blocks of `counts` elements and segments of
/// `seg` elements.
pub(crate) async fn ring_pass<T: Element, X: Transport>(
    op: &Op<'_, X>,
    buf: &mut [T],
    counts: &[usize],
    steps: &[RingStep],
    seg: usize,
    combine: Combine,
) -> Result<()> {
    let n = op.tr.size();
    if steps.is_empty() {
        return Ok(());
    }
    let rank = op.tr.rank();
    let (right, left) = ((rank + 1) % n, (rank + n - 1) % n);
    let blocks = block_ranges(counts);
    let nseg: Vec<usize> = counts.iter().map(|&c| segment_count(c, seg)).collect();
    // Cells received before step s, so that the sender knows when a cell is final.
    let mut received_before = Vec::with_capacity(steps.len() + 1);
    let mut acc = 0;
    for st in steps {
        received_before.push(acc);
        acc += nseg[st.recv];
    }
    received_before.push(acc);
    let step_id = |s: usize, k: usize| k * steps.len() + s;
    let cells = Cells::new(buf, &blocks, seg);

    let sender = async {
        for (s, st) in steps.iter().enumerate() {
            for k in 0..nseg[st.send] {
                let idx = cells.index(st.send, k);
                // At step s > 0 we forward what arrived at step s-1.
                let ready = if s == 0 {
                    0
                } else {
                    received_before[s - 1] + k + 1
                };
                let data = cells.take(idx, ready).await;
                let res = op.send(right, step_id(s, k), data).await;
                cells.put(idx, data);
                res?;
            }
        }
        Ok(())
    };
    let receiver = async {
        for (s, st) in steps.iter().enumerate() {
            let block = &blocks[st.recv];
            for k in 0..nseg[st.recv] {
                let len = segment(block, seg, k).len();
                let payload = op.recv::<T>(left, step_id(s, k), len).await?;
                let idx = cells.index(st.recv, k);
                let dst = cells.take(idx, 0).await;
                apply(dst, &payload, st.reduce.then_some(combine));
                cells.put(idx, dst);
                cells.mark_received();
            }
        }
        Ok(())
    };
    tokio::try_join!(sender, receiver).map(|_| ())
}
