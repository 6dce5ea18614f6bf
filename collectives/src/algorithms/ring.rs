//! The ring pass shared by allreduce, reduce-scatter and allgather (schedules in
//! `crate::schedule::ring`), segmented and pipelined:
//!
//! ```text
//!            sender half                      receiver half
//!   step s: send cell (send block, k)   recv cell (recv block, k) from the left,
//!           as soon as step s-1 has     combine or copy it, mark it received
//!           received that cell
//! ```
//! Both halves run concurrently in one task, so while segment k is combined,
//! segment k+1 is already on the wire in both directions. Copy steps receive
//! straight into the buffer ([`Transport::recv_into`]).

use crate::dtype::Element;
use crate::error::Result;
use crate::reduce::Combine;
use crate::schedule::{RingStep, block_ranges, segment, segment_count};
use crate::transport::Transport;

use super::cells::{Cells, Ready};
use super::{Op, apply_parts, shared};

/// `out[s]` = sum of the first `s` counts.
fn prefix_counts(counts: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut out = vec![0];
    for c in counts {
        out.push(out[out.len() - 1] + c);
    }
    out
}

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
    ring_pass_parts(op, &mut [buf], counts, steps, seg, combine, None).await
}

/// What a ring pass does to each segment of the block that its last
/// reduce step completes on this rank, as soon as it is complete (an
/// average's scaling): the block's owner finishes it once, while it is in
/// the cache, and the allgather spreads the finished values.
pub(crate) type Finish<'f, T> = &'f (dyn Fn(&mut [T]) + Sync);

/// [`ring_pass`] over the concatenation of `pieces` (the caller has checked
/// that `counts` sum to its length), with `finish` applied as its doc says.
pub(crate) async fn ring_pass_parts<T: Element, X: Transport>(
    op: &Op<'_, X>,
    pieces: &mut [&mut [T]],
    counts: &[usize],
    steps: &[RingStep],
    seg: usize,
    combine: Combine,
    finish: Option<Finish<'_, T>>,
) -> Result<()> {
    let n = op.tr.size();
    if steps.is_empty() {
        return Ok(());
    }
    let rank = op.tr.rank();
    let (right, left) = ((rank + 1) % n, (rank + n - 1) % n);
    let blocks = block_ranges(counts);
    let nseg: Vec<usize> = counts.iter().map(|&c| segment_count(c, seg)).collect();
    // Cells received / sent before step s: the sender forwards a cell only once it
    // has arrived, and a copy step takes its cell (to receive into it) only once
    // the sender is done with that cell's previous use, at step s + 1 - n.
    let received_before = prefix_counts(steps.iter().map(|st| nseg[st.recv]));
    let sent_before = prefix_counts(steps.iter().map(|st| nseg[st.send]));
    let step_id = |s: usize, k: usize| k * steps.len() + s;
    let last_reduce = steps.iter().rposition(|st| st.reduce);
    let cells = Cells::new(pieces.iter_mut().map(|p| &mut **p).collect(), &blocks, seg);

    let sender = async {
        for (s, st) in steps.iter().enumerate() {
            for k in 0..nseg[st.send] {
                let idx = cells.index(st.send, k);
                // At step s > 0 we forward what arrived at step s-1.
                let ready = Ready {
                    received: if s == 0 {
                        0
                    } else {
                        received_before[s - 1] + k + 1
                    },
                    sent: 0,
                };
                let data = cells.take(idx, ready).await;
                let res = op.send_parts(right, step_id(s, k), &shared(&data)).await;
                cells.put(idx, data);
                res?;
                cells.mark_sent();
            }
        }
        Ok(())
    };
    let receiver = async {
        for (s, st) in steps.iter().enumerate() {
            let block = &blocks[st.recv];
            for k in 0..nseg[st.recv] {
                let idx = cells.index(st.recv, k);
                if st.reduce {
                    let len = segment(block, seg, k).len();
                    let payload = op.recv::<T>(left, step_id(s, k), len).await?;
                    let mut dst = cells.take(idx, Ready::default()).await;
                    apply_parts(&mut dst, &payload, combine);
                    if let Some(f) = finish.filter(|_| last_reduce == Some(s)) {
                        dst.iter_mut().for_each(|p| f(p));
                    }
                    cells.put(idx, dst);
                } else {
                    // Copy steps land straight in the buffer.
                    let ready = Ready {
                        received: 0,
                        sent: (s + 1).checked_sub(n).map_or(0, |t| sent_before[t] + k + 1),
                    };
                    let mut dst = cells.take(idx, ready).await;
                    let res = op.recv_into_parts(left, step_id(s, k), &mut dst).await;
                    cells.put(idx, dst);
                    res?;
                }
                cells.mark_received();
            }
        }
        Ok(())
    };
    tokio::try_join!(sender, receiver).map(|_| ())
}
