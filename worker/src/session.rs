//! [`Session`]: a worker's place in the job, its engine and its tie to the
//! coordinator, on a tokio runtime handle. Nothing in it blocks a thread:
//! joining ([`Session::join`]), rejoining ([`Session::rejoin`]), the control
//! task and the engine are async, and collectives are submitted for a
//! [`crate::Handle`] to await. The blocking [`crate::Worker`] a training
//! program holds is a runtime of its own and a session; the in-process
//! cluster tests run sessions directly, on their paused clock.
//!
//! ```text
//!  join:   open the control link ─> bind an endpoint ─> Register ─> control task
//!          ─> await the placement ─> connect the mesh ─> install
//!  rejoin: end the data plane ─> bind an endpoint ─> Rejoin
//!          ─> await the placement ─> connect the mesh ─> install, retire the old engine
//! ```
//! Dropping a session stops its tasks at once, as a crash would: its peers
//! see its connections end.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use collectives::{Breaker, CollectiveOptions, Generation, MemTransport};
use control::{Knobs, Secret};
use tokio::task::AbortHandle;

use crate::control_link::{Control, Observe};
use crate::data_plane::DataPlane;
use crate::engine::{Engine, EngineConfig, EngineStats, TuningMemory};
use crate::generation::{self, Endpoints, Entered, Place};
use crate::hierarchy::CollectivePaths;
use crate::settings::engine_config;
use crate::{api, pod};

/// How long a world of one waits on itself (it never does: every message it
/// receives it has sent).
const ALONE_TIMEOUT: Duration = Duration::from_secs(60);

/// A worker's place in the job and its engine. Dropping it without
/// [`Session::shutdown`] looks like a crash to its peers.
#[derive(Debug)]
pub struct Session {
    pub(crate) rt: tokio::runtime::Handle,
    pub(crate) engine: Engine,
    pub(crate) place: Place,
    pub(crate) knobs: Option<Knobs>,
    pub(crate) paths: CollectivePaths,
    pub(crate) names: api::Names,
    /// The coordinator connection (`None` when running alone).
    pub(crate) link: Option<Link>,
    /// Autotune samples per world size, across generations.
    pub(crate) memory: TuningMemory,
    /// Optimizer steps the training state holds (see [`Session::steps`]).
    pub(crate) steps: Arc<AtomicU64>,
    pub(crate) observe: Watcher,
    /// The tasks this session started, stopped when it is dropped.
    tasks: Tasks,
}

/// A launched worker's tie to its coordinator.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) control: Control,
    /// How each generation's data-plane endpoint is made.
    pub(crate) endpoints: Box<dyn Endpoints>,
    /// The address this host reaches the coordinator from.
    pub(crate) near: IpAddr,
    /// The job secret: each generation's data-plane key comes from it.
    pub(crate) secret: Secret,
    pub(crate) start_timeout: Duration,
    /// `Some` in an elastic job.
    pub(crate) elastic_timeout: Option<Duration>,
    /// Longest wait of one data-plane send or receive (GPU ones too).
    pub(crate) data_timeout: Duration,
    /// How long the engine busy-waits at most (`None`: its default).
    pub(crate) spin: Option<Duration>,
    /// This worker in etcd, when it joined through etcd.
    pub(crate) pod: Option<Arc<pod::Pod>>,
}

/// Who watches a session (nobody, in a training program).
#[derive(Clone)]
pub(crate) struct Watcher(pub(crate) Arc<dyn Observe>);

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watcher")
    }
}

/// Tasks aborted when dropped.
#[derive(Debug, Default)]
pub(crate) struct Tasks(Vec<AbortHandle>);

