//! The job seen from outside: Prometheus metrics of the coordinator, served
//! at `/metrics` of `--metrics-address` ([`http`]). The families are
//! registered once; the driver sets them as the job goes (one handle,
//! cheap to clone, shared with the server), and the exposition is
//! prometheus-client's (Prometheus's text format 0.0.4): nothing here
//! formats a line by hand. docs/observability.md lists every metric.

pub mod goodput;
pub mod http;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use goodput::{Goodput, PARTS, Part};

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// A rank's progress as its heartbeat tells it: counts since its worker
/// started.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Progress {
    /// Optimizer steps its training state holds.
    pub steps: u64,
    /// Bytes its collectives carried.
    pub collective_bytes: u64,
    /// How long it waited in collectives after submitting.
    pub collective_wait: Duration,
}

/// What the job is doing.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for its first generation.
    Starting,
    Training,
    /// Between a reset and its new generation running.
    Recovering,
    Succeeded,
    Failed,
}

const STATES: [JobState; 5] = [
    JobState::Starting,
    JobState::Training,
    JobState::Recovering,
    JobState::Succeeded,
    JobState::Failed,
];

/// Why a generation was replaced.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ResetCause {
    /// A worker failed (exited, lost its connection, went silent, stalled).
    Failure,
    /// Discovery's host set changed.
    HostsChanged,
}

impl JobState {
    fn name(self) -> &'static str {
        match self {
            JobState::Starting => "starting",
            JobState::Training => "training",
            JobState::Recovering => "recovering",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
        }
    }
}

impl EncodeLabelValue for JobState {
    fn encode(&self, e: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        e.write_str(self.name())
    }
}

impl EncodeLabelValue for ResetCause {
    fn encode(&self, e: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        e.write_str(match self {
            ResetCause::Failure => "failure",
            ResetCause::HostsChanged => "hosts_changed",
        })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: JobState,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RankLabel {
    rank: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartLabel {
    part: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabel {
    cause: ResetCause,
}

/// Buckets of the time histograms: 5 ms to about 80 s, doubling.
fn time_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.005, 2.0, 15)
}

#[derive(Debug)]
struct Families {
    registry: Registry,
    state: Family<StateLabel, Gauge>,
    generation: Gauge,
    world_size: Gauge,
    min_np: Gauge,
    max_np: Gauge,
    workers_running: Gauge,
    worker_starts: Counter,
    worker_failures: Counter,
    resets: Family<CauseLabel, Counter>,
    recovery: Histogram,
    fault_detection: Histogram,
    rolled_back: Counter,
    committed_step: Gauge,
    blacklisted: Gauge,
    discovery_runs: Counter,
    discovery_failures: Counter,
    time: Family<PartLabel, Gauge<f64, AtomicU64>>,
    goodput_ratio: Gauge<f64, AtomicU64>,
    goodput: Mutex<Goodput>,
    rank_steps: Family<RankLabel, Gauge>,
    rank_rate: Family<RankLabel, Gauge<f64, AtomicU64>>,
    rank_bytes: Family<RankLabel, Gauge<f64, AtomicU64>>,
    rank_wait: Family<RankLabel, Gauge<f64, AtomicU64>>,
    /// Each rank's last heartbeat: when, and its progress then.
    beats: Mutex<std::collections::HashMap<u32, (tokio::time::Instant, Progress)>>,
    world: AtomicU64,
}

/// The job's metrics: a handle shared by the driver and the server.
#[derive(Clone, Debug)]
pub struct JobMetrics(Arc<Families>);

impl Default for JobMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl JobMetrics {
    /// Every family registered, the job starting.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("elasticrun");
        let f = Families {
            state: Family::default(),
            generation: Gauge::default(),
            world_size: Gauge::default(),
            min_np: Gauge::default(),
            max_np: Gauge::default(),
            workers_running: Gauge::default(),
            worker_starts: Counter::default(),
            worker_failures: Counter::default(),
            resets: Family::default(),
            recovery: Histogram::new(time_buckets()),
            fault_detection: Histogram::new(time_buckets()),
            rolled_back: Counter::default(),
            committed_step: Gauge::default(),
            blacklisted: Gauge::default(),
            discovery_runs: Counter::default(),
            discovery_failures: Counter::default(),
            time: Family::default(),
            goodput_ratio: Gauge::default(),
            goodput: Mutex::new(Goodput::new(tokio::time::Instant::now())),
            rank_steps: Family::default(),
            rank_rate: Family::default(),
            rank_bytes: Family::default(),
            rank_wait: Family::default(),
            beats: Mutex::default(),
            world: AtomicU64::new(0),
            registry: Registry::default(),
        };
        register_job(&mut r, &f);
        register_resets(&mut r, &f);
        register_ranks(&mut r, &f);
        let metrics = JobMetrics(Arc::new(Families { registry: r, ..f }));
        metrics.set_state(JobState::Starting);
        for cause in [ResetCause::Failure, ResetCause::HostsChanged] {
            // Each cause shown from the start, at 0.
            metrics
                .0
                .resets
                .get_or_create(&CauseLabel { cause })
                .inc_by(0);
        }
        metrics
    }

    /// The exposition, in Prometheus's text format 0.0.4.
    pub fn render(&self) -> String {
        self.update_time();
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.0.registry);
        out
    }

