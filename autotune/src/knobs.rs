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

/// One setting of every performance knob, what the engine runs with, and
/// a knob's name, to say which ones the user fixed: the coordinator's own
/// ([`control::Tuning`], [`control::Knob`]), so that where a job starts and
/// what the user set reach the tuner as they are.
pub use control::{Knob, Tuning};

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
