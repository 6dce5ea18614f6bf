//! CUDA tensors (feature `cuda`, docs/python.md "GPUs"): a torch tensor's
//! device memory is lent to the engine as it lies and goes to NCCL without
//! a host copy. The submission records an event on the caller's current
//! stream that the NCCL work waits for; a handle's `wait()` returns once
//! that work has run on the GPU, so the caller's stream may use the result
//! at once. The lent memory holds the tensor until the engine lets it go,
//! so the caching allocator cannot hand the memory to anyone else meanwhile.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use worker::{DType, DeviceOp};

use crate::{ElasticrunError, engine_err, on_worker, reduce_op};

/// A collective on a CUDA tensor in flight.
#[pyclass(module = "elasticrun._elasticrun")]
#[derive(Debug)]
pub struct CudaHandle {
    inner: Option<worker::DeviceHandle>,
    /// The result once waited for: the tensor's own memory (in place), or
    /// the engine's buffer until `copy_to` takes it.
    result: Option<gpu::DeviceTensor>,
}

#[pymethods]
impl CudaHandle {
    /// Whether the collective has completed.
    fn poll(&mut self) -> bool {
        self.inner.as_mut().is_none_or(worker::DeviceHandle::poll)
    }

    /// Waits (the interpreter released) until the collective has run on the
    /// GPU; returns the result's shape and whether it lies in the tensor
    /// given (allreduce, broadcast) or must be taken with `copy_to`.
    fn wait(&mut self, py: Python<'_>) -> PyResult<(Vec<usize>, bool)> {
        let Some(h) = self.inner.take() else {
            return Err(ElasticrunError::new_err(
                "this handle was already waited for",
            ));
        };
        let waited = py.detach(move || h.wait());
        let (result, shape) = waited.map_err(engine_err)?;
        let in_place = result.is_lent();
        // A lent result goes back now: the tensor's stream waits for the
        // collective's last use of it (already run).
        if !in_place {
            self.result = Some(result);
        }
        Ok((shape, in_place))
    }

    /// Copies a result that is not in place into `out` (a contiguous CUDA
    /// tensor of its type and length) on `stream`, then lets it go.
    fn copy_to(&mut self, out: &Bound<'_, PyAny>, stream: u64) -> PyResult<()> {
        let Some(result) = self.result.take() else {
            return Err(ElasticrunError::new_err(
                "nothing to copy: wait() first, and only for a result not in place",
            ));
        };
        let t = Lent::read(out)?;
        let mut dst = crate::sys::lend_cuda(out, &t, stream)?;
        let copied = result.copy_into(&mut dst);
        copied.map_err(|e| ElasticrunError::new_err(e.to_string()))
    }
}

/// What is read off a torch tensor to lend its memory.
#[derive(Debug)]
pub(crate) struct Lent {
    pub(crate) ptr: u64,
    pub(crate) numel: usize,
    pub(crate) dtype: DType,
    pub(crate) device: usize,
    pub(crate) shape: Vec<usize>,
}

impl Lent {
    pub(crate) fn read(t: &Bound<'_, PyAny>) -> PyResult<Lent> {
        if !t.getattr("is_cuda")?.extract::<bool>()? {
            return Err(PyTypeError::new_err("expected a CUDA tensor"));
        }
        if !t.call_method0("is_contiguous")?.extract::<bool>()? {
            return Err(PyValueError::new_err(
                "a CUDA tensor lent to elasticrun must be contiguous (call .contiguous())",
            ));
        }
        let name: String = t.getattr("dtype")?.str()?.extract()?;
        Ok(Lent {
            ptr: t.call_method0("data_ptr")?.extract()?,
            numel: t.call_method0("numel")?.extract()?,
            dtype: dtype(&name)?,
            device: t.call_method0("get_device")?.extract()?,
            shape: t.getattr("shape")?.extract()?,
        })
    }
}

fn dtype(torch_name: &str) -> PyResult<DType> {
    match torch_name.trim_start_matches("torch.") {
        "float32" => Ok(DType::F32),
        "float64" => Ok(DType::F64),
        "float16" => Ok(DType::F16),
        "bfloat16" => Ok(DType::BF16),
        "int32" => Ok(DType::I32),
        "int64" => Ok(DType::I64),
        "uint8" => Ok(DType::U8),
        other => Err(PyTypeError::new_err(format!(
            "CUDA tensors of {other} are not supported: use float32, float64, float16, \
             bfloat16, int32, int64 or uint8"
        ))),
    }
}

fn device_op(kind: &str, op: i32, root: usize) -> PyResult<DeviceOp> {
    Ok(match kind {
        "allreduce" => DeviceOp::Allreduce(reduce_op(op)?),
        "allgather" => DeviceOp::Allgather,
        "broadcast" => DeviceOp::Broadcast { root },
        "reducescatter" => DeviceOp::Reducescatter(reduce_op(op)?),
        other => {
            return Err(PyValueError::new_err(format!(
                "no CUDA collective {other:?}: expected allreduce, allgather, broadcast or \
                 reducescatter"
            )));
        }
    })
}

/// Starts `kind` ("allreduce", "allgather", "broadcast", "reducescatter")
/// on CUDA tensor `tensor` (contiguous), ordered after the work queued on
/// `stream` (torch's current stream of its device, as an integer).
#[pyfunction]
#[pyo3(signature = (kind, tensor, stream, name=None, op=0, root=0))]
fn cuda_submit(
    kind: &str,
    tensor: &Bound<'_, PyAny>,
    stream: u64,
    name: Option<String>,
    op: i32,
    root: usize,
) -> PyResult<CudaHandle> {
    let op = device_op(kind, op, root)?;
    let t = Lent::read(tensor)?;
    let shape = t.shape.clone();
    let data = crate::sys::lend_cuda(tensor, &t, stream)?;
    let submitted = on_worker(|w| w.submit_device(name.as_deref(), op, data, shape))?;
    let inner = submitted.map_err(engine_err)?;
    Ok(CudaHandle {
        inner: Some(inner),
        result: None,
    })
}

/// The NCCL library the engine uses (opened now if it was not yet), or
/// `None` with no NCCL.
#[pyfunction]
fn nccl_library() -> Option<String> {
    gpu::nccl_library().map(str::to_owned)
}

/// The NCCL version the engine uses (2.30.7 is 23007), or `None` with no
/// GPU or NCCL.
#[pyfunction]
fn nccl_version() -> Option<i32> {
    gpu::probe().ok().map(|i| i.nccl_version)
}

/// Why GPU collectives cannot run here, or `None` when they can.
#[pyfunction]
fn gpu_unavailable() -> Option<String> {
    gpu::probe().err().map(|e| e.to_string())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CudaHandle>()?;
    m.add_function(wrap_pyfunction!(cuda_submit, m)?)?;
    m.add_function(wrap_pyfunction!(nccl_library, m)?)?;
    m.add_function(wrap_pyfunction!(nccl_version, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_unavailable, m)?)?;
    m.add("CUDA_BUILT", true)?;
    Ok(())
}
