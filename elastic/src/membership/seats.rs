//! Which rank each worker of the next generation gets.
//!
//! A survivor keeps its rank where it can: every link, shared-memory ring
//! and schedule between two survivors whose ranks stay is the same in the
//! next generation, so it is carried over rather than made again (a
//! newcomer put at the end would move every rank after the lost one, and
//! with them the partners of every tree and recursive-doubling schedule).
//! A lost worker's rank goes to its replacement (the newcomer on the same
//! slot, else on the same host); ranks left over when the world shrinks go
//! to the highest-ranked survivors of the same host. A rank nobody of its
//! host can take closes up (the ranks after it move down, in order) and
//! the others come after: a worker of another host put there would mix the
//! hosts' ranks, and a ring through them would cross between hosts more
//! often. Rank 0 is always a survivor's: the next generation syncs its
//! state from rank 0, and a newcomer has none.
//!
//! ```text
//!  last generation   a0 a1 a2 b0 b1     (a1 lost, its slot restarted as a1')
//!  next generation   a0 a1' a2 b0 b1    (not a0 a2 b0 b1 a1')
//!  shrinking         a0 a4 a2 a3        (a1 lost of a0..a4, none in its place: a4 moves)
//!  rank 0 lost       a4 a1 a2 a3 a0'    (the last survivor of its host takes it)
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::SlotId;

/// The next generation's ranks: the `cap` placed first, then the newcomers
/// beyond them. `last` is the last generation's rank order (lost workers
/// included), `survivors` the members going on, in that order, and
/// `newcomers` the others in spawn order.
pub(super) fn seat(
    last: &[SlotId],
    survivors: Vec<SlotId>,
    mut newcomers: Vec<SlotId>,
    cap: usize,
) -> Vec<SlotId> {
    let n = cap.min(survivors.len().saturating_add(newcomers.len()));
    if survivors.len() > n {
        // Fewer ranks than survivors: the first survivors, as they were.
        return survivors.into_iter().chain(newcomers).collect();
    }
    let surplus = newcomers.split_off(n - survivors.len());
    let was: BTreeMap<&SlotId, usize> = last.iter().enumerate().map(|(r, s)| (s, r)).collect();
    let mut seats: Vec<Option<SlotId>> = vec![None; n];
    let mut displaced = Vec::new();
    for s in &survivors {
        match was.get(s) {
            Some(&r) if r < n && seats[r].is_none() => seats[r] = Some(s.clone()),
            _ => displaced.push(s.clone()),
        }
    }
    survivor_at_rank_zero(last, &mut seats, &mut displaced);
    let mut holes = Holes::of(last, &seats);
    newcomers.retain(|c| !holes.take(&mut seats, c, |h| h.slot.remove(c)));
    newcomers.retain(|c| !holes.take(&mut seats, c, |h| h.next_on(&c.host)));
    displaced.retain(|d| !holes.take(&mut seats, d, |h| h.next_on(&d.host)));
    let mut ranks: Vec<SlotId> = seats
        .into_iter()
        .flatten()
        .chain(displaced)
        .chain(newcomers)
        .collect();
    // After ranks closed up, rank 0 may have gone to a newcomer.
    let going_on: BTreeSet<&SlotId> = survivors.iter().collect();
    if let Some(first) = ranks.iter().position(|s| going_on.contains(s)) {
        ranks[..=first].rotate_right(1);
    }
    ranks.extend(surplus);
    ranks
}

/// Gives an empty rank 0 to a survivor of the host that held it: the last
/// displaced one, else the one seated at the highest rank (whose seat
/// becomes empty). Without one, rank 0 closes up with the others.
fn survivor_at_rank_zero(
    last: &[SlotId],
    seats: &mut [Option<SlotId>],
    displaced: &mut Vec<SlotId>,
) {
    let (Some(None), Some(lost)) = (seats.first(), last.first()) else {
        return;
    };
    let host = |s: &SlotId| s.host == lost.host;
    let moved = match displaced.iter().rposition(&host) {
        Some(i) => Some(displaced.remove(i)),
        None => seats
            .iter_mut()
            .rev()
            .find(|s| s.as_ref().is_some_and(host))
            .and_then(Option::take),
    };
    seats[0] = moved;
}

