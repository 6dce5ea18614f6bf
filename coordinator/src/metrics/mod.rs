//! The job seen from outside: Prometheus metrics of the coordinator, served
//! at `/metrics` of `--metrics-address` ([`http`]), and the same job as the
//! status page at `/` and `/status.json` show it ([`status`]). The
//! families are registered once (`families.rs`); the driver sets them as the
//! job goes (one handle, cheap to clone, shared with the server), and the
//! exposition is prometheus-client's (Prometheus's text format 0.0.4):
//! nothing here formats a line by hand. docs/observability.md lists every
//! metric.

mod families;
pub mod goodput;
pub mod http;
pub mod status;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};
use serde::Serialize;
use tokio::time::Instant;

use families::{CauseLabel, Families, PartLabel, StateLabel};
use goodput::{Goodput, PARTS, Part};
use status::{EtcdView, View};

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
    /// A worker failed (exited, was killed, lost its connection, went
    /// silent).
    Failure,
    /// A stall past `--stall-shutdown-time-seconds` ended a rank.
    Stall,
    /// A straggler was taken out (`--straggler-action replace`).
    Straggler,
    /// Hosts or slots were added (discovery, a host back from the
    /// blacklist).
    HostsAdded,
    /// Hosts or slots were removed (discovery, a node lost).
    HostsRemoved,
}

const CAUSES: [ResetCause; 5] = [
    ResetCause::Failure,
    ResetCause::Stall,
    ResetCause::Straggler,
    ResetCause::HostsAdded,
    ResetCause::HostsRemoved,
];

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

impl ResetCause {
    pub fn name(self) -> &'static str {
        match self {
            ResetCause::Failure => "failure",
            ResetCause::Stall => "stall",
            ResetCause::Straggler => "straggler",
            ResetCause::HostsAdded => "hosts_added",
            ResetCause::HostsRemoved => "hosts_removed",
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
        e.write_str(self.name())
    }
}

#[derive(Debug)]
struct Inner {
    f: Families,
    goodput: Mutex<Goodput>,
    view: Mutex<View>,
    state: Mutex<JobState>,
    /// The last exposition's length, in bytes.
    exposition: AtomicUsize,
}

/// The job's metrics: a handle shared by the driver and the server.
#[derive(Clone, Debug)]
pub struct JobMetrics(Arc<Inner>);

