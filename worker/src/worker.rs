//! [`Worker`]: a training process's place in the job and its engine, for
//! programs that block: a runtime of its own and a [`Session`] on it, whose
//! methods it offers (through `Deref`) beside the blocking collectives.

use std::ops::Deref;

use crate::affinity::AffinityError;
use crate::control_link::{self, Connect, Redial};
use crate::engine::EngineStats;
use crate::error::InitError;
use crate::generation::DataBind;
use crate::join::Joining;
use crate::session::Session;
use crate::{affinity, env, pod};

/// A joined worker. Dropping it without [`Worker::shutdown`] looks like a crash
/// to its peers.
#[derive(Debug)]
pub struct Worker {
    /// Dropped first: its tasks stop before the runtime goes.
    pub(crate) session: Session,
    pub(crate) rt: tokio::runtime::Runtime,
}

impl Deref for Worker {
    type Target = Session;

    fn deref(&self) -> &Session {
        &self.session
    }
}

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
        let connect = pod.connect(launch.control_tls()?);
        return join_job(rt, &launch, connect, Some(pod));
    }
    let Some(launch) = launch else {
        let session = Session::alone(rt.handle().clone());
        return Ok(Worker { session, rt });
    };
    let connect = control_link::Tcp {
        addr: launch.coordinator,
        launcher: Some(std::os::unix::process::parent_id()),
        tls: launch.control_tls()?,
    };
    join_job(rt, &launch, connect, None)
}

/// How a launched worker joins, as `launch` says, reaching the coordinator
/// through `connect`.
pub(crate) fn joining<C: Connect>(launch: &env::Launch, connect: C) -> Joining<C> {
    let data_bind = DataBind {
        all_interfaces: launch.data_all_interfaces,
        transport: launch.transport,
        shared_memory: launch.shared_memory,
        spin: launch.spin,
        connections: launch.connections,
        data_timeout: launch.data_timeout,
        carry: collectives::LinkCarry::new(),
    };
    Joining {
        redial: Redial {
            connect,
            secret: launch.secret.clone(),
            host: launch.host.clone(),
            slot: launch.slot,
            pid: std::process::id(),
            give_up_after: launch.coordinator_timeout,
        },
        endpoints: Box::new(data_bind),
        start_timeout: launch.start_timeout,
        elastic_timeout: launch.elastic_timeout,
        hot_spares: launch.hot_spares,
        data_timeout: launch.data_timeout,
        spin: launch.spin,
    }
}

/// Joins as `launch` says on `rt`, through `connect`; the process exits
/// when its control task ends.
fn join_job<C: Connect>(
    rt: tokio::runtime::Runtime,
    launch: &env::Launch,
    connect: C,
    pod: Option<std::sync::Arc<pod::Pod>>,
) -> Result<Worker, InitError> {
    if let Some(cpu) = launch.engine_cpu {
        affinity::pin_engine_thread(&rt, cpu)
            .map_err(|source| InitError::ThreadAffinity { cpu, source })?;
    }
    let joining = joining(launch, connect);
    let observe = std::sync::Arc::new(());
    let join = Session::join(rt.handle().clone(), joining, observe, control_link::exit);
    let mut session = rt.block_on(join)?;
    if let Some(link) = session.link.as_mut() {
        link.pod = pod;
    }
    Ok(Worker { session, rt })
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
    let rt = runtime().unwrap_or_else(|e| panic!("a runtime: {e}"));
    Worker {
        session: Session::alone(rt.handle().clone()),
        rt,
    }
}

impl Worker {
    /// Runs `f` to completion on this worker's runtime: the blocking form of
    /// the session's async methods.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The CPUs the engine's thread may run on: the one `--thread-affinity`
    /// gave this worker's slot, or every CPU the process may use when it was
    /// not pinned.
    pub fn engine_thread_cpus(&self) -> Result<Vec<usize>, AffinityError> {
        affinity::engine_thread_cpus(&self.rt)
    }

    /// Leaves the job cleanly once every rank has asked to (peers still
    /// finishing are not disturbed); returns the engine's counters.
    pub fn shutdown(self) -> Option<EngineStats> {
        let Worker { session, rt } = self;
        rt.block_on(session.shutdown())
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
