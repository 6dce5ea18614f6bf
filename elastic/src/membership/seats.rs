//! Which rank each worker of the next generation gets.
//!
//! A survivor keeps its rank where it can: every link, shared-memory ring
//! and schedule between two survivors whose ranks stay is the same in the
//! next generation, so it is carried over rather than made again (a
//! newcomer put at the end would move every rank after the lost one, and
//! with them the partners of every tree and recursive-doubling schedule).
//! A lost worker's rank goes to its replacement (the newcomer on the same
//! slot, else on the same host, else the first newcomer); ranks left over
//! when the world shrinks go to the survivors of the highest ranks. Rank 0
//! is always a survivor's when there is one: the next generation syncs its
//! state from rank 0, and a newcomer has none.
//!
//! ```text
//!  last generation   a b c d e          (c lost, its slot restarted as c')
//!  next generation   a b c' d e         (not a b d e c')
//!  shrinking         a b e d            (c lost, nothing in its place)
//!  rank 0 lost       e b c d  + newcomers in the holes
//! ```

use super::SlotId;

/// The next generation's ranks: `seated` ranks (up to `cap`) followed by
/// the newcomers beyond them. `last` is the last generation's rank order
/// (lost workers included), `survivors` the members going on, in that
/// order, and `newcomers` the others in spawn order.
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
    let mut seats: Vec<Option<SlotId>> = vec![None; n];
    let mut displaced = Vec::new();
    for s in survivors {
        match last.iter().position(|l| *l == s) {
            Some(r) if r < n && seats[r].is_none() => seats[r] = Some(s),
            _ => displaced.push(s),
        }
    }
    survivor_at_rank_zero(&mut seats, &mut displaced);
    replacements_in_place(last, &mut seats, &mut newcomers);
    let mut fillers = displaced.into_iter().chain(newcomers);
    let mut ranks: Vec<SlotId> = seats
        .into_iter()
        .filter_map(|s| s.or_else(|| fillers.next()))
        .collect();
    // (Nothing is left over: the empty seats are as many as the fillers.)
    ranks.extend(fillers.chain(surplus));
    ranks
}

/// Gives an empty rank 0 to a survivor: the last displaced one, else the
/// one seated at the highest rank (whose seat becomes empty).
fn survivor_at_rank_zero(seats: &mut [Option<SlotId>], displaced: &mut Vec<SlotId>) {
    if seats.first().is_none_or(Option::is_some) {
        return;
    }
    let moved = displaced
        .pop()
        .or_else(|| seats.iter_mut().rev().find_map(Option::take));
    seats[0] = moved;
}

/// Seats each newcomer where the worker it replaces was: a rank whose last
/// holder ran on the same slot, else on the same host.
fn replacements_in_place(
    last: &[SlotId],
    seats: &mut [Option<SlotId>],
    newcomers: &mut Vec<SlotId>,
) {
    let same_slot = |l: &SlotId, c: &SlotId| l == c;
    let same_host = |l: &SlotId, c: &SlotId| l.host == c.host;
    for matches in [&same_slot as &dyn Fn(&SlotId, &SlotId) -> bool, &same_host] {
        newcomers.retain(|c| {
            let hole = (0..seats.len())
                .find(|&r| seats[r].is_none() && last.get(r).is_some_and(|l| matches(l, c)));
            match hole {
                Some(r) => {
                    seats[r] = Some(c.clone());
                    false
                }
                None => true,
            }
        });
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
        let next = seat(&last, slots("a:0 a:2"), slots("b:0 a:1 c:0"), 3);
        assert_eq!(names(&next), "a:0 b:0 a:2 a:1 c:0");
        // More survivors than ranks: the first of them, as they were.
        let next = seat(&last, slots("a:0 a:1 a:2"), slots("b:0"), 2);
        assert_eq!(names(&next), "a:0 a:1 a:2 b:0");
    }

    #[test]
    fn growing_appends_newcomers_after_every_survivor() {
        let last = slots("a:0 a:1");
        let next = seat(&last, slots("a:0 a:1"), slots("b:0 b:1"), 8);
        assert_eq!(names(&next), "a:0 a:1 b:0 b:1");
    }

    #[test]
    fn every_worker_is_placed_once_whatever_the_mix() {
        // Every mix of 6 last ranks and 2 new slots: each lost slot restarted
        // or not, each new slot started or not, every cap. The outcome places
        // every worker once, survivors first up to the cap, rank 0 a
        // survivor's, and a survivor keeps its rank when it is below the
        // world's size and rank 0 was not lost.
        let pool = slots("a:0 a:1 a:2 b:0 b:1 b:2 c:0 c:1");
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
                if alive(0) && survivors.len() <= seated {
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
}
