//! `elasticrun._elasticrun`: the worker runtime for Python. One [`Worker`]
//! per process, joined with `init()` (the job's environment, as any
//! elasticrun worker), and collectives on numpy arrays through its engine:
//! negotiation, response cache, fusion, timeline, stall check and autotune
//! as for Rust programs. Every wait happens with the interpreter released,
//! so other Python threads run meanwhile; errors are `ElasticrunError`s
//! whose text names the tensor and the ranks.

mod arrays;
#[cfg(feature = "cuda")]
mod cuda;
mod handle;
mod inplace;
mod pool;
#[allow(unsafe_code)]
mod sys;

use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use worker::{ReduceOp, Worker};

use handle::{GroupHandle, Handle};

create_exception!(
    _elasticrun,
    ElasticrunError,
    PyRuntimeError,
    "A collective failed, or the job could not be joined."
);
create_exception!(
    _elasticrun,
    WorkersFailed,
    ElasticrunError,
    "A collective failed because workers failed (Horovod's HorovodInternalError): \
     an elastic run restores its last commit and goes on in the next generation."
);
create_exception!(
    _elasticrun,
    LeftJob,
    ElasticrunError,
    "This worker has no place in the job any more (its host was removed): exit cleanly."
);

/// This process's worker, once `init()` has joined the job.
static WORKER: RwLock<Option<Worker>> = RwLock::new(None);

pub(crate) fn worker() -> PyResult<RwLockReadGuard<'static, Option<Worker>>> {
    let g = WORKER.read().unwrap_or_else(PoisonError::into_inner);
    if g.is_none() {
        return Err(ElasticrunError::new_err(
            "elasticrun is not initialized: call init() first",
        ));
    }
    Ok(g)
}

/// Runs `f` on the worker, keeping the interpreter (for what only queues
/// work for the engine, such as a submission).
pub(crate) fn on_worker<R>(f: impl FnOnce(&Worker) -> R) -> PyResult<R> {
    let g = worker()?;
    let w = g
        .as_ref()
        .ok_or_else(|| ElasticrunError::new_err("not initialized"))?;
    Ok(f(w))
}

/// Runs `f` on the worker, with the interpreter released.
pub(crate) fn with_worker<R: Send>(
    py: Python<'_>,
    f: impl FnOnce(&Worker) -> R + Send,
) -> PyResult<R> {
    on_worker(|w| py.detach(|| f(w)))
}

/// An engine error as Python's: `WorkersFailed` when the data plane broke
/// (an elastic run recovers from it), `ElasticrunError` otherwise.
pub(crate) fn engine_err(e: worker::Error) -> PyErr {
    match worker::elastic::Interrupt::from(e) {
        worker::elastic::Interrupt::WorkersFailed(f) => WorkersFailed::new_err(f.why),
        other => ElasticrunError::new_err(other.to_string()),
    }
}

/// Horovod's reduction codes: Average 0, Sum 1, Adasum 2, Min 3, Max 4,
/// Product 5.
pub(crate) fn reduce_op(code: i32) -> PyResult<ReduceOp> {
    match code {
        0 => Ok(ReduceOp::Average),
        1 => Ok(ReduceOp::Sum),
        2 => Err(PyValueError::new_err(
            "Adasum is not supported by elasticrun; use Average (or Sum) instead",
        )),
        3 => Ok(ReduceOp::Min),
        4 => Ok(ReduceOp::Max),
        5 => Ok(ReduceOp::Product),
        c => Err(PyValueError::new_err(format!(
            "unknown reduction op {c}: expected Average, Sum, Min, Max or Product"
        ))),
    }
}

/// Joins the job this process was started in (by `elasticrun`). Calling it
/// again does nothing.
#[pyfunction]
fn init(py: Python<'_>) -> PyResult<()> {
    let mut g = WORKER.write().unwrap_or_else(PoisonError::into_inner);
    if g.is_none() {
        let w = py
            .detach(worker::init)
            .map_err(|e| ElasticrunError::new_err(e.to_string()))?;
        *g = Some(w);
    }
    Ok(())
}

/// Leaves the job cleanly; `init()` may be called again afterwards only in
/// a new process.
#[pyfunction]
fn shutdown(py: Python<'_>) {
    let taken = WORKER
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(w) = taken {
        py.detach(move || {
            let _ = w.shutdown();
        });
    }
}

#[pyfunction]
fn is_initialized() -> bool {
    WORKER
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .is_some()
}

macro_rules! place_getter {
    ($($name:ident),*) => {$(
        #[pyfunction]
        fn $name() -> PyResult<usize> {
            let g = worker()?;
            Ok(g.as_ref().map_or(0, |w| w.$name()))
        }
    )*};
}
place_getter!(rank, size, local_rank, local_size, cross_rank, cross_size);