impl Default for JobMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Room for an exposition after one of `last` bytes: a quarter more, and
/// never less than the coordinator's mmap threshold, so that each scrape's
/// text is one block mapped on its own and given back whole. A string
/// doubling its way to the text's length (which grows with the job's
/// counters and series) took a new place in the heap now and then, and
/// the heap's resident pages rose with it.
fn exposition_room(last: usize) -> usize {
    (last + last / 4).max(crate::malloc::MMAP_THRESHOLD)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl JobMetrics {
    /// Every family registered, the job starting.
    pub fn new() -> Self {
        Self::with(Families::new())
    }

    /// [`JobMetrics::new`] with etcd mode's leadership families
    /// (`elasticrun serve`).
    pub fn for_serve() -> Self {
        let mut f = Families::new();
        f.register_etcd();
        let m = Self::with(f);
        lock(&m.0.view).etcd = Some(EtcdView::default());
        m
    }

    fn with(f: Families) -> Self {
        let now = Instant::now();
        let metrics = JobMetrics(Arc::new(Inner {
            f,
            goodput: Mutex::new(Goodput::new(now)),
            view: Mutex::new(View::new(now)),
            state: Mutex::new(JobState::Starting),
            exposition: AtomicUsize::new(0),
        }));
        metrics.set_state(JobState::Starting);
        for cause in CAUSES {
            // Each cause shown from the start, at 0.
            metrics
                .0
                .f
                .resets
                .get_or_create(&CauseLabel { cause })
                .inc_by(0);
        }
        metrics
    }

    /// The exposition, in Prometheus's text format 0.0.4.
    pub fn render(&self) -> String {
        self.update_time();
        let last = self.0.exposition.load(Ordering::Relaxed);
        let mut out = String::with_capacity(exposition_room(last));
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.0.f.registry);
        self.0.exposition.store(out.len(), Ordering::Relaxed);
        out
    }

    /// The Content-Type of [`JobMetrics::render`]'s text.
    pub const CONTENT_TYPE: &'static str = "text/plain; version=0.0.4; charset=utf-8";

    fn goodput(&self) -> MutexGuard<'_, Goodput> {
        lock(&self.0.goodput)
    }

    fn view(&self) -> MutexGuard<'_, View> {
        lock(&self.0.view)
    }

    /// The time gauges, as of now; the goodput ratio.
    fn update_time(&self) -> f64 {
        let mut g = self.goodput();
        g.flush(Instant::now());
        for part in PARTS {
            let label = PartLabel { part: part.name() };
            let total = g.total(part).as_secs_f64();
            self.0.f.time.get_or_create(&label).set(total);
        }
        let wall = g.wall().as_secs_f64();
        let ratio = if wall > 0.0 {
            g.total(Part::Training).as_secs_f64() / wall
        } else {
            0.0
        };
        self.0.f.goodput_ratio.set(ratio);
        ratio
    }

    /// Takes a goodput sample for the page's chart, if one is due.
    pub fn sample(&self) {
        let ratio = self.update_time();
        self.view().sample(Instant::now(), ratio);
    }

    /// The goodput line said at the end of an elastic job.
    pub fn goodput_summary(&self) -> String {
        let mut g = self.goodput();
        g.flush(Instant::now());
        g.summary()
    }

    pub fn set_state(&self, now: JobState) {
        let at = Instant::now();
        match now {
            JobState::Starting => {}
            JobState::Training => {
                let step = u64::try_from(self.0.f.committed_step.get()).unwrap_or(0);
                self.goodput().training(at, step);
            }
            JobState::Recovering => self.goodput().recovering(at),
            JobState::Succeeded | JobState::Failed => self.goodput().end(at),
        }
        *lock(&self.0.state) = now;
        for s in STATES {
            let gauge = self.0.f.state.get_or_create(&StateLabel { state: s });
            gauge.set(i64::from(s == now));
        }
    }

    pub fn set_bounds(&self, min_np: usize, max_np: Option<usize>) {
        self.0.f.min_np.set(clamp(min_np));
        self.0.f.max_np.set(max_np.map_or(-1, clamp));
    }

    /// Whether the job waits for slots (fewer than `--min-np` to be had).
    pub fn waiting(&self, short: bool) {
        self.goodput().waiting(Instant::now(), short);
    }

    /// A stall that lasted `lasted` ended a rank.
    pub fn stalled(&self, lasted: Duration) {
        self.goodput().stalled(Instant::now(), lasted);
    }
}

mod ranks;

impl JobMetrics {
    pub fn worker_started(&self) {
        self.0.f.worker_starts.inc();
    }

    /// How many worker processes run now, and the job's workers by state.
    pub fn set_workers(&self, running: usize, by_state: elastic::membership::WorkerCounts) {
        self.0.f.workers_running.set(clamp(running));
        for (state, n) in [
            ("starting", by_state.starting),
            ("waiting", by_state.waiting),
            ("training", by_state.members),
        ] {
            let label = families::WorkerStateLabel { state };
            self.0.f.workers.get_or_create(&label).set(clamp(n));
        }
    }

    /// A worker failed, acted on `detected_after` its first sign (when
    /// known: a stall has none).
    pub fn worker_failed(&self, detected_after: Option<Duration>) {
        self.0.f.worker_failures.inc();
        if let Some(after) = detected_after {
            self.0.f.fault_detection.observe(after.as_secs_f64());
        }
    }

    pub fn reset(&self, cause: ResetCause) {
        self.0.f.resets.get_or_create(&CauseLabel { cause }).inc();
        self.view().next_cause = Some(cause.name());
        self.set_state(JobState::Recovering);
    }

