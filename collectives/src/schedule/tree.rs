//! Trees, chains and exchange patterns for broadcast, barrier and alltoall.
//!
//! Binomial tree (small broadcasts), virtual ranks relative to the root:
//! ```text
//!            0
//!        ┌───┼────┐
//!        4   2    1
//!      ┌─┴┐  │
//!      6  5  3
//!      │
//!      7
//! ```
//! Chain (large broadcasts, pipelined in segments): `root -> root+1 -> ... -> root-1`.

/// A rank's neighbours in a broadcast tree or chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Links {
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

fn virt(n: usize, root: usize, rank: usize) -> usize {
    (rank + n - root) % n
}

/// Binomial tree rooted at `root`; children are listed largest subtree first, so
/// the deepest branch starts earliest.
pub fn binomial_tree(n: usize, root: usize, rank: usize) -> Links {
    let v = virt(n, root, rank);
    let real = |x: usize| (x + root) % n;
    let mut mask = 1;
    let mut parent = None;
    while mask < n {
        if v & mask != 0 {
            parent = Some(real(v - mask));
            break;
        }
        mask <<= 1;
    }
    let mut children = Vec::new();
    mask >>= 1;
    while mask > 0 {
        if v + mask < n {
            children.push(real(v + mask));
        }
        mask >>= 1;
    }
    Links { parent, children }
}

/// Chain from `root` through increasing ranks (mod n).
pub fn chain(n: usize, root: usize, rank: usize) -> Links {
    let v = virt(n, root, rank);
    Links {
        parent: (v > 0).then(|| (rank + n - 1) % n),
        children: if v + 1 < n {
            vec![(rank + 1) % n]
        } else {
            Vec::new()
        },
    }
}

/// Dissemination barrier: in round k, send to `rank + 2^k` and receive from
/// `rank - 2^k` (mod n). Returns `(to, from)` per round; ceil(log2 n) rounds.
pub fn dissemination_rounds(n: usize, rank: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut d = 1;
    while d < n {
        out.push(((rank + d) % n, (rank + n - d) % n));
        d <<= 1;
    }
    out
}

/// Pairwise exchange for alltoall: at step s (1..n) send to `rank + s`, receive
/// from `rank - s`, so every pair meets exactly once and no rank is idle.
pub fn pairwise_exchange(n: usize, rank: usize) -> Vec<(usize, usize)> {
    (1..n)
        .map(|s| ((rank + s) % n, (rank + n - s) % n))
        .collect()
}

#[cfg(test)]
// Simulations index per-rank arrays by rank, as the schedules describe them.
#[allow(clippy::needless_range_loop)]
mod tests {
    use super::*;
    use crate::schedule::TEST_WORLDS;

    fn check_spanning(n: usize, root: usize, links: impl Fn(usize) -> Links) {
        let all: Vec<Links> = (0..n).map(&links).collect();
        for (r, l) in all.iter().enumerate() {
            assert_eq!(l.parent.is_none(), r == root, "n={n} root={root} r={r}");
            if let Some(p) = l.parent {
                assert!(all[p].children.contains(&r), "n={n}: {p} does not list {r}");
            }
            for &c in &l.children {
                assert_eq!(all[c].parent, Some(r));
            }
        }
        // reach every rank from the root
        let mut seen = vec![false; n];
        let mut stack = vec![root];
        while let Some(r) = stack.pop() {
            assert!(!seen[r], "cycle at {r}");
            seen[r] = true;
            stack.extend(all[r].children.iter().copied());
        }
        assert!(seen.iter().all(|&s| s), "n={n} root={root}");
    }

    #[test]
    fn binomial_tree_spans_from_any_root() {
        for n in TEST_WORLDS {
            for root in 0..n {
                check_spanning(n, root, |r| binomial_tree(n, root, r));
            }
        }
    }

    #[test]
    fn binomial_tree_depth_is_logarithmic() {
        let n = 13;
        let depth = |mut r: usize| {
            let mut d = 0;
            while let Some(p) = binomial_tree(n, 0, r).parent {
                r = p;
                d += 1;
            }
            d
        };
        assert!((0..n).map(depth).max().unwrap() <= 4);
    }

    #[test]
    fn chain_spans_from_any_root() {
        for n in TEST_WORLDS {
            for root in 0..n {
                check_spanning(n, root, |r| chain(n, root, r));
            }
        }
    }

    #[test]
    fn dissemination_reaches_everyone() {
        for n in TEST_WORLDS {
            // knows[r] = set of ranks whose arrival r has transitively heard of
            let mut knows: Vec<u64> = (0..n).map(|r| 1 << r).collect();
            let rounds = dissemination_rounds(n, 0).len();
            for k in 0..rounds {
                let snap = knows.clone();
                for r in 0..n {
                    let (to, from) = dissemination_rounds(n, r)[k];
                    assert_eq!(dissemination_rounds(n, to)[k].1, r);
                    knows[r] |= snap[from];
                }
            }
            assert!(knows.iter().all(|&m| m == (1u64 << n) - 1), "n={n}");
        }
    }

    #[test]
    fn pairwise_exchange_meets_every_pair_once() {
        for n in TEST_WORLDS {
            let mut met = vec![vec![0; n]; n];
            for r in 0..n {
                for (s, &(to, from)) in pairwise_exchange(n, r).iter().enumerate() {
                    met[r][to] += 1;
                    assert_eq!(pairwise_exchange(n, to)[s].1, r, "receiver expects us");
                    assert_ne!(from, r);
                }
            }
            for r in 0..n {
                for q in 0..n {
                    assert_eq!(met[r][q], usize::from(r != q));
                }
            }
        }
    }
}
