//! Recursive doubling for latency-bound (small) allreduce: log2(p) exchanges of the
//! whole buffer instead of 2(n-1) ring steps.
//!
//! ```text
//!  n = 6, p = 4, rem = 2        fold        exchange (virtual ranks)    unfold
//!  0 ─┐                          0 ──> 1                                  1 ──> 0
//!  1 <┘  v0   v0 <─> v1, v0 <─> v2 ...
//!  2 ─┐                          2 ──> 3                                  3 ──> 2
//!  3 <┘  v1
//!  4     v2
//!  5     v3
//! ```
//! With `n` not a power of two, the first `2*rem` ranks pair up: the even one hands
//! its buffer to the odd one before the exchanges and gets the result back after.
//! Every combine is `ours (op) theirs` with a commutative op, so every rank ends
//! with bit-identical values.

/// A fold step before or after the exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fold {
    SendTo(usize),
    RecvFrom(usize),
}

/// One rank's part in a recursive-doubling allreduce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoublingPlan {
    pub pre: Option<Fold>,
    /// Partner (real rank) of each exchange round.
    pub rounds: Vec<usize>,
    pub post: Option<Fold>,
}

pub fn recursive_doubling(n: usize, rank: usize) -> DoublingPlan {
    if n <= 1 {
        return DoublingPlan {
            pre: None,
            rounds: Vec::new(),
            post: None,
        };
    }
    let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let rem = n - p;
    if rank < 2 * rem && rank.is_multiple_of(2) {
        return DoublingPlan {
            pre: Some(Fold::SendTo(rank + 1)),
            rounds: Vec::new(),
            post: Some(Fold::RecvFrom(rank + 1)),
        };
    }
    let (virt, pre, post) = if rank < 2 * rem {
        (
            rank / 2,
            Some(Fold::RecvFrom(rank - 1)),
            Some(Fold::SendTo(rank - 1)),
        )
    } else {
        (rank - rem, None, None)
    };
    let real = |v: usize| if v < rem { 2 * v + 1 } else { v + rem };
    let rounds = (0..p.trailing_zeros())
        .map(|bit| real(virt ^ (1 << bit)))
        .collect();
    DoublingPlan { pre, rounds, post }
}

#[cfg(test)]
// Simulations index per-rank arrays by rank, as the schedules describe them.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::schedule::TEST_WORLDS;

    #[test]
    fn every_rank_ends_with_every_contribution_once() {
        for n in TEST_WORLDS {
            let plans: Vec<_> = (0..n).map(|r| recursive_doubling(n, r)).collect();
            let mut have: Vec<u64> = (0..n).map(|r| 1 << r).collect();
            // fold in
            let snapshot = have.clone();
            for (r, p) in plans.iter().enumerate() {
                if let Some(Fold::RecvFrom(f)) = p.pre {
                    assert_eq!(plans[f].pre, Some(Fold::SendTo(r)));
                    have[r] |= snapshot[f];
                }
            }
            let rounds = plans.iter().map(|p| p.rounds.len()).max().unwrap();
            for i in 0..rounds {
                let snapshot = have.clone();
                for (r, p) in plans.iter().enumerate() {
                    if let Some(&q) = p.rounds.get(i) {
                        assert_eq!(plans[q].rounds[i], r, "n={n}: partners must be mutual");
                        assert_eq!(have[r] & snapshot[q], 0, "n={n}: double count");
                        have[r] |= snapshot[q];
                    }
                }
            }
            let snapshot = have.clone();
            for (r, p) in plans.iter().enumerate() {
                if let Some(Fold::RecvFrom(f)) = p.post {
                    assert_eq!(plans[f].post, Some(Fold::SendTo(r)));
                    have[r] = snapshot[f];
                }
            }
            let full = (1u64 << n) - 1;
            assert!(have.iter().all(|&m| m == full), "n={n}: {have:?}");
        }
    }

    #[test]
    fn rounds_are_logarithmic() {
        assert_eq!(recursive_doubling(8, 3).rounds.len(), 3);
        assert_eq!(recursive_doubling(7, 6).rounds.len(), 2);
        assert!(recursive_doubling(1, 0).rounds.is_empty());
    }
}