    /// A recovery ended: the new generation trains from `step`, having
    /// rolled back `rolled_back` steps, `took` after the reset.
    pub fn recovered(&self, took: Duration, step: u64, rolled_back: u64) {
        self.0.f.recovery.observe(took.as_secs_f64());
        self.0.f.rolled_back.inc_by(rolled_back);
        self.goodput().rolled_back(step, rolled_back);
        self.view().recovered(took, rolled_back);
        let step = i64::try_from(step).unwrap_or(i64::MAX);
        self.0.f.committed_step.set(step);
        self.set_state(JobState::Training);
    }

    pub fn blacklisted(&self, more: bool) {
        if more {
            self.0.f.blacklisted.inc();
        } else {
            self.0.f.blacklisted.dec();
        }
    }

    /// A discovery run, and whether it failed.
    pub fn discovery(&self, failed: bool) {
        self.0.f.discovery_runs.inc();
        if failed {
            self.0.f.discovery_failures.inc();
        }
    }

    /// `elasticrun serve`: this replica leads (at `epoch`, having taken
    /// over from another replica that led if `failover`), or stands by.
    pub fn etcd(&self, leading: Option<(i64, bool)>) {
        let mut view = self.view();
        let e = view.etcd.get_or_insert_default();
        e.leader = leading.is_some();
        self.0.f.etcd_leader.set(i64::from(e.leader));
        if let Some((epoch, failover)) = leading {
            e.epoch = epoch;
            self.0.f.etcd_epoch.set(epoch);
            if failover {
                e.failovers += 1;
                self.0.f.etcd_failovers.inc();
            }
        }
    }

    /// `/status.json`: the job now and its history.
    pub fn status_json(&self) -> String {
        let ratio = self.update_time();
        let mut seconds = BTreeMap::new();
        {
            let g = self.goodput();
            for part in PARTS {
                seconds.insert(part.name(), g.total(part).as_secs_f64());
            }
        }
        let mut resets = BTreeMap::new();
        for cause in CAUSES {
            let n = self.0.f.resets.get_or_create(&CauseLabel { cause }).get();
            resets.insert(cause.name(), n);
        }
        let wall_seconds = seconds.values().sum();
        let f = &self.0.f;
        let view = self.view();
        let status = Status {
            state: lock(&self.0.state).name(),
            generation: f.generation.get(),
            world_size: f.world_size.get(),
            min_np: f.min_np.get(),
            max_np: Some(f.max_np.get()).filter(|&n| n >= 0),
            committed_step: f.committed_step.get(),
            wall_seconds,
            goodput: GoodputView { ratio, seconds },
            resets,
            ranks: &view.ranks,
            history: &view.history,
            goodput_over_time: &view.samples,
            etcd: view.etcd,
        };
        // Rendered into room for the document at its bound, the same for
        // every scrape while the world size stays: a buffer that grew with
        // the history had raised the heap's high-water mark scrape after
        // scrape.
        let mut out = Vec::with_capacity(status::document_room(view.ranks.len()));
        let text = serde_json::to_writer(&mut out, &status)
            .map_err(|e| e.to_string())
            .and_then(|()| String::from_utf8(out).map_err(|e| e.to_string()));
        text.unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[derive(Serialize)]
struct GoodputView {
    ratio: f64,
    seconds: BTreeMap<&'static str, f64>,
}

/// `/status.json`'s document.
#[derive(Serialize)]
struct Status<'a> {
    state: &'static str,
    generation: i64,
    world_size: i64,
    min_np: i64,
    max_np: Option<i64>,
    committed_step: i64,
    wall_seconds: f64,
    goodput: GoodputView,
    resets: BTreeMap<&'static str, u64>,
    ranks: &'a [status::RankView],
    history: &'a std::collections::VecDeque<status::GenerationView>,
    goodput_over_time: &'a [status::Sample],
    etcd: Option<EtcdView>,
}

fn clamp(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