/// Waits until every rank has called it.
#[pyfunction]
fn barrier(py: Python<'_>) -> PyResult<()> {
    with_worker(py, |w| w.barrier())?.map_err(engine_err)
}

/// Says this rank has no more data; takes part in the others' allreduces and
/// allgathers (as zeros, as no rows) until every rank has joined. Returns
/// the rank that joined last.
#[pyfunction]
fn join(py: Python<'_>) -> PyResult<usize> {
    with_worker(py, |w| w.join())?.map_err(engine_err)
}

/// Whether this job is elastic (workers may fail and hosts come and go).
#[pyfunction]
fn is_elastic() -> PyResult<bool> {
    Ok(worker()?.as_ref().is_some_and(|w| w.is_elastic()))
}

/// Whether the coordinator announced a host update to this rank (ranks
/// agree on it at their next commit).
#[pyfunction]
fn hosts_updated() -> PyResult<bool> {
    Ok(worker()?.as_ref().is_some_and(|w| w.hosts_updated()))
}

/// Leaves this generation and joins the next (rank and size may change).
/// Raises `LeftJob` when this worker has no place in it.
#[pyfunction]
fn rejoin(py: Python<'_>) -> PyResult<()> {
    let mut g = WORKER.write().unwrap_or_else(PoisonError::into_inner);
    let Some(w) = g.as_mut() else {
        return Err(ElasticrunError::new_err(
            "elasticrun is not initialized: call init() first",
        ));
    };
    py.detach(|| worker::elastic::rejoin(w))
        .map_err(|e| match e {
            worker::elastic::ElasticError::Left(why) => LeftJob::new_err(why),
            e => ElasticrunError::new_err(e.to_string()),
        })
}

/// Tells the coordinator that this worker runs in its generation from its
/// current step, having reached step `reached` in the one it left (none
/// for a newcomer): elasticrun's recovery line counts the steps rolled
/// back from it.
#[pyfunction]
#[pyo3(signature = (reached=None))]
fn report_running(reached: Option<u64>) -> PyResult<()> {
    if let Some(w) = worker()?.as_ref() {
        w.report_running(reached);
    }
    Ok(())
}

/// The optimizer steps this rank's training state holds (0 before init).
#[pyfunction]
fn steps() -> PyResult<u64> {
    Ok(worker()?.as_ref().map_or(0, |w| w.steps()))
}

/// Sets the optimizer steps this rank's training state holds (a restore,
/// a sync, a step taken).
#[pyfunction]
fn set_steps(steps: u64) -> PyResult<()> {
    if let Some(w) = worker()?.as_ref() {
        w.set_steps(steps);
    }
    Ok(())
}

/// What the buffer pool has done: (buffers reused, buffers allocated,
/// bytes held free).
#[pyfunction]
fn pool_stats() -> (u64, u64, usize) {
    pool::stats()
}

#[pymodule]
fn _elasticrun(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ElasticrunError", m.py().get_type::<ElasticrunError>())?;
    m.add("WorkersFailed", m.py().get_type::<WorkersFailed>())?;
    m.add("LeftJob", m.py().get_type::<LeftJob>())?;
    m.add_function(wrap_pyfunction!(is_elastic, m)?)?;
    m.add_function(wrap_pyfunction!(hosts_updated, m)?)?;
    m.add_function(wrap_pyfunction!(rejoin, m)?)?;
    m.add_function(wrap_pyfunction!(report_running, m)?)?;
    m.add_function(wrap_pyfunction!(steps, m)?)?;
    m.add_function(wrap_pyfunction!(set_steps, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(is_initialized, m)?)?;
    m.add_function(wrap_pyfunction!(rank, m)?)?;
    m.add_function(wrap_pyfunction!(size, m)?)?;
    m.add_function(wrap_pyfunction!(local_rank, m)?)?;
    m.add_function(wrap_pyfunction!(local_size, m)?)?;
    m.add_function(wrap_pyfunction!(cross_rank, m)?)?;
    m.add_function(wrap_pyfunction!(cross_size, m)?)?;
    m.add_function(wrap_pyfunction!(barrier, m)?)?;
    m.add_function(wrap_pyfunction!(join, m)?)?;
    m.add_function(wrap_pyfunction!(pool_stats, m)?)?;
    m.add_class::<Handle>()?;
    m.add_class::<GroupHandle>()?;
    handle::register(m)?;
    inplace::register(m)?;
    #[cfg(feature = "cuda")]
    cuda::register(m)?;
    #[cfg(not(feature = "cuda"))]
    m.add("CUDA_BUILT", false)?;
    Ok(())
}
