//! An in-process cluster: the coordinator's job driver and simulated workers
//! in one process, under tokio's paused clock, so that elastic scenarios run
//! in milliseconds and a seed replays their choices.
//!
//! ```text
//!  test ──discover / crash / kill──┐
//!                                  ▼
//!  coordinator::job::run_on ── SimLauncher ──spawns──► worker sessions (tasks)
//!    ▲  Arrivals ◄── MemDialer ◄── control links: tokio duplex pipes, real codec + HMAC handshake
//!    │  Store (MemoryStore, shared across a coordinator restart)      │
//!    └──────────────────────────────────────────────── data plane: one MemFabric
//! ```
//!
//! What runs is the real driver (`coordinator::job::run_on`), the real
//! membership core, store, control codec and handshake, and the real worker
//! runtime: each worker is a task running a `worker::Session` (join, control
//! task, rejoin, engine) and `worker::elastic::run_async` over `MemFabric`
//! endpoints (`worker`); only the process around it and its training
//! function (allreduce steps, commits) are the test's. The test watches what
//! the workers did through [`Event`]s and waits on them with deadlines in
//! virtual time.
//!
//! Killing a worker aborts its task (its session's tasks with it) and makes
//! its launcher handle report an exit by signal 9, as for a process.

pub mod checks;
mod launcher;
mod worker;

use std::collections::BTreeMap;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use collectives::MemFabric;
use control::Secret;
use coordinator::config::{self, JobConfig, cli::Cli, file::ConfigFile};
use coordinator::job::discovery::HostFeed;
use coordinator::job::{Ending, JobError, Say, Seams, Stops, WallClock};
use coordinator::server::{self, MemDialer};
use coordinator::store::Store;
use elastic::SlotId;
use elastic::hosts::HostSlots;
use tokio::io::DuplexStream;
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};

pub use worker::Training;

/// Where the cluster's wall clock starts (any fixed time will do).
const WALL_START: Duration = Duration::from_secs(1_800_000_000);

/// Something a simulated worker did, or that happened to it.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Its launcher started it on `slot`.
    Started { pid: u32, slot: SlotId },
    /// It entered `generation` as `rank` of `size`.
    Assigned {
        pid: u32,
        slot: SlotId,
        generation: u64,
        rank: usize,
        size: usize,
    },
    /// It finished step `step` in `generation`; `sum` is what the step's
    /// allreduce gave (every rank adds `rank + 1`).
    Step {
        pid: u32,
        generation: u64,
        rank: usize,
        size: usize,
        step: u64,
        sum: f64,
    },
    /// The coordinator told it to drop its generation for `generation`.
    Reset { pid: u32, generation: u64 },
    /// The coordinator told it that hosts changed, for `generation`.
    HostsUpdated { pid: u32, generation: u64 },
    /// A collective failed (a peer died, or the coordinator said `Reset`): it
    /// went back to its commit at step `to`.
    RolledBack { pid: u32, generation: u64, to: u64 },
    /// Its control connection dropped and it registered again, saying it is
    /// in `generation`.
    Reconnected { pid: u32, generation: u64 },
    /// It ended.
    Exited { pid: u32, slot: SlotId, exit: Exit },
    /// The coordinator said this status line (`elasticrun: ...`).
    Said { line: String },
}

/// How a simulated worker ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Exit {
    /// Exit 0 after its last step, in `generation`, holding `acc`.
    Finished {
        generation: u64,
        steps: u64,
        acc: f64,
    },
    /// Exit 0: it has no place in the job any more.
    Left { reason: String },
    /// Exit 1: stopped by the coordinator, or it gave up.
    Failed { why: String },
    /// Ended by a signal (its launcher's SIGTERM, or a kill).
    Signal(i32),
}

impl Exit {
    /// The exit status a process ending this way has.
    fn status(&self) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Exit::Finished { .. } | Exit::Left { .. } => ExitStatus::from_raw(0),
            Exit::Failed { .. } => ExitStatus::from_raw(1 << 8),
            Exit::Signal(s) => ExitStatus::from_raw(*s),
        }
    }
}