    /// The Content-Type of [`JobMetrics::render`]'s text.
    pub const CONTENT_TYPE: &'static str = "text/plain; version=0.0.4; charset=utf-8";

    fn goodput(&self) -> std::sync::MutexGuard<'_, Goodput> {
        self.0
            .goodput
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The time gauges, as of now.
    fn update_time(&self) {
        let mut g = self.goodput();
        g.flush(tokio::time::Instant::now());
        for part in PARTS {
            let label = PartLabel { part: part.name() };
            self.0
                .time
                .get_or_create(&label)
                .set(g.total(part).as_secs_f64());
        }
        let wall = g.wall().as_secs_f64();
        if wall > 0.0 {
            self.0
                .goodput_ratio
                .set(g.total(Part::Training).as_secs_f64() / wall);
        }
    }

    /// The goodput line said at the end of an elastic job.
    pub fn goodput_summary(&self) -> String {
        let mut g = self.goodput();
        g.flush(tokio::time::Instant::now());
        g.summary()
    }

    pub fn set_state(&self, now: JobState) {
        let at = tokio::time::Instant::now();
        match now {
            JobState::Starting => {}
            JobState::Training => {
                let step = u64::try_from(self.0.committed_step.get()).unwrap_or(0);
                self.goodput().training(at, step);
            }
            JobState::Recovering => self.goodput().recovering(at),
            JobState::Succeeded | JobState::Failed => self.goodput().end(at),
        }
        for s in STATES {
            self.0
                .state
                .get_or_create(&StateLabel { state: s })
                .set(i64::from(s == now));
        }
    }

    pub fn set_bounds(&self, min_np: usize, max_np: Option<usize>) {
        self.0.min_np.set(clamp(min_np));
        self.0.max_np.set(max_np.map_or(-1, clamp));
    }

    /// Rank `rank` said, at `at`, how far it got (a heartbeat).
    pub fn rank_progress(&self, rank: usize, now: Progress, at: tokio::time::Instant) {
        let Ok(rank) = u32::try_from(rank) else {
            return;
        };
        let label = RankLabel { rank };
        self.0
            .rank_steps
            .get_or_create(&label)
            .set(i64::try_from(now.steps).unwrap_or(i64::MAX));
        let mut beats = self.0.beats.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((then, before)) = beats.insert(rank, (at, now)) else {
            return;
        };
        let secs = at.saturating_duration_since(then).as_secs_f64();
        if secs <= 0.0 {
            return;
        }
        // A rollback (fewer steps) says nothing of the rate.
        if now.steps >= before.steps {
            let rate = (now.steps - before.steps) as f64 / secs;
            self.0.rank_rate.get_or_create(&label).set(rate);
        }
        if now.collective_bytes >= before.collective_bytes {
            let rate = (now.collective_bytes - before.collective_bytes) as f64 / secs;
            self.0.rank_bytes.get_or_create(&label).set(rate);
        }
        if let Some(waited) = now.collective_wait.checked_sub(before.collective_wait) {
            let share = waited.as_secs_f64() / secs;
            self.0.rank_wait.get_or_create(&label).set(share);
        }
    }

    /// A generation assigned with `world_size` ranks.
    pub fn generation(&self, generation: u64, world_size: usize) {
        let before = self.0.world.swap(world_size as u64, Ordering::Relaxed);
        // Ranks the new generation does not have are gone from the page;
        // every rank's rate starts afresh (a rank may be another worker).
        let mut beats = self.0.beats.lock().unwrap_or_else(PoisonError::into_inner);
        beats.clear();
        for rank in world_size as u64..before {
            let label = RankLabel {
                rank: u32::try_from(rank).unwrap_or(u32::MAX),
            };
            self.0.rank_steps.remove(&label);
            self.0.rank_rate.remove(&label);
            self.0.rank_bytes.remove(&label);
            self.0.rank_wait.remove(&label);
        }
        drop(beats);
        self.0
            .generation
            .set(i64::try_from(generation).unwrap_or(i64::MAX));
        self.0.world_size.set(clamp(world_size));
    }

    pub fn worker_started(&self) {
        self.0.worker_starts.inc();
    }

    /// How many worker processes run now.
    pub fn set_workers(&self, running: usize) {
        self.0.workers_running.set(clamp(running));
    }

