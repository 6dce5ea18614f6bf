//! Addresses on demand. A generation of more than [`WHOLE_UP_TO`] ranks
//! does not send every address to every worker (n^2 bytes a reset: 2.6 GB
//! at 10,000 ranks): each assignment carries the addresses its rank's
//! collectives reach first (its ring, tree and recursive-doubling partners,
//! its host's ranks), and a worker looks up the others when it first needs
//! them. The link tasks answer those lookups from the generation's one
//! table, the [`Directory`], without the driver.
//!
//! ```text
//!  driver ── assign ──► Directory (generation, table) ◄── link task: Lookup{g, ranks} ─► Addresses{g, entries}
//!         ── Assign{peers: Some(given_ranks)} ──► worker
//! ```

use std::sync::{Arc, PoisonError, RwLock};

use control::{Generation, MAX_LOOKUP, PeerAddress, PeerTable};

/// Generations up to this size send every worker the whole table.
pub const WHOLE_UP_TO: usize = 32;

/// The current generation's address table, shared by the driver (which
/// sets it at each assignment) and the link tasks (which answer lookups).
#[derive(Clone, Debug, Default)]
pub struct Directory(Arc<RwLock<Option<Table>>>);

/// A generation and every rank's address in it.
type Table = (Generation, Arc<[PeerAddress]>);

impl Directory {
    pub fn set(&self, generation: Generation, table: Arc<[PeerAddress]>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some((generation, table));
    }

    /// The answer to a lookup of `ranks` in `generation`: nothing when that
    /// is not the current generation; ranks outside it, and any past
    /// [`MAX_LOOKUP`], left out.
    pub fn look_up(&self, generation: Generation, ranks: &[u32]) -> Vec<(u32, PeerAddress)> {
        let now = self.0.read().unwrap_or_else(PoisonError::into_inner);
        let Some((current, table)) = now.as_ref() else {
            return Vec::new();
        };
        if *current != generation {
            return Vec::new();
        }
        ranks
            .iter()
            .take(MAX_LOOKUP)
            .filter_map(|&r| Some((r, table.get(usize::try_from(r).ok()?)?.clone())))
            .collect()
    }
}

/// The table rank `rank`'s assignment carries: the whole `table` in a small
/// generation; else the addresses of [`given_ranks`].
pub fn table_for(rank: usize, table: &Arc<[PeerAddress]>, host_ranks: &[usize]) -> PeerTable {
    if table.len() <= WHOLE_UP_TO {
        return PeerTable::Whole(Arc::clone(table));
    }
    let given = given_ranks(rank, table.len(), host_ranks);
    PeerTable::Some(
        given
            .into_iter()
            .filter_map(|r| Some((u32::try_from(r).ok()?, table.get(r)?.clone())))
            .collect(),
    )
}

