//! [`Worker`]: a training process's place in the job and its engine.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use collectives::{Breaker, CollectiveOptions, Generation, MemTransport};
use control::{Assignment, Knobs};

use crate::affinity::AffinityError;
use crate::control_link;
use crate::data_plane::DataPlane;
use crate::engine::{Engine, EngineConfig, EngineStats, TuningMemory};
use crate::error::InitError;
use crate::generation::{self, Entered, Place};
use crate::hierarchy::CollectivePaths;
use crate::settings::engine_config;
use crate::{affinity, api, env, join, pod};

/// A joined worker. Dropping it without [`Worker::shutdown`] looks like a crash
/// to its peers.
#[derive(Debug)]
pub struct Worker {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) engine: Engine,
    pub(crate) place: Place,
    pub(crate) knobs: Option<Knobs>,
    pub(crate) paths: CollectivePaths,
    pub(crate) names: api::Names,
    /// The coordinator connection (`None` when running alone).
    pub(crate) link: Option<Link>,
    /// Autotune samples per world size, across generations.
    pub(crate) memory: TuningMemory,
    /// Optimizer steps the training state holds (see [`Worker::steps`]).
    pub(crate) steps: AtomicU64,
}

/// A launched worker's tie to its coordinator.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) control: control_link::Control,
    pub(crate) data_bind: crate::generation::DataBind,
    pub(crate) start_timeout: Duration,
    /// `Some` in an elastic job.
    pub(crate) elastic_timeout: Option<Duration>,
    /// Longest wait of one data-plane send or receive.
    pub(crate) data_timeout: Duration,
    /// This worker in etcd, when it joined through etcd.
    pub(crate) pod: Option<Arc<pod::Pod>>,
    /// The job secret: each generation's data-plane key comes from it.
    pub(crate) secret: control::Secret,
}

/// How long a world of one waits on itself (it never does: every message it
/// receives it has sent).
const ALONE_TIMEOUT: Duration = Duration::from_secs(60);

/// The worker's runtime: one worker thread, where the engine and the
/// connections' tasks run (the thread `--thread-affinity` pins).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, InitError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("elasticrun-worker")
        .enable_all()
        .build()
        .map_err(|e| InitError::Runtime { why: e.to_string() })
}

/// Joins the job described by the environment `elasticrun` set, or makes a world
/// of one when there is none.
pub fn init() -> Result<Worker, InitError> {
    let get = |k: &str| std::env::var(k).ok();
    default_logging(env::log_level(get)?);
    // Many peers mean many sockets (and elasticrun raised it already for the
    // workers it starts itself, not for those ssh starts).
    if let Err(e) = control::limits::raise_open_files() {
        tracing::debug!(%e, "cannot raise the open-files limit");
    }
    // Started by elasticrun (ELASTICRUN_COORDINATOR), else through etcd.
    let pod_env = match get(env::COORDINATOR) {
        Some(_) => None,
        None => pod::read(&get)?,
    };
    let launch = env::read(get)?;
    // Read once; the program's own children have no use for it.
    crate::sys::remove_env(control::env::SECRET);
    let rt = runtime()?;
    if let Some(pe) = pod_env {
        let (launch, pod) = pod::enter_job(&rt, pe)?;
        let tls = launch.control_tls()?;
        let connect = pod.connect(tls.clone());
        return join_job(rt, &launch, connect, tls.as_ref(), Some(pod));
    }
    let Some(launch) = launch else {
        return Ok(Worker::alone(rt));
    };
    let tls = launch.control_tls()?;
    let connect = control_link::Tcp {
        addr: launch.coordinator,
        launcher: Some(std::os::unix::process::parent_id()),
        tls: tls.clone(),
    };
    join_job(rt, &launch, connect, tls.as_ref(), None)
}

/// Joins as `launch` says (inside `tls` when given), redialling the
/// coordinator through `connect`.
fn join_job<C: control_link::Connect<Stream = control::tls::ClientStream>>(
    rt: tokio::runtime::Runtime,
    launch: &env::Launch,
    connect: C,
    tls: Option<&control::tls::ControlConnector>,
    pod: Option<Arc<pod::Pod>>,
) -> Result<Worker, InitError> {
    if let Some(cpu) = launch.engine_cpu {
        affinity::pin_engine_thread(&rt, cpu)
            .map_err(|source| InitError::ThreadAffinity { cpu, source })?;
    }
    let joined = rt.block_on(join::join(launch, tls))?;
    let redial = control_link::Redial {
        connect,
        secret: launch.secret.clone(),
        host: launch.host.clone(),
        slot: launch.slot,
        pid: std::process::id(),
        give_up_after: launch.coordinator_timeout,
    };
    let control = control_link::spawn(rt.handle(), joined.link, redial);
    let link = Link {
        control,
        data_bind: joined.data_bind,
        start_timeout: launch.start_timeout,
        elastic_timeout: launch.elastic_timeout,
        data_timeout: launch.data_timeout,
        pod,
        secret: launch.secret.clone(),
    };
    Ok(Worker::launched(rt, joined.entered, link))
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

/// The runtime's log lines at `level` and above on stderr (which elasticrun
/// forwards) when the program set up no `tracing` subscriber of its own;
/// colours only on a terminal.
fn default_logging(level: control::env::LogLevel) {
    use std::io::IsTerminal as _;
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(level.filter()))
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .without_time()
        .try_init();
}

