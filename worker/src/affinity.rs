//! `--thread-affinity`: the engine runs on the worker runtime's one worker
//! thread, and this pins that thread to a CPU, as Horovod pins its background
//! thread. The system calls are nix's safe wrappers of `sched_setaffinity` and
//! `sched_getaffinity` (pid 0: the calling thread), run on the worker thread
//! itself by a task spawned there: only worker threads run spawned tasks, and
//! the runtime has exactly one.

use nix::errno::Errno;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
use tokio::runtime::Runtime;

/// Why the engine's thread could not be pinned, or its CPUs not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AffinityError {
    /// The system refused (e.g. `EINVAL`: the CPU does not exist or is not
    /// one this process may use).
    #[error("the system refused: {0}")]
    Refused(Errno),
    /// The task that does it on the engine's thread did not finish.
    #[error("the runtime did not run the task")]
    NotRun,
}

/// Pins the thread the calling code runs on to `cpu`.
fn pin_this_thread(cpu: usize) -> Result<(), AffinityError> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(AffinityError::Refused)?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(AffinityError::Refused)
}

/// The CPUs the calling thread may run on, in increasing order.
pub(crate) fn this_thread_cpus() -> Result<Vec<usize>, AffinityError> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(AffinityError::Refused)?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// Runs `f` on `rt`'s worker thread (where the engine runs) and hands back its
/// result. Must not be called from inside a runtime.
fn on_engine_thread<T: Send + 'static>(
    rt: &Runtime,
    f: impl FnOnce() -> Result<T, AffinityError> + Send + 'static,
) -> Result<T, AffinityError> {
    let task = rt.spawn(async move { f() });
    rt.block_on(task).unwrap_or(Err(AffinityError::NotRun))
}

/// Pins `rt`'s worker thread, where the engine runs, to `cpu`.
pub(crate) fn pin_engine_thread(rt: &Runtime, cpu: usize) -> Result<(), AffinityError> {
    on_engine_thread(rt, move || pin_this_thread(cpu))
}

/// The CPUs `rt`'s worker thread may run on.
pub(crate) fn engine_thread_cpus(rt: &Runtime) -> Result<Vec<usize>, AffinityError> {
    on_engine_thread(rt, this_thread_cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> Runtime {
        crate::worker::runtime().unwrap()
    }

    #[test]
    fn pins_the_engine_thread_and_only_it() {
        let allowed = this_thread_cpus().unwrap();
        let cpu = *allowed.last().unwrap();
        let rt = runtime();
        pin_engine_thread(&rt, cpu).unwrap();
        assert_eq!(engine_thread_cpus(&rt).unwrap(), vec![cpu]);
        // The engine runs on that thread.
        let name = rt
            .block_on(rt.spawn(async { std::thread::current().name().map(str::to_owned) }))
            .unwrap();
        assert_eq!(name.as_deref(), Some("elasticrun-worker"));
        // The caller's thread is left alone.
        assert_eq!(this_thread_cpus().unwrap(), allowed);
    }

    #[test]
    fn a_cpu_that_is_not_there_is_refused() {
        let rt = runtime();
        let before = engine_thread_cpus(&rt).unwrap();
        let e = pin_engine_thread(&rt, control::env::MAX_CPUS - 1).unwrap_err();
        assert_eq!(e, AffinityError::Refused(Errno::EINVAL));
        let e = pin_engine_thread(&rt, control::env::MAX_CPUS + 5).unwrap_err();
        assert!(matches!(e, AffinityError::Refused(_)), "{e:?}");
        assert_eq!(engine_thread_cpus(&rt).unwrap(), before);
    }
}
