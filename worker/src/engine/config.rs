//! [`EngineConfig`]: what an engine runs with, from the job's knobs.

use std::sync::Arc;
use std::time::Duration;

use collectives::{Collectives, Hierarchy, Host};

use super::autotune::AutotuneSetup;
use super::messages::Tuning;
use super::timeline::TimelineConfig;

/// Engine settings (from the job's knobs).
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    pub cycle_time: Duration,
    pub cache_capacity: usize,
    pub fusion_threshold_bytes: usize,
    /// Rank 0 writes the timeline here (Horovod's `--timeline-filename`).
    pub timeline: Option<TimelineConfig>,
    /// Rank 0 tunes the knobs while the engine runs.
    pub autotune: Option<AutotuneSetup>,
    /// The ranks' host grid, when the layout has one: hierarchical
    /// collectives can be switched on only then (the communicator's options
    /// say whether they start on).
    pub hierarchy: Option<Arc<Hierarchy>>,
    /// How long one GPU (NCCL) operation may take before its communicator
    /// is aborted and the engine fails with the peers taken for lost: the
    /// data plane's timeout (`--gloo-timeout-seconds`), default 60 s.
    pub device_timeout: Duration,
    /// How long no new submission must have come before a small burst is
    /// taken as complete, the engine yielding and looking again meanwhile
    /// (`ELASTICRUN_SPIN_US` caps it; 0: a few yields only). Default 50 µs.
    pub settle_quiet: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cycle_time: Duration::from_millis(1),
            cache_capacity: 1024,
            fusion_threshold_bytes: 64 << 20,
            timeline: None,
            autotune: None,
            hierarchy: None,
            device_timeout: Duration::from_secs(60),
            settle_quiet: Duration::from_micros(50),
        }
    }
}

/// The settings the engine starts with.
pub(super) fn starting_tuning(cfg: &EngineConfig, comm: &impl Collectives<Host>) -> Tuning {
    let o = comm.options();
    Tuning {
        fusion_threshold_bytes: cfg.fusion_threshold_bytes as u64,
        cycle_time_us: u64::try_from(cfg.cycle_time.as_micros()).unwrap_or(u64::MAX),
        cache_enabled: cfg.cache_capacity > 0,
        hierarchical_allreduce: o.hierarchical_allreduce.is_some(),
        hierarchical_allgather: o.hierarchical_allgather.is_some(),
        segment_bytes: o.segment_bytes as u64,
    }
}
