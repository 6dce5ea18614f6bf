//! Ring schedules. Blocks travel one hop to the right per step:
//!
//! ```text
//!    step s:  rank r sends block (r + shift - s) mod n to r+1,
//!             receives block (r + shift - s - 1) mod n from r-1
//!
//!      ┌──> 0 ──> 1 ──> 2 ──> ... ──> n-1 ──┐
//!      └────────────────────────────────────┘
//! ```
//! Reduce-scatter is n-1 steps that combine what arrives; allgather is n-1 steps
//! that copy it; allreduce is the two back to back (2(n-1) steps, each rank sending
//! 2(n-1)/n of the buffer, which is the bandwidth optimum).

/// One step of a ring pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingStep {
    /// Block sent to the right neighbour.
    pub send: usize,
    /// Block received from the left neighbour.
    pub recv: usize,
    /// Combine the received block into ours (reduce-scatter) or overwrite (allgather).
    pub reduce: bool,
}

fn ring_pass(
    n: usize,
    rank: usize,
    steps: usize,
    shift: usize,
    reduce_steps: usize,
) -> Vec<RingStep> {
    let block = |back: usize| (rank + shift + n * (back / n + 1) - back) % n;
    (0..steps)
        .map(|s| RingStep {
            send: block(s),
            recv: block(s + 1),
            reduce: s < reduce_steps,
        })
        .collect()
}

/// Reduce-scatter then allgather. Block `(r + 1) mod n` is complete at rank `r`
/// after the reduce-scatter half.
pub fn allreduce_ring(n: usize, rank: usize) -> Vec<RingStep> {
    let half = n.saturating_sub(1);
    ring_pass(n, rank, 2 * half, 0, half)
}

/// Every rank starts with its own block `rank` and ends with all of them.
pub fn allgather_ring(n: usize, rank: usize) -> Vec<RingStep> {
    ring_pass(n, rank, n.saturating_sub(1), 0, 0)
}

/// Every rank ends with block `rank` reduced over all ranks.
pub fn reducescatter_ring(n: usize, rank: usize) -> Vec<RingStep> {
    let half = n.saturating_sub(1);
    ring_pass(n, rank, half, half, half)
}

#[cfg(test)]
// Simulations index per-rank arrays by rank, as the schedules describe them.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::schedule::TEST_WORLDS;

    /// Each rank's view of each block: the set of ranks whose contribution it holds
    /// (a bitmask). Simulates the schedule in lockstep.
    fn simulate(
        n: usize,
        start: impl Fn(usize, usize) -> u64,
        sched: impl Fn(usize, usize) -> Vec<RingStep>,
    ) -> Vec<Vec<u64>> {
        let mut state: Vec<Vec<u64>> = (0..n)
            .map(|r| (0..n).map(|b| start(r, b)).collect())
            .collect();
        let plans: Vec<_> = (0..n).map(|r| sched(n, r)).collect();
        let steps = plans[0].len();
        for s in 0..steps {
            let sent: Vec<(usize, u64)> = (0..n)
                .map(|r| {
                    let st = plans[r][s];
                    (st.send, state[r][st.send])
                })
                .collect();
            for r in 0..n {
                let st = plans[r][s];
                let (block, mask) = sent[(r + n - 1) % n];
                assert_eq!(
                    block, st.recv,
                    "n={n} r={r} s={s}: left neighbour sent another block"
                );
                if st.reduce {
                    assert_eq!(
                        state[r][block] & mask,
                        0,
                        "n={n} r={r} s={s}: counted a rank twice"
                    );
                    state[r][block] |= mask;
                } else {
                    state[r][block] = mask;
                }
            }
        }
        state
    }

    fn full(n: usize) -> u64 {
        (1u64 << n) - 1
    }

    #[test]
    fn allreduce_gives_every_rank_every_contribution() {
        for n in TEST_WORLDS {
            let st = simulate(n, |r, _| 1 << r, allreduce_ring);
            assert!(st.iter().flatten().all(|&m| m == full(n)), "n={n}: {st:?}");
        }
    }

    #[test]
    fn reducescatter_leaves_block_r_complete_at_rank_r() {
        for n in TEST_WORLDS {
            let st = simulate(n, |r, _| 1 << r, reducescatter_ring);
            for (r, row) in st.iter().enumerate() {
                assert_eq!(row[r], full(n), "n={n} r={r}");
            }
        }
    }

    #[test]
    fn allgather_delivers_each_block_from_its_owner() {
        for n in TEST_WORLDS {
            let st = simulate(n, |r, b| if r == b { 1 << r } else { 0 }, allgather_ring);
            for row in &st {
                for (b, &m) in row.iter().enumerate() {
                    assert_eq!(m, 1 << b, "n={n}");
                }
            }
        }
    }

    #[test]
    fn each_step_sends_what_arrived_the_step_before() {
        for n in TEST_WORLDS {
            for r in 0..n {
                let p = allreduce_ring(n, r);
                for w in p.windows(2) {
                    assert_eq!(w[1].send, w[0].recv, "n={n} r={r}");
                }
            }
        }
    }
}
