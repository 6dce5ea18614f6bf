//! Which ranks share a host, and the two-level grid the hierarchical collectives
//! run on.
//!
//! ```text
//!  host of each rank:  a a b b c c          Hierarchy: 3 hosts x 2 local ranks
//!  rank:               0 1 2 3 4 5
//!                                                     local 0   local 1
//!                                       host a  (0)   rank 0    rank 1    <- a host's ranks:
//!                                       host b  (1)   rank 2    rank 3       intra-host steps
//!                                       host c  (2)   rank 4    rank 5
//!                                                       ^
//!                                       ranks with one local rank: cross-host steps
//! ```
//! A [`Topology`] is any assignment of ranks to hosts. Hosts are numbered in the
//! order their first rank appears, a rank's local rank is its position among its
//! host's ranks in rank order, and its cross rank is its host's number. Only a
//! topology of at least two hosts that all hold the same number (at least two)
//! of ranks becomes a [`Hierarchy`]; any other is told why
//! ([`NotHierarchical`]) and its collectives run flat. Horovod asks the same
//! (homogeneous hosts) of its hierarchical path.
//!
//! Pure: every rank builds the same value from the same list.

use std::collections::HashMap;
use std::hash::Hash;

use crate::tag::Rank;

/// Every rank's host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// `hosts[h]`: the ranks on host `h`, ascending.
    hosts: Vec<Vec<Rank>>,
    /// `host_of[r]`: the host of rank `r`.
    host_of: Vec<usize>,
}

/// Why a topology cannot run the hierarchical collectives.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotHierarchical {
    #[error("the ranks are on {hosts} host(s); the hierarchical path needs at least two")]
    TooFewHosts { hosts: usize },
    #[error("every host has one rank, so there is nothing to combine within a host")]
    OneRankPerHost,
    #[error(
        "host {host} has {ranks} rank(s) but host 0 has {expected}; the hierarchical path needs \
         the same number on every host"
    )]
    Uneven {
        host: usize,
        ranks: usize,
        expected: usize,
    },
}

impl Topology {
    /// The topology in which rank `r` is on host `host_of_rank[r]` (any key that
    /// names a host: a name, an index).
    pub fn from_hosts<K: Eq + Hash>(host_of_rank: &[K]) -> Topology {
        let mut index: HashMap<&K, usize> = HashMap::new();
        let mut hosts: Vec<Vec<Rank>> = Vec::new();
        let mut host_of = Vec::with_capacity(host_of_rank.len());
        for (rank, key) in host_of_rank.iter().enumerate() {
            let next = hosts.len();
            let h = *index.entry(key).or_insert(next);
            if h == next {
                hosts.push(Vec::new());
            }
            hosts[h].push(rank);
            host_of.push(h);
        }
        Topology { hosts, host_of }
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.host_of.len()
    }

    /// Number of hosts.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// The host of `rank` (`None` outside the world).
    pub fn host_of(&self, rank: Rank) -> Option<usize> {
        self.host_of.get(rank).copied()
    }

    /// The ranks on `host`, ascending (empty for an unknown host).
    pub fn ranks_on(&self, host: usize) -> &[Rank] {
        self.hosts.get(host).map_or(&[], Vec::as_slice)
    }

    /// The two-level grid of the host collectives, when this topology has
    /// one: at least two hosts with the same number of ranks, at least two
    /// each (with one rank per host there is nothing to combine in host
    /// memory).
    pub fn hierarchy(&self) -> Result<Hierarchy, NotHierarchical> {
        self.grid(2)
    }

    /// The two-level grid of the GPU allreduce: as [`Topology::hierarchy`],
    /// one rank per host included. There the host's level is a one-rank
    /// NCCL communicator and every byte between GPUs crosses the host data
    /// plane, so that ranks that share one GPU act as separate hosts.
    pub fn device_hierarchy(&self) -> Result<Hierarchy, NotHierarchical> {
        self.grid(1)
    }

    fn grid(&self, min_local: usize) -> Result<Hierarchy, NotHierarchical> {
        if self.hosts.len() < 2 {
            return Err(NotHierarchical::TooFewHosts {
                hosts: self.hosts.len(),
            });
        }
        let expected = self.hosts[0].len();
        if let Some((host, ranks)) = self
            .hosts
            .iter()
            .enumerate()
            .find(|(_, r)| r.len() != expected)
        {
            return Err(NotHierarchical::Uneven {
                host,
                ranks: ranks.len(),
                expected,
            });
        }
        if expected < min_local {
            return Err(NotHierarchical::OneRankPerHost);
        }
        let mut places = vec![(0, 0); self.size()];
        for (h, ranks) in self.hosts.iter().enumerate() {
            for (l, &r) in ranks.iter().enumerate() {
                places[r] = (h, l);
            }
        }
        Ok(Hierarchy {
            grid: self.hosts.clone(),
            places,
        })
    }
}

/// A world of `cross_size` hosts (at least two) with `local_size` ranks each
/// (at least two from [`Topology::hierarchy`], at least one from
/// [`Topology::device_hierarchy`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    /// `grid[h][l]`: the rank with local rank `l` on host `h`.
    grid: Vec<Vec<Rank>>,
    /// `places[r]`: (cross rank, local rank) of rank `r`.
    places: Vec<(usize, usize)>,
}

