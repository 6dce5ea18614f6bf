//! The runtime a training program links.
//!
//! [`init`] joins the job `elasticrun` started (or, run on its own, makes a world
//! of one); the returned [`Worker`] tells the program its place
//! ([`Worker::rank`], [`Worker::size`], local and cross ranks) and runs blocking
//! collectives on it. The asynchronous engine (negotiation, fusion, cycle time)
//! builds on this next.

mod api;
mod control_link;
pub mod elastic;
pub mod engine;
mod env;
mod hierarchy;
mod join;
mod optimizer;
mod rejoin;

use std::sync::Arc;
use std::time::Duration;

use collectives::{
    CollectiveOptions, Communicator, Generation, Hierarchy, TcpConfig, TcpEndpoint, TcpTransport,
    Transport, TransportError,
};
use control::{Assignment, HandshakeError, Knobs};

pub use api::GroupHandle;
pub use collectives::{DType, Element, ReduceOp, bf16, f16};
pub use engine::{
    Engine, EngineConfig, EngineError, EngineStats, Handle, Tensor, TimelineConfig, Tuning,
    TuningMemory,
};
pub use hierarchy::{CollectivePath, CollectivePaths};
pub use optimizer::{Compression, DistributedOptimizer, Gradients, OptimizerOptions};
pub use rejoin::RejoinError;

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{var} {why}")]
    Environment { var: &'static str, why: String },
    #[error("cannot reach the coordinator at {0}")]
    Unreachable(std::net::SocketAddr),
    #[error("authentication with the coordinator failed: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    #[error("no assignment from the coordinator within {0:?}")]
    NoAssignment(Duration),
    #[error("data plane: {0}")]
    DataPlane(#[from] TransportError),
    #[error("{0}")]
    Io(String),
}

/// A collective failed; the message names the peer or the disagreement.
pub type Error = EngineError;

/// This process's place in the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub rank: usize,
    pub size: usize,
    pub local_rank: usize,
    pub local_size: usize,
    pub cross_rank: usize,
    pub cross_size: usize,
    pub generation: u64,
}

/// A joined worker. Dropping it without [`Worker::shutdown`] looks like a crash
/// to its peers.
#[derive(Debug)]
pub struct Worker {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    place: Place,
    knobs: Option<Knobs>,
    paths: CollectivePaths,
    names: api::Names,
    /// The coordinator connection (`None` when running alone).
    link: Option<Link>,
    /// Autotune samples per world size, across generations.
    memory: TuningMemory,
}

/// A launched worker's tie to its coordinator.
#[derive(Debug)]
struct Link {
    control: control_link::Control,
    local_ip: std::net::IpAddr,
    start_timeout: Duration,
    /// `Some` in an elastic job.
    elastic_timeout: Option<Duration>,
}

/// Joins the job described by the environment `elasticrun` set, or makes a world
/// of one when there is none.
pub fn init() -> Result<Worker, InitError> {
    let launch = env::read(|k| std::env::var(k).ok())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("elasticrun-worker")
        .enable_all()
        .build()
        .map_err(|e| InitError::Io(e.to_string()))?;
    let Some(launch) = launch else {
        let comm = rt.block_on(alone())?;
        let place = Place {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            cross_rank: 0,
            cross_size: 1,
            generation: 0,
        };
        return Ok(Worker::start(rt, comm, place, None, None));
    };
    let joined = rt.block_on(join::join(&launch))?;
    let control = control_link::spawn(rt.handle(), joined.link);
    let link = Link {
        control,
        local_ip: joined.local_ip,
        start_timeout: launch.start_timeout,
        elastic_timeout: launch.elastic_timeout,
    };
    Ok(Worker::launched(
        rt,
        joined.assignment,
        joined.transport,
        link,
    ))
}

/// What a worker runs with in one generation.
struct Parts {
    place: Place,
    comm: Communicator<TcpTransport>,
    paths: CollectivePaths,
    breaker: collectives::Breaker,
    /// The host grid, when the layout has one.
    grid: Option<Arc<Hierarchy>>,
}

/// What a worker runs with in the generation of assignment `a`.
fn generation_parts(a: Assignment, transport: TcpTransport) -> Parts {
    let place = Place {
        rank: a.rank as usize,
        size: a.size as usize,
        local_rank: a.local_rank as usize,
        local_size: a.local_size as usize,
        cross_rank: a.cross_rank as usize,
        cross_size: a.cross_size as usize,
        generation: a.generation,
    };
    let (options, paths, grid) = hierarchy::options(&a.knobs, &a.hosts);
    hierarchy::log_fallbacks(&paths, place.rank);
    Parts {
        place,
        breaker: transport.breaker(),
        comm: Communicator::new(transport, options),
        paths,
        grid,
    }
}

