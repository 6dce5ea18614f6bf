//! Alltoall with per-pair sizes by pairwise exchange: at step s every rank sends
//! to `rank + s` and receives from `rank - s`, so all links are busy at once.
//! Counts travel first, so each receiver knows how much to expect.

use crate::dtype::Element;
use crate::error::{CollectiveError, Result};
use crate::schedule::{block_ranges, pairwise_exchange, segment, segment_count};
use crate::transport::Transport;

use super::{Op, apply};

/// Tells every rank how many elements this rank will send it; returns how many
/// each rank will send this one.
pub(crate) async fn exchange_counts<X: Transport>(
    op: &Op<'_, X>,
    send_counts: &[usize],
) -> Result<Vec<usize>> {
    let rank = op.tr.rank();
    let mut recv_counts = vec![0usize; send_counts.len()];
    recv_counts[rank] = send_counts[rank];
    for (s, (to, from)) in pairwise_exchange(op.tr.size(), rank)
        .into_iter()
        .enumerate()
    {
        let count = [send_counts[to] as i64];
        let (_, payload) = tokio::try_join!(op.send(to, s, &count), op.recv::<i64>(from, s, 1))?;
        let mut got = [0i64];
        apply(&mut got, &payload, None);
        recv_counts[from] = count_from_wire(from, got[0])?;
    }
    Ok(recv_counts)
}

/// A count received from `from`; a negative one is a peer bug or garbage.
pub(crate) fn count_from_wire(from: usize, v: i64) -> Result<usize> {
    usize::try_from(v).map_err(|_| CollectiveError::BadCount { from, count: v })
}

/// Sends `input`'s block `j` (of `send_counts`) to rank `j`; fills `out`'s block
/// `j` (of `recv_counts`) with what rank `j` sent. Steps `0..n` are left for the
/// count exchange.
pub(crate) async fn alltoall<T: Element, X: Transport>(
    op: &Op<'_, X>,
    input: &[T],
    send_counts: &[usize],
    out: &mut [T],
    recv_counts: &[usize],
    seg: usize,
) -> Result<()> {
    let n = op.tr.size();
    let rank = op.tr.rank();
    let inb = block_ranges(send_counts);
    let outb = block_ranges(recv_counts);
    out[outb[rank].clone()].copy_from_slice(&input[inb[rank].clone()]);
    let step_id = |s: usize, k: usize| n * (k + 1) + s;
    for (s, (to, from)) in pairwise_exchange(n, rank).into_iter().enumerate() {
        let src = &input[inb[to].clone()];
        let dst = &mut out[outb[from].clone()];
        let sends = async {
            let whole = 0..src.len();
            for k in 0..segment_count(src.len(), seg) {
                op.send(to, step_id(s, k), &src[segment(&whole, seg, k)])
                    .await?;
            }
            Ok::<(), CollectiveError>(())
        };
        let recvs = async {
            let whole = 0..dst.len();
            for k in 0..segment_count(dst.len(), seg) {
                let r = segment(&whole, seg, k);
                op.recv_into(from, step_id(s, k), &mut dst[r]).await?;
            }
            Ok::<(), CollectiveError>(())
        };
        tokio::try_join!(sends, recvs)?;
    }
    Ok(())
}
