//! [`EngineConfig`]: what an engine runs with, from the job's knobs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Where the engine counts what its collectives moved and how long
    /// this rank waited in them (one per worker, across generations; the
    /// heartbeats report it).
    pub traffic: Arc<Traffic>,
}

/// What a worker's engines moved and waited for: bytes of the tensors their
/// collectives carried on this rank, and the time from this rank's last
/// submission of a group to the group's end (a rank that keeps the others
/// waiting waits least).
#[derive(Debug, Default)]
pub struct Traffic {
    bytes: AtomicU64,
    wait_nanos: AtomicU64,
}

/// The same counters, not equal counts: configs compare equal when they
/// count into one place.
impl PartialEq for Traffic {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Traffic {
    pub fn add(&self, bytes: u64, wait: Duration) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.wait_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn wait(&self) -> Duration {
        Duration::from_nanos(self.wait_nanos.load(Ordering::Relaxed))
    }
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
            traffic: Arc::default(),
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
