//! Where ranks go. As horovodrun does, ranks fill each host's slots in the order
//! the hosts are given, so consecutive ranks share a host:
//!
//! ```text
//!  hosts a:2, b:3, c:2, np = 6
//!  host      a       b          c
//!  rank      0 1     2 3 4      5
//!  local     0 1     0 1 2      0
//!  cross     0 0     1 1 0      2      (index among hosts that have this local rank)
//! ```
//! Pure: the same hosts and np always give the same layout.

use elastic::hosts::HostSlots;

/// One rank's place in the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub rank: usize,
    /// Index into the host list.
    pub host: usize,
    /// Rank among the ranks on this host.
    pub local_rank: usize,
    pub local_size: usize,
    /// Index of this host among the hosts that have a rank with this local rank.
    pub cross_rank: usize,
    pub cross_size: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("at least one process is needed")]
    NoProcesses,
    #[error("{requested} processes requested but the hosts offer only {available} slots")]
    NotEnoughSlots { requested: usize, available: usize },
}

/// Places `np` ranks on `hosts`.
pub fn place(hosts: &[HostSlots], np: usize) -> Result<Vec<Placement>, LayoutError> {
    if np == 0 {
        return Err(LayoutError::NoProcesses);
    }
    let available: usize = hosts.iter().map(|h| h.slots).sum();
    if np > available {
        return Err(LayoutError::NotEnoughSlots {
            requested: np,
            available,
        });
    }
    // Ranks used on each host, filling hosts in order.
    let mut left = np;
    let host_of_rank: Vec<usize> = hosts
        .iter()
        .enumerate()
        .flat_map(|(host, h)| {
            let take = h.slots.min(left);
            left -= take;
            std::iter::repeat_n(host, take)
        })
        .collect();
    Ok(placements(&host_of_rank))
}