/// The ranks whose addresses rank `rank` of `size` is given at once: its
/// own, rank 0 (every tree's root, the state's source), its ring neighbours, every rank a power of two away (the tree's
/// parent and children, recursive doubling's and halving's partners) and
/// the ranks of its host (`host_ranks`, shared memory and the hierarchical
/// paths): about 3 log2(n) + the host's, in rank order.
pub fn given_ranks(rank: usize, size: usize, host_ranks: &[usize]) -> Vec<usize> {
    let steps = (usize::BITS - size.leading_zeros()) as usize;
    let mut given = Vec::with_capacity(2 + 3 * steps + host_ranks.len());
    given.extend([rank, 0]);
    if size > 0 {
        let mut step = 1;
        while step < size {
            given.push((rank + step) % size);
            given.push((rank + size - step % size) % size);
            if rank ^ step < size {
                given.push(rank ^ step);
            }
            step <<= 1;
        }
    }
    given.extend(host_ranks.iter().copied().filter(|&r| r < size));
    given.sort_unstable();
    given.dedup();
    given
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn table(n: u16) -> Arc<[PeerAddress]> {
        (0..n)
            .map(|p| PeerAddress::tcp(([10, 0, (p >> 8) as u8, p as u8], 9000 + p).into()))
            .collect()
    }

    #[test]
    fn small_generations_get_the_whole_table_large_ones_their_partners() {
        let small = table(32);
        assert_eq!(table_for(3, &small, &[]), PeerTable::Whole(small.clone()));
        let large = table(1000);
        let PeerTable::Some(some) = table_for(5, &large, &[4, 5, 6, 7]) else {
            panic!("a large generation's table is partial");
        };
        let ranks: Vec<u32> = some.iter().map(|(r, _)| *r).collect();
        for must in [
            5, 4, 6, 7, 0, 1, 3, 9, 13, 21, 37, 69, 133, 261, 517, 997, 989,
        ] {
            assert!(
                ranks.contains(&must),
                "rank 5 is given rank {must}: {ranks:?}"
            );
        }
        assert!(ranks.len() < 40, "about 3 log2(1000) + 4: {}", ranks.len());
        for (r, a) in &some {
            assert_eq!(a, &large[*r as usize], "rank {r}'s own address");
        }
    }

    #[test]
    fn partners_stay_within_the_world() {
        for size in 1..70 {
            for rank in 0..size {
                let g = given_ranks(rank, size, &[rank, size + 3]);
                assert!(g.contains(&0));
                assert!(g.iter().all(|&r| r < size), "{rank} of {size}: {g:?}");
                assert!(g.contains(&rank));
                if size > 1 {
                    assert!(
                        g.contains(&((rank + 1) % size)) && g.contains(&((rank + size - 1) % size))
                    );
                }
            }
        }
    }

    #[test]
    fn lookups_answer_the_current_generation_only() {
        let d = Directory::default();
        assert!(d.look_up(Generation(1), &[0]).is_empty(), "no table yet");
        let t = table(100);
        d.set(Generation(2), t.clone());
        assert_eq!(
            d.look_up(Generation(2), &[7, 99, 100]),
            vec![(7, t[7].clone()), (99, t[99].clone())]
        );
        assert!(
            d.look_up(Generation(1), &[7]).is_empty(),
            "a past generation's lookup"
        );
        let many: Vec<u32> = (0..(MAX_LOOKUP as u32 + 50)).map(|r| r % 100).collect();
        assert_eq!(d.look_up(Generation(2), &many).len(), MAX_LOOKUP);
    }

    /// The frame `msg` takes on the wire (the codec's own encoding).
    fn frame(msg: control::CoordinatorMsg) -> usize {
        use tokio_util::codec::Encoder;
        let mut codec =
            control::FrameCodec::<control::WorkerMsg, control::CoordinatorMsg>::default();
        let mut buf = tokio_util::bytes::BytesMut::new();
        codec
            .encode(msg, &mut buf)
            .expect("within the codec's limits");
        buf.len()
    }

    #[test]
    fn at_ten_thousand_ranks_every_frame_stays_small_and_bounded() {
        use crate::job::assign::{AssignmentBase, assignments};
        use elastic::membership::SlotId;
        let n = 10_000;
        let ranks: Vec<SlotId> = (0..n)
            .map(|r| SlotId::new(format!("node-{:04}", r / 8), (r % 8) as u32))
            .collect();
        let t = table(n as u16);
        let addrs = ranks.iter().cloned().zip(t.iter().cloned()).collect();
        let knobs = control::Knobs::default();
        let ca =
            control::pki::JobCa::from_secret(&control::Secret::from_hex(&"5a".repeat(32)).unwrap())
                .unwrap();
        let g = AssignmentBase {
            generation: Generation(2),
            knobs: &knobs,
            data_token: 1,
            loopback_as: None,
            ca: &ca,
        };
        let assigned = assignments(&g, &ranks, &addrs).unwrap();
        let largest = assigned
            .each
            .into_iter()
            .map(|a| frame(control::CoordinatorMsg::Assign(a)))
            .max()
            .unwrap();
        // About 3 log2(n) + 8 addresses, not 10,000 (which took 259 KB).
        assert!(
            largest < 2048,
            "an assignment of 10,000 ranks takes {largest} bytes"
        );
        let d = Directory::default();
        d.set(Generation(2), assigned.table);
        let ranks: Vec<u32> = (0..MAX_LOOKUP as u32).collect();
        let entries = d.look_up(Generation(2), &ranks);
        let answer = frame(control::CoordinatorMsg::Addresses {
            id: 1,
            generation: Generation(2),
            entries,
        });
        assert!(
            answer < control::MAX_FRAME / 4,
            "the largest lookup's answer takes {answer} bytes"
        );
    }
}