/// A world of one on a runtime of its own, whatever the environment says:
/// the unit tests' worker (a test run under `elasticrun` too).
#[cfg(test)]
pub(crate) fn alone() -> Worker {
    Worker::alone(runtime().unwrap_or_else(|e| panic!("a runtime: {e}")))
}

impl Worker {
    /// A world of one, on the in-memory transport.
    fn alone(rt: tokio::runtime::Runtime) -> Worker {
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
        let engine = generation::engine_on(rt.handle(), plane, CollectiveOptions::default(), cfg);
        Worker {
            engine,
            rt,
            place,
            knobs: None,
            paths: CollectivePaths::default(),
            names: api::Names::default(),
            link: None,
            memory,
            steps: AtomicU64::new(0),
        }
    }

    /// A worker placed in the generation it entered through `link`.
    fn launched(rt: tokio::runtime::Runtime, entered: Entered, link: Link) -> Worker {
        let memory = TuningMemory::default();
        let a = entered.assignment;
        let waits = (link.data_timeout, link.data_bind.spin);
        let (engine, p) = generation::start(rt.handle(), &a, entered.plane, waits, &memory);
        let own = a.peers.get(p.place.rank).cloned();
        let worker = Worker {
            engine,
            rt,
            place: p.place,
            knobs: Some(a.knobs),
            paths: p.paths,
            names: api::Names::default(),
            link: Some(link),
            memory,
            steps: AtomicU64::new(0),
        };
        worker.publish_generation(p.breaker, own);
        worker
    }

    /// Moves to the generation of assignment `a` on `plane`; returns the
    /// previous generation's engine, to be retired.
    pub(crate) fn install(&mut self, a: Assignment, plane: DataPlane) -> Engine {
        let waits = self
            .link
            .as_ref()
            .map_or((EngineConfig::default().device_timeout, None), |l| {
                (l.data_timeout, l.data_bind.spin)
            });
        let (engine, p) = generation::start(self.rt.handle(), &a, plane, waits, &self.memory);
        let own = a.peers.get(p.place.rank).cloned();
        let old = std::mem::replace(&mut self.engine, engine);
        self.place = p.place;
        self.paths = p.paths;
        // Unnamed tensors are numbered afresh in every generation, so that
        // survivors and newcomers generate the same names.
        self.names = api::Names::default();
        self.knobs = Some(a.knobs);
        self.publish_generation(p.breaker, own);
        old
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

    /// The CPUs the engine's thread may run on: the one `--thread-affinity`
    /// gave this worker's slot, or every CPU the process may use when it was
    /// not pinned.
    pub fn engine_thread_cpus(&self) -> Result<Vec<usize>, AffinityError> {
        affinity::engine_thread_cpus(&self.rt)
    }

    /// Optimizer steps this rank's training state holds: each
    /// [`crate::DistributedOptimizer::step`] that handed back gradients
    /// counts one; [`crate::elastic::State`] keeps the count with its
    /// commits, goes back to it when it restores and takes rank 0's when it
    /// syncs. elasticrun reports from it how many steps a recovery rolled
    /// back.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }

    pub(crate) fn set_steps(&self, steps: u64) {
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
    pub fn shutdown(self) -> Option<EngineStats> {
        let Worker {
            rt, engine, link, ..
        } = self;
        let stats = rt.block_on(engine.shutdown()).ok();
        tracing::debug!(?stats, "engine shut down");
        if let Some(link) = link {
            rt.block_on(finished(&link));
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReduceOp;

    #[test]
    fn alone_is_a_world_of_one() {
        let w = alone();
        assert_eq!(
            (w.rank(), w.size(), w.local_size(), w.cross_size()),
            (0, 1, 1, 1)
        );
        let mut v = [1.0f32, 2.0];
        w.allreduce(&mut v, ReduceOp::Sum).unwrap();
        assert_eq!(v, [1.0, 2.0]);
        assert_eq!(w.allgather(&[7u8, 8]).unwrap(), vec![7, 8]);
        assert_eq!(
            w.broadcast_object(&("model".to_owned(), 3u32), 0).unwrap(),
            ("model".to_owned(), 3)
        );
        assert_eq!(
            w.reducescatter(&[1i64, 2, 3], ReduceOp::Max).unwrap(),
            vec![1, 2, 3]
        );
        w.barrier().unwrap();
        w.shutdown();
    }
}