/// The cluster, shared by the test, the launchers and the workers.
#[derive(Clone, Debug)]
pub struct Cluster {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    fabric: MemFabric,
    secret: Secret,
    training: Training,
    clock: WallClock,
    state: Mutex<State>,
    /// Bumped on every event: what the waits watch.
    version: watch::Sender<u64>,
    /// A worker ended: the launcher's news of exits, which the driver sleeps
    /// on (a permit is kept if it is not waiting).
    exits: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    /// The coordinator now running, if any.
    dialer: Option<MemDialer>,
    next_pid: u32,
    workers: BTreeMap<u32, Entry>,
    events: Vec<Event>,
    /// How long the next worker started on a slot takes to register.
    slow_starts: BTreeMap<SlotId, Duration>,
}

/// One simulated worker process.
#[derive(Debug)]
struct Entry {
    slot: SlotId,
    status: Option<ExitStatus>,
    task: Option<AbortHandle>,
}

impl Cluster {
    /// A cluster whose workers train as `training` says. Call from within
    /// the (paused) runtime.
    ///
    /// # Panics
    ///
    /// When no secret can be generated.
    pub fn new(training: Training) -> Self {
        let (version, _) = watch::channel(0);
        let inner = Inner {
            fabric: MemFabric::new(training.data_timeout),
            secret: Secret::generate().expect("a job secret"),
            training,
            clock: WallClock::tokio_from(SystemTime::UNIX_EPOCH + WALL_START),
            state: Mutex::default(),
            version,
            exits: tokio::sync::Notify::new(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, event: Event) {
        self.state().events.push(event);
        self.inner.version.send_modify(|v| *v += 1);
    }

    /// Starts a coordinator for the job `cfg` describes, resuming from
    /// `store` if it holds a state; workers dial it from now on.
    pub fn start_coordinator(&self, cfg: &JobConfig, store: Box<dyn Store>) -> Coordinator {
        let (arrivals, dialer) = server::in_memory(self.inner.secret.clone());
        self.state().dialer = Some(dialer);
        let (hosts, feed) = HostFeed::channel();
        let heard = self.clone();
        let say = Say::to(
            move |line| {
                heard.record(Event::Said {
                    line: line.to_owned(),
                });
            },
            self.inner.clock,
            cfg.output_timestamps,
        );
        let seams = Seams {
            launcher: Box::new(launcher::SimLauncher::new(self.clone())),
            arrivals,
            hosts: feed,
            store,
            clock: self.inner.clock,
            stops: Stops::never(),
            say,
            ca: coordinator::job::job_ca(&self.inner.secret).expect("the job's CA"),
            metrics: coordinator::metrics::JobMetrics::new(),
        };
        let cfg = cfg.clone();
        let task = tokio::spawn(async move { coordinator::job::run_on(&cfg, seams).await });
        Coordinator { task, hosts }
    }

    /// A control connection to the running coordinator (refused when none
    /// runs).
    fn dial(&self) -> std::io::Result<DuplexStream> {
        let dialer = self.state().dialer.clone();
        match dialer {
            Some(d) => d.dial(),
            None => Err(std::io::ErrorKind::ConnectionRefused.into()),
        }
    }

    /// The next worker started on `slot` takes `delay` (virtual time) to
    /// come up and register, as a slow process would.
    pub fn slow_start(&self, slot: SlotId, delay: Duration) {
        self.state().slow_starts.insert(slot, delay);
    }

    /// Kills worker `pid` as `kill -9` would.
    pub fn kill(&self, pid: u32) {
        self.end(pid, Exit::Signal(9));
    }

    /// Ends worker `pid` this way, unless it has ended already.
    fn end(&self, pid: u32, exit: Exit) {
        let slot = {
            let mut state = self.state();
            let Some(w) = state.workers.get_mut(&pid) else {
                return;
            };
            if w.status.is_some() {
                return;
            }
            w.status = Some(exit.status());
            if let Some(t) = w.task.take() {
                t.abort();
            }
            w.slot.clone()
        };
        self.inner.exits.notify_one();
        self.record(Event::Exited { pid, slot, exit });
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.state().events.clone()
    }

    /// The status lines the coordinators said so far.
    pub fn said(&self) -> Vec<String> {
        said(&self.state().events)
    }

    /// Waits until the coordinator says a line that `pick` accepts, for at
    /// most `within` of virtual time; hands the line back.
    ///
    /// # Panics
    ///
    /// When `within` passes first (the message lists the events).
    pub async fn wait_said(
        &self,
        what: &str,
        within: Duration,
        pick: impl Fn(&str) -> bool,
    ) -> String {
        self.wait_for(what, within, |events| {
            said(events).into_iter().find(|l| pick(l))
        })
        .await
    }

    /// The workers running now, by pid.
    pub fn running(&self) -> BTreeMap<u32, SlotId> {
        self.state()
            .workers
            .iter()
            .filter(|(_, w)| w.status.is_none())
            .map(|(pid, w)| (*pid, w.slot.clone()))
            .collect()
    }

    /// Waits until `check` finds what it looks for in the events, for at
    /// most `within` of virtual time.
    ///
    /// # Panics
    ///
    /// When `within` passes first: the message says what was awaited and
    /// lists the events.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        within: Duration,
        mut check: impl FnMut(&[Event]) -> Option<T>,
    ) -> T {
        let mut version = self.inner.version.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(found) = check(&self.state().events) {
                return found;
            }
            if tokio::time::timeout_at(deadline, version.changed())
                .await
                .is_err()
            {
                panic!(
                    "waited {within:?} for {what}; events:\n{}",
                    show(&self.events())
                );
            }
        }
    }
}

