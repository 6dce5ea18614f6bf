//! Every rank's block of bytes (any length, one per rank) to every rank by
//! recursive doubling: the partners of the doubling allreduce
//! (`crate::schedule::doubling`), each exchange carrying every block the
//! rank holds, so that after log2(p) exchanges (and the fold in and out
//! when the world is not a power of two) every rank holds all n. A ring
//! pass takes n - 1 steps one after another, each waiting for the rank
//! before; at 128 ranks that is 127 steps against 7, and where ranks
//! outnumber cores each step waits for a process to be scheduled.
//!
//! ```text
//!  message  [ rank: u32 LE | len: u32 LE | len bytes ] for each block carried
//! ```
//! A message names the ranks whose blocks it carries, so what a peer sends
//! is checked on arrival: a block of a rank outside the world, one already
//! held, one cut short, or one missing at the end is refused with what was
//! wrong, never trusted.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{CollectiveError, Result};
use crate::schedule::{Fold, recursive_doubling};
use crate::tag::{Rank, Tag};
use crate::transport::Transport;

use super::Op;

/// Bytes of a block's framing: its rank and its length.
const FRAMING: usize = 8;

/// Whether the doubling gather has fewer steps on its critical path than
/// the ring's n - 1 (from 4 ranks up, 5 aside). The same on every rank.
pub(crate) fn doubling_pays(n: usize) -> bool {
    if n < 2 {
        return false;
    }
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let folds = if n > p { 2 } else { 0 };
    (p.trailing_zeros() as usize + folds) < n - 1
}

/// Gathers `mine` from every rank, in rank order.
pub(crate) async fn doubling_gather<X: Transport>(
    op: &Op<'_, X>,
    mine: Bytes,
) -> Result<Vec<Bytes>> {
    let (n, rank) = (op.tr.size(), op.tr.rank());
    let plan = recursive_doubling(n, rank);
    let mut have: Vec<Option<Bytes>> = vec![None; n];
    have[rank] = Some(mine);
    // As the doubling allreduce numbers its messages: the fold out's step
    // does not depend on this rank's own round count.
    let last = 1 + usize::BITS as usize;
    // The fold in goes both ways: a rank folded out hears an empty message
    // from its partner, which may be what starts it (an engine with nothing
    // to negotiate starts its round when a peer's message arrives, and with
    // the ring every rank heard from its left neighbour first).
    let pre = match plan.pre {
        Some(Fold::SendTo(p)) => Some((p, pack(&have, None))),
        Some(Fold::RecvFrom(p)) => Some((p, Bytes::new())),
        None => None,
    };
    if let Some((p, out)) = pre {
        let tag = op.tag(0)?;
        let (_, got) = tokio::try_join!(op.tr.send(p, tag, &out), op.tr.recv(p, tag))?;
        unpack(op.tr.world_rank(p), tag, &got, &mut have)?;
    }
    for (i, &partner) in plan.rounds.iter().enumerate() {
        let tag = op.tag(i + 1)?;
        let out = pack(&have, None);
        let (_, got) = tokio::try_join!(op.tr.send(partner, tag, &out), op.tr.recv(partner, tag))?;
        unpack(op.tr.world_rank(partner), tag, &got, &mut have)?;
    }
    match plan.post {
        // All but the block it gave this rank.
        Some(Fold::SendTo(p)) => op.tr.send(p, op.tag(last)?, &pack(&have, Some(p))).await?,
        Some(Fold::RecvFrom(p)) => take(op, p, last, &mut have).await?,
        None => {}
    }
    // Whoever spoke last to this rank left it short.
    let (from, tag) = match plan.post {
        Some(Fold::RecvFrom(p)) => (p, op.tag(last)?),
        _ => {
            let r = plan.rounds.len();
            (plan.rounds.last().copied().unwrap_or(rank), op.tag(r)?)
        }
    };
    have.into_iter()
        .enumerate()
        .map(|(r, b)| {
            b.ok_or(CollectiveError::BadGather {
                from: op.tr.world_rank(from),
                tag,
                what: "no block at the end",
                block: r as u64,
            })
        })
        .collect()
}

/// Receives step `step`'s message from `from` into `have`.
async fn take<X: Transport>(
    op: &Op<'_, X>,
    from: Rank,
    step: usize,
    have: &mut [Option<Bytes>],
) -> Result<()> {
    let tag = op.tag(step)?;
    let got = op.tr.recv(from, tag).await?;
    unpack(op.tr.world_rank(from), tag, &got, have)
}

