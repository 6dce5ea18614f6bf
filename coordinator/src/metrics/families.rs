//! The metric families and their registration: names, help and units.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::{JobState, ResetCause};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct StateLabel {
    pub(super) state: JobState,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct WorkerStateLabel {
    pub(super) state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RankLabel {
    pub(super) rank: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PartLabel {
    pub(super) part: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CauseLabel {
    pub(super) cause: ResetCause,
}

pub(super) type FloatGauge = Gauge<f64, AtomicU64>;

/// Buckets of the time histograms: 5 ms to about 80 s, doubling.
fn time_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.005, 2.0, 15)
}

/// Every family, each also registered in `registry`.
#[derive(Debug)]
pub(super) struct Families {
    pub(super) registry: Registry,
    pub(super) state: Family<StateLabel, Gauge>,
    pub(super) generation: Gauge,
    pub(super) world_size: Gauge,
    pub(super) min_np: Gauge,
    pub(super) max_np: Gauge,
    pub(super) workers_running: Gauge,
    pub(super) workers: Family<WorkerStateLabel, Gauge>,
    pub(super) worker_starts: Counter,
    pub(super) worker_failures: Counter,
    pub(super) resets: Family<CauseLabel, Counter>,
    pub(super) recovery: Histogram,
    pub(super) fault_detection: Histogram,
    pub(super) rolled_back: Counter,
    pub(super) committed_step: Gauge,
    pub(super) blacklisted: Gauge,
    pub(super) discovery_runs: Counter,
    pub(super) discovery_failures: Counter,
    pub(super) time: Family<PartLabel, FloatGauge>,
    pub(super) goodput_ratio: FloatGauge,
    pub(super) rank_steps: Family<RankLabel, Gauge>,
    pub(super) rank_rate: Family<RankLabel, FloatGauge>,
    pub(super) rank_step_time: Family<RankLabel, FloatGauge>,
    pub(super) rank_bytes: Family<RankLabel, FloatGauge>,
    pub(super) rank_wait: Family<RankLabel, FloatGauge>,
    pub(super) rank_straggler: Family<RankLabel, Gauge>,
    pub(super) stragglers: Counter,
    pub(super) etcd_leader: Gauge,
    pub(super) etcd_epoch: Gauge,
    pub(super) etcd_failovers: Counter,
}

impl Families {
    /// Every family, registered with the `elasticrun` prefix.
    pub(super) fn new() -> Self {
        let mut r = Registry::with_prefix("elasticrun");
        let f = Families {
            registry: Registry::default(),
            state: Family::default(),
            generation: Gauge::default(),
            world_size: Gauge::default(),
            min_np: Gauge::default(),
            max_np: Gauge::default(),
            workers_running: Gauge::default(),
            workers: Family::default(),
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
            rank_steps: Family::default(),
            rank_rate: Family::default(),
            rank_step_time: Family::default(),
            rank_bytes: Family::default(),
            rank_wait: Family::default(),
            rank_straggler: Family::default(),
            stragglers: Counter::default(),
            etcd_leader: Gauge::default(),
            etcd_epoch: Gauge::default(),
            etcd_failovers: Counter::default(),
        };
        register_job(&mut r, &f);
        register_resets(&mut r, &f);
        register_goodput(&mut r, &f);
        register_ranks(&mut r, &f);
        Families { registry: r, ..f }
    }

    /// The etcd families, registered by `elasticrun serve` only.
    pub(super) fn register_etcd(&mut self) {
        let r = &mut self.registry;
        r.register(
            "etcd_leader",
            "1 while this replica of elasticrun serve leads the job, 0 while it stands by",
            self.etcd_leader.clone(),
        );
        r.register(
            "etcd_leader_epoch",
            "The epoch (election key's create revision) of this replica's current or last \
             leadership; every later leader's is higher",
            self.etcd_epoch.clone(),
        );
        r.register(
            "etcd_failovers",
            "Leaderships this replica took over from another replica that led the job",
            self.etcd_failovers.clone(),
        );
    }

    /// The per-rank families' series of `rank`, removed.
    pub(super) fn forget_rank(&self, rank: u32) {
        let label = RankLabel { rank };
        self.rank_steps.remove(&label);
        self.rank_rate.remove(&label);
        self.rank_step_time.remove(&label);
        self.rank_bytes.remove(&label);
        self.rank_wait.remove(&label);
        self.rank_straggler.remove(&label);
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
        "workers",
        "The job's workers by state: starting (started, not registered yet), waiting \
         (registered, waiting for a place: hot spares, joiners), training (in the current \
         generation)",
        f.workers.clone(),
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

/// Resets, recoveries, failures, commits, hosts and discovery.
fn register_resets(r: &mut Registry, f: &Families) {
    r.register(
        "resets",
        "Resets, by cause: failure (a worker exited, was killed, lost its connection or went \
         silent), stall, straggler (--straggler-action replace), hosts_added, hosts_removed",
        f.resets.clone(),
    );
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
}

/// The job's wall time by part, and goodput.
fn register_goodput(r: &mut Registry, f: &Families) {
    r.register_with_unit(
        "time",
        "The job's wall time by part: training, startup, waiting (for --min-np slots), \
         recovery, rolled_back (training that a failure undid, moved out of training once \
         known), stall (training time lost to a stall that ended a rank)",
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
    r.register_with_unit(
        "rank_step",
        "Each rank's time a step outside collectives, between its last two heartbeats (a \
         straggler's is the longest)",
        Unit::Seconds,
        f.rank_step_time.clone(),
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
    r.register(
        "rank_straggler",
        "1 for a rank named a straggler (--straggler-factor, --straggler-steps), else 0",
        f.rank_straggler.clone(),
    );
    r.register("stragglers", "Ranks named stragglers", f.stragglers.clone());
}
