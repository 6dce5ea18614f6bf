//! Whether this generation's allreduce and allgather run hierarchically
//! (within hosts, then across them): the knobs ask, the host of every rank
//! decides. A request the layout cannot serve (one host, one rank per host,
//! hosts with different numbers of ranks) runs flat, and rank 0 logs why.

use std::fmt;
use std::sync::Arc;

use collectives::{CollectiveOptions, Hierarchy, NotHierarchical, Topology};
use control::Knobs;

/// How one collective runs in this generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CollectivePath {
    /// Over all ranks at once (the default).
    #[default]
    Flat,
    /// Within each host, then across hosts.
    Hierarchical,
    /// Hierarchical was asked for, but the host layout does not allow it.
    FlatFallback(NotHierarchical),
}

impl CollectivePath {
    pub fn is_hierarchical(&self) -> bool {
        *self == CollectivePath::Hierarchical
    }
}

impl fmt::Display for CollectivePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CollectivePath::Flat => f.write_str("flat"),
            CollectivePath::Hierarchical => f.write_str("hierarchical"),
            CollectivePath::FlatFallback(why) => write!(f, "flat ({why})"),
        }
    }
}

/// The paths of the two collectives that have a hierarchical variant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectivePaths {
    pub allreduce: CollectivePath,
    pub allgather: CollectivePath,
}

/// The data-plane options for `knobs` on a world whose rank `r` is on host
/// `hosts[r]`, the paths they give, and the host grid when there is one.
pub(crate) fn options(
    knobs: &Knobs,
    hosts: &[u32],
) -> (CollectiveOptions, CollectivePaths, Option<Arc<Hierarchy>>) {
    let topology = Topology::from_hosts(hosts);
    let grid = topology.hierarchy().map(Arc::new);
    let choose = |asked: bool| match (asked, &grid) {
        (false, _) => (None, CollectivePath::Flat),
        (true, Ok(h)) => (Some(h.clone()), CollectivePath::Hierarchical),
        (true, Err(why)) => (None, CollectivePath::FlatFallback(why.clone())),
    };
    let (allreduce_grid, allreduce) = choose(knobs.tuning.hierarchical_allreduce);
    let (allgather_grid, allgather) = choose(knobs.tuning.hierarchical_allgather);
    // GPU allreduces take the two levels with one rank per host too.
    let device_grid = match knobs.tuning.hierarchical_allreduce {
        true => topology.device_hierarchy().ok().map(Arc::new),
        false => None,
    };
    let opts = CollectiveOptions {
        hierarchical_allreduce: allreduce_grid,
        hierarchical_allgather: allgather_grid,
        device_hierarchical_allreduce: device_grid,
        segment_bytes: usize::try_from(knobs.tuning.segment_bytes.max(1)).unwrap_or(usize::MAX),
        ..CollectiveOptions::default()
    };
    let paths = CollectivePaths {
        allreduce,
        allgather,
    };
    (opts, paths, grid.ok())
}

/// Logs (once per job: on rank 0) each hierarchical request that runs flat.
pub(crate) fn log_fallbacks(paths: &CollectivePaths, rank: usize) {
    if rank != 0 {
        return;
    }
    for (what, path) in [
        ("allreduce", &paths.allreduce),
        ("allgather", &paths.allgather),
    ] {
        match path {
            CollectivePath::FlatFallback(why @ NotHierarchical::OneRankPerHost)
                if what == "allreduce" =>
            {
                tracing::warn!(
                    %why,
                    "hierarchical allreduce asked for; running it flat in host memory \
                     (GPU allreduces still take two levels: NCCL on each host, the data plane across)"
                );
            }
            CollectivePath::FlatFallback(why) => {
                tracing::warn!(%why, "hierarchical {what} asked for; running it flat");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(allreduce: bool, allgather: bool) -> Knobs {
        Knobs {
            tuning: control::Tuning {
                hierarchical_allreduce: allreduce,
                hierarchical_allgather: allgather,
                ..control::Tuning::default()
            },
            ..Knobs::default()
        }
    }

    #[test]
    fn the_knobs_ask_and_the_hosts_decide() {
        let two_by_two = [0, 0, 1, 1];
        let (o, p, grid) = options(&knobs(true, false), &two_by_two);
        assert_eq!(grid.map(|g| (g.cross_size(), g.local_size())), Some((2, 2)));
        assert!(p.allreduce.is_hierarchical() && p.allgather == CollectivePath::Flat);
        let h = o.hierarchical_allreduce.expect("a grid for allreduce");
        assert_eq!((h.local_size(), h.cross_size()), (2, 2));
        assert_eq!(o.device_hierarchical_allreduce, Some(h));
        assert!(o.hierarchical_allgather.is_none());

        let (o, p, _) = options(&knobs(false, true), &two_by_two);
        assert!(o.hierarchical_allreduce.is_none() && o.hierarchical_allgather.is_some());
        assert!(p.allgather.is_hierarchical());

        let (o, p, _) = options(&knobs(false, false), &two_by_two);
        assert_eq!(o, CollectiveOptions::default());
        assert_eq!(p, CollectivePaths::default());
    }

    #[test]
    fn one_rank_per_host_runs_host_allreduces_flat_and_gpu_ones_in_two_levels() {
        let (o, p, grid) = options(&knobs(true, false), &[0, 1]);
        assert!(grid.is_none() && o.hierarchical_allreduce.is_none());
        assert_eq!(
            p.allreduce,
            CollectivePath::FlatFallback(NotHierarchical::OneRankPerHost)
        );
        let d = o.device_hierarchical_allreduce.expect("a device grid");
        assert_eq!((d.cross_size(), d.local_size()), (2, 1));
        let (o, _, _) = options(&knobs(false, true), &[0, 1]);
        assert!(o.device_hierarchical_allreduce.is_none());
    }

    #[test]
    fn layouts_without_a_grid_fall_back_with_the_reason() {
        let (o, p, _) = options(&knobs(true, true), &[0, 0, 0, 1]);
        assert!(o.hierarchical_allreduce.is_none() && o.hierarchical_allgather.is_none());
        let uneven = CollectivePath::FlatFallback(NotHierarchical::Uneven {
            host: 1,
            ranks: 1,
            expected: 3,
        });
        assert_eq!(p.allreduce, uneven);
        assert_eq!(p.allgather, uneven);
        assert!(o.device_hierarchical_allreduce.is_none());
        let (o, p, grid) = options(&knobs(true, false), &[0, 0, 0, 0]);
        assert!(grid.is_none() && o.device_hierarchical_allreduce.is_none());
        assert_eq!(
            p.allreduce.to_string(),
            "flat (the ranks are on 1 host(s); the hierarchical path needs at least two)"
        );
    }
}
