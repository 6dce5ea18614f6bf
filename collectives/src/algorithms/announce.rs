//! Allgather of buffers whose lengths nobody knows in advance, in one pass
//! when they are small: every rank's message is its element count
//! followed, up to a size limit, by the elements themselves. The messages
//! are gathered by recursive doubling from 4 ranks up (`super::gather`:
//! log2(n) exchanges, the fold aside) and otherwise travel once around the
//! ring (n - 1 steps, each forwarding what arrived in the step before), so
//! a small allgather (the engine's negotiation message of every cycle)
//! costs one pass instead of a pass for the counts and another for the
//! data. When a rank's buffer is too large to ride along, the counts alone
//! have travelled and the caller runs the segmented allgather with them.
//!
//! ```text
//!  message  [ count: i64 LE | count elements, or nothing when too large ]
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use crate::dtype::Element;
use crate::error::{CollectiveError, Result};
use crate::schedule::allgather_ring;
use crate::tag::Rank;
use crate::transport::Transport;

use super::gather::{doubling_gather, doubling_pays};
use super::{Op, count_from_wire};

const HEADER: usize = std::mem::size_of::<i64>();

/// The most one gather message may carry from 4 ranks up, where a message
/// carries many ranks' (the frame limit is 1 GiB): at 10,000 ranks each
/// rank's elements ride along up to 6.7 KB, the engine's negotiation
/// message in the steady state a few dozen bytes.
const GATHER_BUDGET: usize = 64 << 20;

/// What one pass told this rank: every rank's count, and every rank's
/// elements when all of them came along.
#[derive(Debug)]
pub(crate) struct Announced<T> {
    pub(crate) counts: Vec<usize>,
    /// The concatenation in rank order, or `None` when some rank's buffer
    /// was over the limit.
    pub(crate) all: Option<Vec<T>>,
}

/// One pass of `input`'s count and, when it is at most `inline_bytes` (and,
/// gathered by doubling, 64 MiB / n), its elements.
pub(crate) async fn announce<T: Element, X: Transport>(
    op: &Op<'_, X>,
    input: &[T],
    inline_bytes: usize,
) -> Result<Announced<T>> {
    let n = op.tr.size();
    let doubling = doubling_pays(n);
    // Each doubling message carries up to every rank's: bounded in all.
    let inline_bytes = if doubling {
        inline_bytes.min(GATHER_BUDGET / n)
    } else {
        inline_bytes
    };
    let bytes: &[u8] = bytemuck::cast_slice(input);
    let inline = bytes.len() <= inline_bytes;
    let mut m = BytesMut::with_capacity(HEADER + if inline { bytes.len() } else { 0 });
    m.put_i64_le(i64::try_from(input.len()).unwrap_or(i64::MAX));
    if inline {
        m.put_slice(bytes);
    }
    let msgs = if doubling {
        doubling_gather(op, m.freeze()).await?
    } else {
        ring_gather(op, m.freeze()).await?
    };
    let mut counts = Vec::with_capacity(n);
    let mut parts = Vec::with_capacity(n);
    for (from, m) in msgs.iter().enumerate() {
        let (count, part) = parse::<T, X>(op, from, m)?;
        counts.push(count);
        parts.push(part);
    }
    let all = parts.into_iter().collect::<Option<Vec<&[u8]>>>().map(|p| {
        let joined = p.concat();
        bytemuck::pod_collect_to_vec::<u8, T>(&joined)
    });
    Ok(Announced { counts, all })
}

/// Every rank's `mine` in rank order, in one ring pass.
async fn ring_gather<X: Transport>(op: &Op<'_, X>, mine: Bytes) -> Result<Vec<Bytes>> {
    let (n, rank) = (op.tr.size(), op.tr.rank());
    let mut msgs: Vec<Option<Bytes>> = vec![None; n];
    msgs[rank] = Some(mine);
    let (right, left) = ((rank + 1) % n, (rank + n - 1) % n);
    for (s, st) in allgather_ring(n, rank).iter().enumerate() {
        let out = msgs[st.send].clone().unwrap_or_default();
        let tag = op.tag(s)?;
        let (_, got) = tokio::try_join!(op.tr.send(right, tag, &out), op.tr.recv(left, tag))?;
        msgs[st.recv] = Some(got);
    }
    Ok(msgs.into_iter().map(Option::unwrap_or_default).collect())
}