    /// A worker failed, acted on `detected_after` its first sign (when
    /// known: a stall has none).
    pub fn worker_failed(&self, detected_after: Option<Duration>) {
        self.0.worker_failures.inc();
        if let Some(after) = detected_after {
            self.0.fault_detection.observe(after.as_secs_f64());
        }
    }

    pub fn reset(&self, cause: ResetCause) {
        self.0.resets.get_or_create(&CauseLabel { cause }).inc();
        self.set_state(JobState::Recovering);
    }

    /// A recovery ended: the new generation trains from `step`, having
    /// rolled back `rolled_back` steps, `took` after the reset.
    pub fn recovered(&self, took: Duration, step: u64, rolled_back: u64) {
        self.0.recovery.observe(took.as_secs_f64());
        self.0.rolled_back.inc_by(rolled_back);
        self.goodput().rolled_back(step, rolled_back);
        self.0
            .committed_step
            .set(i64::try_from(step).unwrap_or(i64::MAX));
        self.set_state(JobState::Training);
    }

    pub fn blacklisted(&self, more: bool) {
        if more {
            self.0.blacklisted.inc();
        } else {
            self.0.blacklisted.dec();
        }
    }

    /// A discovery run, and whether it failed.
    pub fn discovery(&self, failed: bool) {
        self.0.discovery_runs.inc();
        if failed {
            self.0.discovery_failures.inc();
        }
    }
}

/// The job as a whole: its state, generation, size and workers.
fn register_job(r: &mut Registry, f: &Families) {
    r.register(
        "job_state",
        "The job's state: 1 for the one it is in, 0 for the others",
        f.state.clone(),
    );
    r.register(
        "generation",
        "The job's generation (each reset starts a new one)",
        f.generation.clone(),
    );
    r.register(
        "world_size",
        "Ranks in the current generation",
        f.world_size.clone(),
    );
    r.register(
        "min_np",
        "The fewest ranks the job trains with (--min-np; -np for a static job)",
        f.min_np.clone(),
    );
    r.register(
        "max_np",
        "The most ranks the job trains with (--max-np; -1: no cap)",
        f.max_np.clone(),
    );
    r.register(
        "workers_running",
        "Worker processes running",
        f.workers_running.clone(),
    );
    r.register(
        "worker_starts",
        "Worker processes started",
        f.worker_starts.clone(),
    );
    r.register(
        "worker_failures",
        "Workers that failed (exited non-zero, were killed, lost their connection, went \
         silent, stalled)",
        f.worker_failures.clone(),
    );
}

/// Resets, recoveries, failures, commits, hosts, discovery and goodput.
fn register_resets(r: &mut Registry, f: &Families) {
    r.register("resets", "Resets, by cause", f.resets.clone());
    r.register_with_unit(
        "recovery",
        "From a reset to every rank of the new generation training",
        Unit::Seconds,
        f.recovery.clone(),
    );
    r.register_with_unit(
        "fault_detection",
        "From a worker's first sign of failure (its exit, its connection closing) to \
         elasticrun acting on it",
        Unit::Seconds,
        f.fault_detection.clone(),
    );
    r.register(
        "rolled_back_steps",
        "Optimizer steps rolled back by recoveries (trained, not committed)",
        f.rolled_back.clone(),
    );
    r.register(
        "committed_step",
        "The step the current generation went on from (its last commit)",
        f.committed_step.clone(),
    );
    r.register(
        "blacklisted_hosts",
        "Hosts left out because their workers keep failing",
        f.blacklisted.clone(),
    );
    r.register(
        "discovery_runs",
        "Host discovery runs",
        f.discovery_runs.clone(),
    );
    r.register(
        "discovery_failures",
        "Host discovery runs that failed, timed out or printed garbage",
        f.discovery_failures.clone(),
    );
    r.register_with_unit(
        "time",
        "The job's wall time by part: training, startup, recovery, rolled_back (training \
         that a failure undid, moved out of training once known)",
        Unit::Seconds,
        f.time.clone(),
    );
    r.register(
        "goodput_ratio",
        "Training time over the job's wall time",
        f.goodput_ratio.clone(),
    );
}

/// Each rank, from its heartbeats.
fn register_ranks(r: &mut Registry, f: &Families) {
    r.register(
        "rank_steps",
        "Optimizer steps each rank's training state holds, from its heartbeats",
        f.rank_steps.clone(),
    );
    r.register(
        "rank_steps_per_second",
        "Each rank's optimizer steps a second between its last two heartbeats",
        f.rank_rate.clone(),
    );
    r.register(
        "rank_collective_bytes_per_second",
        "Bytes each rank's collectives carried a second, between its last two heartbeats",
        f.rank_bytes.clone(),
    );
    r.register(
        "rank_collective_wait_ratio",
        "The share of the time between its last two heartbeats each rank waited in \
         collectives after submitting (a rank that keeps the others waiting waits least)",
        f.rank_wait.clone(),
    );
}

fn clamp(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