impl Hierarchy {
    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.places.len()
    }

    /// Ranks per host.
    pub fn local_size(&self) -> usize {
        self.grid[0].len()
    }

    /// Number of hosts.
    pub fn cross_size(&self) -> usize {
        self.grid.len()
    }

    /// Position of `rank` among its host's ranks. Panics outside the world.
    pub fn local_rank(&self, rank: Rank) -> usize {
        self.places[rank].1
    }

    /// Index of `rank`'s host. Panics outside the world.
    pub fn cross_rank(&self, rank: Rank) -> usize {
        self.places[rank].0
    }

    /// The rank with local rank `local` on host `cross`. Panics outside the grid.
    pub fn rank_at(&self, cross: usize, local: usize) -> Rank {
        self.grid[cross][local]
    }

    /// The ranks on `rank`'s host, by local rank.
    pub fn host_ranks(&self, rank: Rank) -> &[Rank] {
        &self.grid[self.cross_rank(rank)]
    }

    /// The ranks with `rank`'s local rank, by host.
    pub fn cross_ranks(&self, rank: Rank) -> Vec<Rank> {
        let l = self.local_rank(rank);
        self.grid.iter().map(|host| host[l]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hier(hosts: &[&str]) -> Result<Hierarchy, NotHierarchical> {
        Topology::from_hosts(hosts).hierarchy()
    }

    #[test]
    fn hosts_are_numbered_by_first_appearance_and_ranks_keep_their_order() {
        let t = Topology::from_hosts(&["b", "a", "b", "c", "a"]);
        assert_eq!((t.size(), t.host_count()), (5, 3));
        assert_eq!(t.ranks_on(0), [0, 2]);
        assert_eq!(t.ranks_on(1), [1, 4]);
        assert_eq!(t.ranks_on(2), [3]);
        assert_eq!(t.ranks_on(3), [] as [usize; 0]);
        assert_eq!(t.host_of(4), Some(1));
        assert_eq!(t.host_of(5), None);
    }

    #[test]
    fn host_major_layout_gives_the_launchers_local_and_cross_ranks() {
        // 3 hosts x 2 slots, as elasticrun lays ranks out.
        let h = hier(&["a", "a", "b", "b", "c", "c"]).unwrap();
        assert_eq!((h.size(), h.local_size(), h.cross_size()), (6, 2, 3));
        for r in 0..6 {
            assert_eq!(
                (h.local_rank(r), h.cross_rank(r)),
                (r % 2, r / 2),
                "rank {r}"
            );
            assert_eq!(h.rank_at(r / 2, r % 2), r);
        }
        assert_eq!(h.host_ranks(3), [2, 3]);
        assert_eq!(h.cross_ranks(3), [1, 3, 5]);
    }

    #[test]
    fn interleaved_hosts_still_form_a_grid() {
        // Ranks need not be host-major (survivors keep their order after a change).
        let h = hier(&["x", "y", "y", "x"]).unwrap();
        assert_eq!(h.host_ranks(0), [0, 3]);
        assert_eq!(h.host_ranks(1), [1, 2]);
        assert_eq!(h.cross_ranks(3), [3, 2]);
        assert_eq!((h.local_rank(2), h.cross_rank(2)), (1, 1));
    }

    #[test]
    fn every_rank_appears_once_in_the_grid() {
        for (hosts, slots) in [(2, 2), (3, 2), (2, 3), (4, 5)] {
            let names: Vec<usize> = (0..hosts * slots).map(|r| r / slots).collect();
            let h = Topology::from_hosts(&names).hierarchy().unwrap();
            let mut seen: Vec<Rank> = (0..hosts)
                .flat_map(|c| (0..slots).map(move |l| (c, l)))
                .map(|(c, l)| h.rank_at(c, l))
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..hosts * slots).collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_device_grid_takes_one_rank_per_host_and_nothing_uneven() {
        let one = Topology::from_hosts(&["a", "b", "c"])
            .device_hierarchy()
            .unwrap();
        assert_eq!((one.cross_size(), one.local_size()), (3, 1));
        assert_eq!((one.cross_rank(2), one.local_rank(2)), (2, 0));
        assert_eq!(one.cross_ranks(1), [0, 1, 2]);
        let two = Topology::from_hosts(&["a", "a", "b", "b"]);
        assert_eq!(two.device_hierarchy(), two.hierarchy());
        assert_eq!(
            Topology::from_hosts(&["a", "a"]).device_hierarchy(),
            Err(NotHierarchical::TooFewHosts { hosts: 1 })
        );
        assert_eq!(
            Topology::from_hosts(&["a", "b", "b"]).device_hierarchy(),
            Err(NotHierarchical::Uneven {
                host: 1,
                ranks: 2,
                expected: 1
            })
        );
    }

    #[test]
    fn topologies_without_a_grid_say_why() {
        assert_eq!(
            hier(&["a", "a", "a", "a"]),
            Err(NotHierarchical::TooFewHosts { hosts: 1 })
        );
        assert_eq!(hier(&[]), Err(NotHierarchical::TooFewHosts { hosts: 0 }));
        assert_eq!(hier(&["a", "b", "c"]), Err(NotHierarchical::OneRankPerHost));
        assert_eq!(
            hier(&["a", "a", "b", "b", "b"]),
            Err(NotHierarchical::Uneven {
                host: 1,
                ranks: 3,
                expected: 2
            })
        );
        let why = hier(&["a", "b", "b"]).unwrap_err().to_string();
        assert!(
            why.contains("host 1 has 2 rank(s) but host 0 has 1"),
            "{why}"
        );
    }
}