/// The count of rank `from`'s message and its elements' bytes when they
/// came along; anything else is refused with what was wrong.
fn parse<'m, T: Element, X: Transport>(
    op: &Op<'_, X>,
    from: Rank,
    m: &'m [u8],
) -> Result<(usize, Option<&'m [u8]>)> {
    let world = op.tr.world_rank(from);
    let Some((head, body)) = m.split_first_chunk::<HEADER>() else {
        return Err(CollectiveError::LengthMismatch {
            from: world,
            tag: op.tag(0)?,
            expected: HEADER,
            got: m.len(),
        });
    };
    let count = count_from_wire(world, i64::from_le_bytes(*head))?;
    if body.is_empty() && count > 0 {
        return Ok((count, None));
    }
    let want = count.saturating_mul(std::mem::size_of::<T>());
    if body.len() != want {
        return Err(CollectiveError::LengthMismatch {
            from: world,
            tag: op.tag(0)?,
            expected: HEADER.saturating_add(want),
            got: m.len(),
        });
    }
    Ok((count, Some(body)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tag::{Generation, Tag};
    use crate::transport::mem::MemTransport;

    /// Rank 0 announces `[1.0, 2.0]` while rank 1 sends `forged` in its place.
    async fn with_forged(forged: &[u8]) -> Result<Announced<f32>> {
        let w = MemTransport::world(2, Generation(1), Duration::from_secs(5));
        w[1].send(0, Tag::new(Generation(1), 7, 0), forged)
            .await
            .unwrap();
        let op = Op { tr: &w[0], id: 7 };
        announce(&op, &[1.0f32, 2.0], 64).await
    }

    #[tokio::test]
    async fn well_formed_messages_give_counts_and_data() {
        let mut m = 3i64.to_le_bytes().to_vec();
        m.extend(bytemuck::cast_slice(&[5.0f32, 6.0, 7.0]));
        let got = with_forged(&m).await.unwrap();
        assert_eq!(got.counts, vec![2, 3]);
        assert_eq!(got.all, Some(vec![1.0, 2.0, 5.0, 6.0, 7.0]));
        // A count without its elements: too large to ride along.
        let got = with_forged(&9i64.to_le_bytes()).await.unwrap();
        assert_eq!((got.counts, got.all), (vec![2, 9], None));
    }

    /// Every rank of a world of `n` announces `len(r)` elements; returns
    /// what each rank was told.
    async fn world_announce(
        n: usize,
        len: impl Fn(usize) -> usize,
        inline: usize,
    ) -> Vec<Announced<i32>> {
        let w = MemTransport::world(n, Generation(1), Duration::from_secs(5));
        let calls = w.iter().enumerate().map(|(r, tr)| {
            let input: Vec<i32> = (0..len(r)).map(|i| (r * 1000 + i) as i32).collect();
            async move { announce(&Op { tr, id: 7 }, &input, inline).await.unwrap() }
        });
        futures::future::join_all(calls).await
    }

    #[tokio::test]
    async fn every_world_size_gathers_every_ranks_message_in_rank_order() {
        // The ring below 4 ranks and at 5, recursive doubling (with the
        // fold where the size is not a power of two) at the others.
        for n in (1..=9).chain([16, 17, 33]) {
            let len = |r: usize| (r * 7) % 5;
            let want: Vec<i32> = (0..n)
                .flat_map(|r| (0..len(r)).map(move |i| (r * 1000 + i) as i32))
                .collect();
            let counts: Vec<usize> = (0..n).map(len).collect();
            for (r, got) in world_announce(n, len, 64).await.into_iter().enumerate() {
                assert_eq!(got.counts, counts, "n = {n}, rank {r}");
                assert_eq!(got.all.as_ref(), Some(&want), "n = {n}, rank {r}");
            }
            // One rank over the inline limit: the counts alone.
            let big = |r: usize| if r == n / 2 { 40 } else { len(r) };
            for (r, got) in world_announce(n, big, 64).await.into_iter().enumerate() {
                let counts: Vec<usize> = (0..n).map(big).collect();
                assert_eq!((got.counts, got.all), (counts, None), "n = {n}, rank {r}");
            }
        }
    }

    #[tokio::test]
    async fn malformed_messages_are_refused_with_what_was_wrong() {
        let short = with_forged(&[1, 2, 3]).await.unwrap_err();
        assert!(
            matches!(
                short,
                CollectiveError::LengthMismatch {
                    from: 1,
                    got: 3,
                    ..
                }
            ),
            "{short:?}"
        );
        let negative = with_forged(&(-4i64).to_le_bytes()).await.unwrap_err();
        assert!(
            matches!(negative, CollectiveError::BadCount { from: 1, count: -4 }),
            "{negative:?}"
        );
        let mut ragged = 2i64.to_le_bytes().to_vec();
        ragged.extend([0u8; 5]);
        let e = with_forged(&ragged).await.unwrap_err();
        assert!(
            matches!(
                e,
                CollectiveError::LengthMismatch {
                    from: 1,
                    expected: 16,
                    got: 13,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