/// The empty ranks by the slot, and by the host, of their last holder.
struct Holes<'a> {
    slot: BTreeMap<&'a SlotId, usize>,
    host: BTreeMap<&'a str, VecDeque<usize>>,
}

impl<'a> Holes<'a> {
    fn of(last: &'a [SlotId], seats: &[Option<SlotId>]) -> Self {
        let mut holes = Holes {
            slot: BTreeMap::new(),
            host: BTreeMap::new(),
        };
        let empty = seats.iter().enumerate().filter(|(_, s)| s.is_none());
        for (r, l) in empty.filter_map(|(r, _)| last.get(r).map(|l| (r, l))) {
            holes.slot.insert(l, r);
            holes.host.entry(l.host.as_str()).or_default().push_back(r);
        }
        holes
    }

    /// The lowest empty rank last held on `host`.
    fn next_on(&mut self, host: &str) -> Option<usize> {
        self.host.get_mut(host)?.pop_front()
    }

    /// Seats `who` at the rank `find` gives if that rank is still empty;
    /// whether it did.
    fn take(
        &mut self,
        seats: &mut [Option<SlotId>],
        who: &SlotId,
        mut find: impl FnMut(&mut Self) -> Option<usize>,
    ) -> bool {
        while let Some(r) = find(self) {
            if seats[r].is_none() {
                seats[r] = Some(who.clone());
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(names: &str) -> Vec<SlotId> {
        names
            .split_whitespace()
            .map(|n| {
                let (host, slot) = n.split_once(':').unwrap_or((n, "0"));
                SlotId::new(host.to_owned(), slot.parse().unwrap_or(0))
            })
            .collect()
    }

    fn names(ranks: &[SlotId]) -> String {
        let s: Vec<String> = ranks
            .iter()
            .map(|s| format!("{}:{}", s.host, s.slot))
            .collect();
        s.join(" ")
    }

    #[test]
    fn a_replacement_takes_the_rank_of_the_worker_it_replaces() {
        let last = slots("a:0 a:1 a:2 b:0 b:1");
        let next = seat(&last, slots("a:0 a:1 b:0 b:1"), slots("a:2"), 8);
        assert_eq!(names(&next), "a:0 a:1 a:2 b:0 b:1");
        // On another slot of the host, then anywhere.
        let next = seat(&last, slots("a:0 a:1 b:0 b:1"), slots("c:0 a:7"), 8);
        assert_eq!(names(&next), "a:0 a:1 a:7 b:0 b:1 c:0");
    }

    #[test]
    fn a_shrinking_world_moves_only_its_last_survivors() {
        let last = slots("a:0 a:1 a:2 a:3 a:4 a:5");
        let next = seat(&last, slots("a:0 a:2 a:3 a:5"), Vec::new(), 8);
        assert_eq!(names(&next), "a:0 a:5 a:2 a:3");
    }

    #[test]
    fn rank_zero_stays_a_survivors() {
        let last = slots("a:0 a:1 a:2 a:3");
        let next = seat(&last, slots("a:1 a:2 a:3"), slots("a:0"), 8);
        assert_eq!(names(&next), "a:3 a:1 a:2 a:0");
        let next = seat(&last, slots("a:1 a:2"), Vec::new(), 8);
        assert_eq!(names(&next), "a:2 a:1");
        // With no survivor a newcomer starts the job.
        let next = seat(&[], Vec::new(), slots("b:0 b:1"), 8);
        assert_eq!(names(&next), "b:0 b:1");
    }

    #[test]
    fn newcomers_past_the_cap_follow_the_ranks() {
        let last = slots("a:0 a:1 a:2");
        let next = seat(&last, slots("a:0 a:2"), slots("a:5 b:0 a:1"), 3);
        assert_eq!(names(&next), "a:0 a:5 a:2 b:0 a:1");
        // More survivors than ranks: the first of them, as they were.
        let next = seat(&last, slots("a:0 a:1 a:2"), slots("b:0"), 2);
        assert_eq!(names(&next), "a:0 a:1 a:2 b:0");
    }

    #[test]
    fn a_rank_no_worker_of_its_host_can_take_closes_up() {
        // b:0 would mix the hosts' ranks: a:2 moves down instead.
        let last = slots("a:0 a:1 a:2");
        let next = seat(&last, slots("a:0 a:2"), slots("b:0"), 3);
        assert_eq!(names(&next), "a:0 a:2 b:0");
        // A whole host lost: the others close up in order.
        let last = slots("a:0 a:1 b:0 b:1 c:0 c:1");
        let next = seat(&last, slots("a:0 a:1 c:0 c:1"), Vec::new(), 8);
        assert_eq!(names(&next), "a:0 a:1 c:0 c:1");
        // Rank 0's host has no survivor left: the first survivor takes it.
        let next = seat(&last, slots("b:0 b:1 c:0 c:1"), slots("d:0"), 8);
        assert_eq!(names(&next), "b:0 b:1 c:0 c:1 d:0");
    }

    #[test]
    fn growing_appends_newcomers_after_every_survivor() {
        let last = slots("a:0 a:1");
        let next = seat(&last, slots("a:0 a:1"), slots("b:0 b:1"), 8);
        assert_eq!(names(&next), "a:0 a:1 b:0 b:1");
    }

    /// Every mix of 6 last ranks and 2 new slots of `pool`: each lost slot
    /// restarted or not, each new slot started or not, every cap. The
    /// outcome places every worker once, survivors first up to the cap and
    /// rank 0 a survivor's; with `kept`, a survivor keeps its rank when it
    /// is below the world's size and rank 0 was not lost.
    fn sweep(pool: &[SlotId], kept: bool) {
        let last = &pool[..6];
        for mask in 0u32..256 {
            let alive = |i: usize| mask & (1 << i) != 0;
            let survivors: Vec<SlotId> = (0..6)
                .filter(|&i| alive(i))
                .map(|i| pool[i].clone())
                .collect();
            let newcomers: Vec<SlotId> = (0..8)
                .filter(|&i| (i < 6) != alive(i))
                .map(|i| pool[i].clone())
                .collect();
            for cap in 1..=9 {
                let next = seat(last, survivors.clone(), newcomers.clone(), cap);
                let why = format!("mask {mask:08b} cap {cap}: {}", names(&next));
                let mut got = next.clone();
                got.sort();
                let mut want: Vec<SlotId> = survivors.iter().chain(&newcomers).cloned().collect();
                want.sort();
                assert_eq!(got, want, "{why}");
                if !survivors.is_empty() {
                    assert!(survivors.contains(&next[0]), "{why}");
                }
                let seated = cap.min(next.len());
                let placed = next[..seated]
                    .iter()
                    .filter(|s| survivors.contains(s))
                    .count();
                assert_eq!(placed, survivors.len().min(seated), "{why}");
                if kept && alive(0) && survivors.len() <= seated {
                    for (r, s) in last
                        .iter()
                        .enumerate()
                        .filter(|&(r, _)| r < seated && alive(r))
                    {
                        assert_eq!(&next[r], s, "{why}: rank {r} moved");
                    }
                }
            }
        }
    }

    #[test]
    fn every_worker_is_placed_once_whatever_the_mix() {
        sweep(&slots("a:0 a:1 a:2 b:0 b:1 b:2 c:0 c:1"), false);
        sweep(&slots("a:0 a:1 a:2 a:3 a:4 a:5 a:6 a:7"), true);
    }
}