/// Every block held but `except`'s, framed.
fn pack(have: &[Option<Bytes>], except: Option<Rank>) -> Bytes {
    let held = have
        .iter()
        .enumerate()
        .filter(|&(r, _)| Some(r) != except)
        .filter_map(|(r, b)| Some((r, b.as_ref()?)));
    let len = held.clone().map(|(_, b)| FRAMING + b.len()).sum();
    let mut m = BytesMut::with_capacity(len);
    for (r, b) in held {
        m.put_u32_le(r as u32);
        m.put_u32_le(b.len() as u32);
        m.put_slice(b);
    }
    m.freeze()
}

/// The blocks of `got` (from world rank `from`, under `tag`) into `have`.
fn unpack(from: Rank, tag: Tag, got: &Bytes, have: &mut [Option<Bytes>]) -> Result<()> {
    let bad = |what, block: u64| CollectiveError::BadGather {
        from,
        tag,
        what,
        block,
    };
    let mut at = 0;
    while at < got.len() {
        let Some(head) = got.get(at..at + FRAMING) else {
            return Err(bad("a block's framing cut short", u64::MAX));
        };
        let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (r, len) = (word(0), word(4) as usize);
        let start = at + FRAMING;
        let Some(end) = start.checked_add(len).filter(|&e| e <= got.len()) else {
            return Err(bad("a block cut short", u64::from(r)));
        };
        match have.get_mut(r as usize) {
            None => return Err(bad("a block of a rank outside the world", u64::from(r))),
            Some(Some(_)) => return Err(bad("a block already held", u64::from(r))),
            Some(slot) => *slot = Some(got.slice(start..end)),
        }
        at = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::Generation;

    fn tag() -> Tag {
        Tag::new(Generation(1), 3, 1)
    }

    fn framed(blocks: &[(u32, &[u8])]) -> Bytes {
        let mut m = BytesMut::new();
        for (r, b) in blocks {
            m.put_u32_le(*r);
            m.put_u32_le(b.len() as u32);
            m.put_slice(b);
        }
        m.freeze()
    }

    #[test]
    fn doubling_pays_from_four_ranks_but_five() {
        let pays: Vec<usize> = (1..=9).filter(|&n| doubling_pays(n)).collect();
        assert_eq!(pays, vec![4, 6, 7, 8, 9]);
        assert!(doubling_pays(128) && doubling_pays(10_000));
    }

    #[test]
    fn packed_blocks_come_back_where_they_were() {
        let mut have = vec![
            None,
            Some(Bytes::from_static(b"one")),
            None,
            Some(Bytes::new()),
        ];
        let m = pack(&have, None);
        assert_eq!(m.len(), 2 * FRAMING + 3);
        assert_eq!(pack(&have, Some(1)).len(), FRAMING);
        let mut other = vec![Some(Bytes::from_static(b"zero")), None, None, None];
        unpack(1, tag(), &m, &mut other).unwrap();
        have[0] = Some(Bytes::from_static(b"zero"));
        assert_eq!(other, have);
    }

    #[tokio::test]
    async fn a_partner_that_leaves_blocks_out_is_named() {
        use crate::transport::mem::MemTransport;
        let g = Generation(1);
        let w = MemTransport::world(4, g, std::time::Duration::from_secs(5));
        // Rank 0's partners: rank 1, then rank 2, who sends only its own.
        w[1].send(0, Tag::new(g, 7, 1), &framed(&[])).await.unwrap();
        w[2].send(0, Tag::new(g, 7, 2), &framed(&[(2, b"x")]))
            .await
            .unwrap();
        let op = Op { tr: &w[0], id: 7 };
        match doubling_gather(&op, Bytes::from_static(b"o")).await {
            Err(CollectiveError::BadGather {
                from: 2,
                what,
                block: 1,
                ..
            }) => {
                assert_eq!(what, "no block at the end");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_messages_are_refused_with_what_was_wrong() {
        let what = |m: Bytes| {
            let mut have = vec![Some(Bytes::from_static(b"mine")), None, None];
            match unpack(2, tag(), &m, &mut have) {
                Err(CollectiveError::BadGather {
                    from: 2,
                    what,
                    block,
                    ..
                }) => (what, block),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            what(framed(&[(7, b"x")])).0,
            "a block of a rank outside the world"
        );
        assert_eq!(what(framed(&[(0, b"x")])), ("a block already held", 0));
        assert_eq!(
            what(framed(&[(1, b"a"), (1, b"b")])),
            ("a block already held", 1)
        );
        let mut cut = framed(&[(1, b"abcdef")]).to_vec();
        cut.truncate(FRAMING + 3);
        assert_eq!(what(cut.into()), ("a block cut short", 1));
        assert_eq!(
            what(Bytes::from_static(&[1, 0, 0])).0,
            "a block's framing cut short"
        );
        let mut huge = BytesMut::new();
        huge.put_u32_le(1);
        huge.put_u32_le(u32::MAX);
        assert_eq!(what(huge.freeze()), ("a block cut short", 1));
    }
}