async fn alone() -> Result<Communicator<TcpTransport>, InitError> {
    let ep = TcpEndpoint::bind(([127, 0, 0, 1], 0).into(), TcpConfig::default()).await?;
    let addr = ep.local_addr()?;
    let t = ep.connect(0, Generation(0), &[addr]).await?;
    Ok(Communicator::new(t, CollectiveOptions::default()))
}

/// The engine settings the coordinator handed out (defaults alone), on a
/// layout with host grid `grid`; `memory` keeps the autotune samples across
/// generations.
fn engine_config(
    knobs: Option<&Knobs>,
    grid: Option<Arc<Hierarchy>>,
    memory: &TuningMemory,
) -> EngineConfig {
    let Some(k) = knobs else {
        return EngineConfig::default();
    };
    EngineConfig {
        cycle_time: Duration::from_micros(k.cycle_time_us),
        cache_capacity: k.cache_capacity as usize,
        fusion_threshold_bytes: usize::try_from(k.fusion_threshold_bytes).unwrap_or(usize::MAX),
        timeline: k.timeline.as_ref().map(|path| TimelineConfig {
            path: path.into(),
            mark_cycles: k.timeline_mark_cycles,
        }),
        autotune: k.autotune.as_ref().map(|a| autotune_setup(a, memory)),
        hierarchy: grid,
    }
}

/// The engine's autotuner settings from the coordinator's.
fn autotune_setup(a: &control::Autotune, memory: &TuningMemory) -> engine::AutotuneSetup {
    let fixed = a.fixed.iter().map(|&k| engine::tuned_knob(k)).collect();
    engine::AutotuneSetup {
        config: autotune::TunerConfig {
            warmup_samples: a.warmup_samples as usize,
            steps_per_sample: u64::from(a.steps_per_sample),
            max_samples: a.max_samples as usize,
            gp_noise: a.gaussian_process_noise,
            seed: 0,
        },
        fixed,
        log_file: a.log_file.as_ref().map(Into::into),
        memory: memory.clone(),
    }
}

impl Worker {
    fn start(
        rt: tokio::runtime::Runtime,
        comm: Communicator<TcpTransport>,
        place: Place,
        knobs: Option<Knobs>,
        grid: Option<Arc<Hierarchy>>,
    ) -> Worker {
        let memory = TuningMemory::default();
        let cfg = engine_config(knobs.as_ref(), grid, &memory);
        Worker {
            engine: Worker::engine_for(rt.handle(), comm, cfg),
            rt,
            place,
            knobs,
            paths: CollectivePaths::default(),
            names: api::Names::default(),
            link: None,
            memory,
        }
    }

    fn engine_for(
        rt: &tokio::runtime::Handle,
        comm: Communicator<TcpTransport>,
        cfg: EngineConfig,
    ) -> Engine {
        Engine::start(rt, comm, cfg, |comm| async move {
            comm.into_transport().shutdown().await;
        })
    }

    /// A worker placed by its coordinator's assignment `a`.
    fn launched(
        rt: tokio::runtime::Runtime,
        a: Assignment,
        transport: TcpTransport,
        link: Link,
    ) -> Worker {
        let p = generation_parts(a.clone(), transport);
        let mut worker = Worker::start(rt, p.comm, p.place, Some(a.knobs.clone()), p.grid);
        worker.paths = p.paths;
        worker.link = Some(link);
        worker.publish_generation(p.breaker);
        worker
    }

    /// Tells the control task about the current generation: heartbeats carry
    /// it, a `Reset` ends its data plane, the stall check sees its engine.
    fn publish_generation(&self, breaker: collectives::Breaker) {
        let Some(link) = &self.link else { return };
        let stall_check = self
            .knobs
            .as_ref()
            .is_some_and(|k| k.stall_warning_ms.is_some());
        let pending = stall_check.then(|| self.engine.pending());
        link.control
            .shared
            .set_generation(self.place.generation, breaker, pending);
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
        let Worker { rt, engine, .. } = self;
        rt.block_on(engine.shutdown()).ok()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Collective(#[from] EngineError),
    #[error("cannot encode the object: {0}")]
    Encode(String),
    #[error("cannot decode the object: {0}")]
    Decode(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_is_a_world_of_one() {
        // The test process was not started by elasticrun.
        if std::env::var(env::COORDINATOR).is_ok() {
            return;
        }
        let w = init().unwrap();
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