/// Every rank's place from the host each rank runs on (`host_of_rank[r]`,
/// hosts numbered by their first rank), in rank order: the local rank is the
/// position among the earlier ranks of the same host, the cross rank the
/// position of the host among the hosts that have a rank with that local
/// rank. Static jobs fill hosts in order; an elastic generation keeps its
/// survivors' order, so a host's ranks need not be consecutive.
pub fn placements(host_of_rank: &[usize]) -> Vec<Placement> {
    let hosts = host_of_rank.iter().max().map_or(0, |m| m + 1);
    let mut on_host = vec![0usize; hosts];
    for &h in host_of_rank {
        on_host[h] += 1;
    }
    // cross[h][l]: the position of host h among the hosts, in host order,
    // that have a rank with local rank l; with_local[l]: how many there are.
    // Linear in the ranks: thousands of ranks on hundreds of hosts.
    let deepest = on_host.iter().copied().max().unwrap_or(0);
    let mut with_local = vec![0usize; deepest];
    let cross: Vec<Vec<usize>> = on_host
        .iter()
        .map(|&count| {
            (0..count)
                .map(|l| {
                    with_local[l] += 1;
                    with_local[l] - 1
                })
                .collect()
        })
        .collect();
    let mut seen = vec![0usize; hosts];
    host_of_rank
        .iter()
        .enumerate()
        .map(|(rank, &host)| {
            let local_rank = seen[host];
            seen[host] += 1;
            Placement {
                rank,
                host,
                local_rank,
                local_size: on_host[host],
                cross_rank: cross[host][local_rank],
                cross_size: with_local[local_rank],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(spec: &[(&str, usize)]) -> Vec<HostSlots> {
        spec.iter()
            .map(|&(h, s)| HostSlots {
                host: h.into(),
                slots: s,
            })
            .collect()
    }

    fn row(p: &[Placement], f: impl Fn(&Placement) -> usize) -> Vec<usize> {
        p.iter().map(f).collect()
    }

    #[test]
    fn the_documented_example() {
        let p = place(&hosts(&[("a", 2), ("b", 3), ("c", 2)]), 6).unwrap();
        assert_eq!(row(&p, |x| x.host), [0, 0, 1, 1, 1, 2]);
        assert_eq!(row(&p, |x| x.local_rank), [0, 1, 0, 1, 2, 0]);
        assert_eq!(row(&p, |x| x.local_size), [2, 2, 3, 3, 3, 1]);
        assert_eq!(row(&p, |x| x.cross_rank), [0, 0, 1, 1, 0, 2]);
        assert_eq!(row(&p, |x| x.cross_size), [3, 2, 3, 2, 1, 3]);
    }

    #[test]
    fn one_machine() {
        let p = place(&hosts(&[("localhost", 4)]), 4).unwrap();
        assert_eq!(row(&p, |x| x.local_rank), [0, 1, 2, 3]);
        assert!(
            p.iter()
                .all(|x| x.local_size == 4 && x.cross_rank == 0 && x.cross_size == 1)
        );
    }

    #[test]
    fn unused_slots_and_hosts_are_left_empty() {
        let p = place(&hosts(&[("a", 4), ("b", 4)]), 3).unwrap();
        assert!(p.iter().all(|x| x.host == 0 && x.local_size == 3));
    }

    #[test]
    fn too_many_processes_or_none() {
        assert_eq!(
            place(&hosts(&[("a", 2), ("b", 1)]), 4),
            Err(LayoutError::NotEnoughSlots {
                requested: 4,
                available: 3
            })
        );
        assert_eq!(place(&hosts(&[("a", 2)]), 0), Err(LayoutError::NoProcesses));
    }

    #[test]
    fn local_and_cross_ranks_identify_every_rank_once() {
        for spec in [
            &[("a", 1)][..],
            &[("a", 3), ("b", 1), ("c", 2)],
            &[("a", 2), ("b", 2), ("c", 2), ("d", 2)],
        ] {
            let hs = hosts(spec);
            let total: usize = hs.iter().map(|h| h.slots).sum();
            for np in 1..=total {
                let p = place(&hs, np).unwrap();
                assert_eq!(row(&p, |x| x.rank), (0..np).collect::<Vec<_>>());
                let mut pairs: Vec<_> = p.iter().map(|x| (x.local_rank, x.cross_rank)).collect();
                pairs.sort_unstable();
                pairs.dedup();
                assert_eq!(pairs.len(), np, "{spec:?} np={np}");
                for x in &p {
                    assert!(x.local_rank < x.local_size && x.cross_rank < x.cross_size);
                }
            }
        }
    }

    /// The definition, word for word: quadratic and more, for checking.
    fn by_definition(host_of_rank: &[usize]) -> Vec<Placement> {
        let hosts = host_of_rank.iter().max().map_or(0, |m| m + 1);
        let on_host = |h: usize| host_of_rank.iter().filter(|&&x| x == h).count();
        (0..host_of_rank.len())
            .map(|rank| {
                let host = host_of_rank[rank];
                let local_rank = host_of_rank[..rank].iter().filter(|&&x| x == host).count();
                let with_local: Vec<usize> =
                    (0..hosts).filter(|&x| on_host(x) > local_rank).collect();
                Placement {
                    rank,
                    host,
                    local_rank,
                    local_size: on_host(host),
                    cross_rank: with_local.iter().position(|&x| x == host).unwrap_or(0),
                    cross_size: with_local.len(),
                }
            })
            .collect()
    }

    #[test]
    fn placements_match_the_definition_on_scattered_hosts() {
        // A fixed generator: every run checks the same layouts.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m) as usize
        };
        for _ in 0..200 {
            let hosts = 1 + next(6);
            let n = 1 + next(24);
            // Numbered by first rank, as the callers number them.
            let mut seen = 0;
            let host_of_rank: Vec<usize> = (0..n)
                .map(|_| {
                    let h = next(hosts as u64).min(seen);
                    seen = seen.max(h + 1);
                    h
                })
                .collect();
            assert_eq!(
                placements(&host_of_rank),
                by_definition(&host_of_rank),
                "{host_of_rank:?}"
            );
        }
    }
}
