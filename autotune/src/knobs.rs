//! The knobs the autotuner moves, their tuned ranges, and the job layout that decides
//! whether the hierarchical switches are tuned at all.

use serde::{Deserialize, Serialize};

/// Lowest tuned fusion threshold (threshold 0, "off", is a separate level).
pub const FUSION_MIN_BYTES: u64 = 1 << 20;
/// Highest tuned fusion threshold.
pub const FUSION_MAX_BYTES: u64 = 256 << 20;
/// Tuned fusion thresholds are multiples of this (1/16 MiB).
pub const FUSION_GRID_BYTES: u64 = 64 << 10;
/// Shortest tuned cycle time.
pub const CYCLE_MIN_US: u64 = 100;
/// Longest tuned cycle time (Horovod's upper bound).
pub const CYCLE_MAX_US: u64 = 100_000;
/// Smallest tuned ring segment.
pub const SEGMENT_MIN_BYTES: u64 = 64 << 10;
/// Largest tuned ring segment.
pub const SEGMENT_MAX_BYTES: u64 = 16 << 20;
/// Tuned segment sizes are multiples of this.
pub const SEGMENT_GRID_BYTES: u64 = 4 << 10;

/// One setting of every performance knob: what the engine runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Knobs {
    /// 0 turns fusion off.
    pub fusion_threshold_bytes: u64,
    pub cycle_time_us: u64,
    pub cache_enabled: bool,
    pub hierarchical_allreduce: bool,
    pub hierarchical_allgather: bool,
    /// Bytes per message in the ring, chain and alltoall schedules.
    pub segment_bytes: u64,
}

impl Default for Knobs {
    /// elasticrun's defaults: 64 MiB, 1 ms, cache on, flat collectives, 512 KiB segments.
    fn default() -> Self {
        Knobs {
            fusion_threshold_bytes: 64 << 20,
            cycle_time_us: 1000,
            cache_enabled: true,
            hierarchical_allreduce: false,
            hierarchical_allgather: false,
            segment_bytes: 512 << 10,
        }
    }
}

/// A knob's name, to say which ones the user fixed: the one the coordinator
/// sends ([`control::Knob`]), so that what the user set reaches the tuner as
/// it is.
pub use control::Knob;

/// How the job is laid out, as far as the space cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Hosts running at least one rank.
    pub hosts: usize,
    /// Ranks on the most populated host.
    pub max_local_size: usize,
}

impl Layout {
    /// Hierarchical collectives change anything only across several hosts that each
    /// run several ranks; otherwise both switches are held at their initial value.
    pub fn hierarchical_applies(&self) -> bool {
        self.hosts > 1 && self.max_local_size > 1
    }
}