impl Tasks {
    pub(crate) fn push(&mut self, task: AbortHandle) {
        self.0.retain(|t| !t.is_finished());
        self.0.push(task);
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

impl Session {
    /// A world of one on the in-memory transport, on `rt`.
    pub fn alone(rt: tokio::runtime::Handle) -> Session {
        let place = Place {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            cross_rank: 0,
            cross_size: 1,
            generation: 0,
        };
        let memory = TuningMemory::default();
        let mut world = MemTransport::world(1, Generation(0), ALONE_TIMEOUT);
        let plane = DataPlane::from(world.remove(0));
        let cfg = engine_config(None, None, &memory);
        let engine = generation::engine_on(&rt, plane, CollectiveOptions::default(), cfg);
        let mut tasks = Tasks::default();
        tasks.push(engine.abort_handle());
        Session {
            rt,
            engine,
            place,
            knobs: None,
            paths: CollectivePaths::default(),
            names: api::Names::default(),
            link: None,
            memory,
            steps: Arc::new(AtomicU64::new(0)),
            observe: Watcher(Arc::new(())),
            tasks,
        }
    }

    /// A session placed in the generation it entered through `link`;
    /// `tasks` are those joining started (the control task).
    pub(crate) fn launched(
        rt: tokio::runtime::Handle,
        entered: Entered,
        link: Link,
        observe: Watcher,
        mut tasks: Tasks,
    ) -> Session {
        let Entered {
            assignment: a,
            plane,
        } = entered;
        let memory = TuningMemory::default();
        let waits = (link.data_timeout, link.spin);
        let traffic = Arc::clone(&link.control.shared.traffic);
        let (engine, p) = generation::start(&rt, &a, plane, waits, &memory, &traffic);
        tasks.push(engine.abort_handle());
        let own = a.peers.get(p.place.rank).cloned();
        // Shared with the control task, which reports it on heartbeats.
        let steps = Arc::clone(&link.control.shared.steps);
        let s = Session {
            rt,
            engine,
            place: p.place,
            knobs: Some(a.knobs),
            paths: p.paths,
            names: api::Names::default(),
            link: Some(link),
            memory,
            steps,
            observe,
            tasks,
        };
        s.publish_generation(p.breaker, own);
        s.observe.0.entered(s.place);
        s
    }

    /// Moves to the generation `entered`; returns the previous
    /// generation's engine, to be retired.
    pub(crate) fn install(&mut self, entered: Entered) -> Engine {
        let Entered {
            assignment: a,
            plane,
        } = entered;
        let waits = self
            .link
            .as_ref()
            .map_or((EngineConfig::default().device_timeout, None), |l| {
                (l.data_timeout, l.spin)
            });
        let traffic = self
            .link
            .as_ref()
            .map(|l| Arc::clone(&l.control.shared.traffic))
            .unwrap_or_default();
        let (engine, p) = generation::start(&self.rt, &a, plane, waits, &self.memory, &traffic);
        self.tasks.push(engine.abort_handle());
        let own = a.peers.get(p.place.rank).cloned();
        let old = std::mem::replace(&mut self.engine, engine);
        self.place = p.place;
        self.paths = p.paths;
        // Unnamed tensors are numbered afresh in every generation, so that
        // survivors and newcomers generate the same names.
        self.names = api::Names::default();
        self.knobs = Some(a.knobs);
        self.publish_generation(p.breaker, own);
        self.observe.0.entered(self.place);
        old
    }

    /// Keeps `task` running as long as this session, no longer.
    pub(crate) fn hold(&mut self, task: AbortHandle) {
        self.tasks.push(task);
    }

    /// Tells the control task about the current generation: heartbeats carry
    /// it, a `Reset` ends its data plane, the stall check sees its engine, and
    /// a reconnection registers with its data-plane address `own`.
    fn publish_generation(&self, breaker: Breaker, own: Option<control::PeerAddress>) {
        let Some(link) = &self.link else { return };
        let stall_check = self
            .knobs
            .as_ref()
            .is_some_and(|k| k.stall_warning_ms.is_some());
        let pending = stall_check.then(|| self.engine.pending());
        link.control
            .shared
            .set_generation(self.place.generation, breaker, pending, own);
    }

    pub fn place(&self) -> Place {
        self.place
    }
    pub fn rank(&self) -> usize {
        self.place.rank
    }
    pub fn size(&self) -> usize {
        self.place.size
    }
    pub fn local_rank(&self) -> usize {
        self.place.local_rank
    }
    pub fn local_size(&self) -> usize {
        self.place.local_size
    }
    pub fn cross_rank(&self) -> usize {
        self.place.cross_rank
    }
    pub fn cross_size(&self) -> usize {
        self.place.cross_size
    }

    /// Optimizer steps this rank's training state holds: each
    /// [`crate::DistributedOptimizer::step`] that handed back gradients
    /// counts one (a program that steps its own optimizer says so with
    /// [`Session::set_steps`]); [`crate::elastic::State`] keeps the count
    /// with its commits, goes back to it when it restores and takes rank
    /// 0's when it syncs. elasticrun reports from it how many steps a
    /// recovery rolled back.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }

    /// Sets the count [`Session::steps`] reports.
    pub fn set_steps(&self, steps: u64) {
        self.steps.store(steps, Ordering::Relaxed);
    }

    /// The engine settings from elasticrun (`None` when running alone).
    pub fn knobs(&self) -> Option<&Knobs> {
        self.knobs.as_ref()
    }

    /// Whether allreduce and allgather run hierarchically in this generation
    /// (and why not, when that was asked for but the hosts do not allow it).
    pub fn collective_paths(&self) -> &CollectivePaths {
        &self.paths
    }

    /// Leaves the job cleanly once every rank has asked to (peers still
    /// finishing are not disturbed); returns the engine's counters.
    pub async fn shutdown(self) -> Option<EngineStats> {
        let Session {
            engine,
            link,
            tasks,
            ..
        } = self;
        let stats = engine.shutdown().await.ok();
        tracing::debug!(?stats, "engine shut down");
        if let Some(link) = link {
            finished(&link).await;
        }
        drop(tasks);
        stats
    }
}

/// Says the training ended cleanly: in etcd (a pod's record outlives it)
/// and to the coordinator, waiting (briefly) until that is written, so that
/// the connection closing next is taken for an exit 0.
async fn finished(link: &Link) {
    if let Some(pod) = &link.pod {
        pod.finished().await;
    }
    let out = &link.control.out;
    let written = link.control.shared.finished_sent.notified();
    if out.send(control::WorkerMsg::Finished).await.is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(2), written).await;
    }
}