/// The status lines among `events`, in order.
pub fn said(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Said { line } => Some(line.clone()),
            _ => None,
        })
        .collect()
}

/// The events one per line, steps left out (there are many).
pub fn show(events: &[Event]) -> String {
    events
        .iter()
        .filter(|e| !matches!(e, Event::Step { .. }))
        .map(|e| format!("  {e:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A running coordinator of the cluster.
#[derive(Debug)]
pub struct Coordinator {
    task: JoinHandle<Result<Ending, JobError>>,
    hosts: mpsc::Sender<Vec<HostSlots>>,
}

impl Coordinator {
    /// Feeds the driver a discovery result, written as `-H` takes it
    /// (`a:2,b:1`).
    ///
    /// # Panics
    ///
    /// On a malformed list, or when the driver has ended.
    pub async fn discover(&self, hosts: &str) {
        let list = elastic::parse_host_list(hosts).expect("a host list");
        self.hosts
            .send(list)
            .await
            .expect("the coordinator takes host sets");
    }

    /// Ends the coordinator at once, as if its process died: its driver is
    /// dropped wherever it was, its control connections close. Replace it
    /// with a new one ([`Cluster::start_coordinator`]).
    pub fn crash(&self) {
        self.task.abort();
    }

    /// How the job ended, waiting at most `within` of virtual time.
    ///
    /// # Panics
    ///
    /// When the job does not end in time, or ends with an error.
    pub async fn ending(self, cluster: &Cluster, within: Duration) -> Ending {
        match tokio::time::timeout(within, self.task).await {
            Ok(Ok(Ok(ending))) => ending,
            Ok(Ok(Err(e))) => panic!("the job failed to run: {e}"),
            Ok(Err(e)) => panic!("the coordinator's task failed: {e}"),
            Err(_) => panic!(
                "the job did not end within {within:?}; events:\n{}",
                show(&cluster.events())
            ),
        }
    }
}

/// The configuration of an elastic job with the options `args` (as on
/// elasticrun's command line), hosts fed by the test.
///
/// # Panics
///
/// When `args` are not valid options.
pub fn elastic_job(args: &[&str]) -> JobConfig {
    let mut argv = vec!["elasticrun", "--host-discovery-script", "fed-by-the-test"];
    argv.extend_from_slice(args);
    argv.push("simulated-worker");
    let cli = Cli::parse_args(argv.into_iter().map(String::from)).expect("valid options");
    config::resolve(&cli, &|_| None, &ConfigFile::default()).expect("a valid configuration")
}
