//! In-place allreduce of numpy arrays: their memory is lent to the engine
//! (no copy in, none out) and reduced where it lies, several arrays as one
//! tensor. For `elasticrun.torch`'s optimizer, whose gradients are not
//! touched while they are reduced; the arrays must be C-contiguous,
//! writeable and of one element type.

use half::f16;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::{ElasticrunError, engine_err, on_worker, reduce_op};

/// An in-place allreduce in flight: `poll()` says whether it is done;
/// `wait()` returns once the arrays hold the result.
#[pyclass(module = "elasticrun._elasticrun")]
#[derive(Debug)]
pub struct InPlaceHandle {
    inner: Option<worker::LentHandle>,
}

#[pymethods]
impl InPlaceHandle {
    fn poll(&mut self) -> bool {
        self.inner.as_mut().is_none_or(worker::LentHandle::poll)
    }

    /// Waits (the interpreter released) until the arrays hold the result.
    fn wait(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(h) = self.inner.take() else {
            return Err(ElasticrunError::new_err(
                "this handle was already waited for",
            ));
        };
        let lent = py.detach(move || h.wait()).map_err(engine_err)?;
        // The references to the arrays go, with the interpreter held.
        drop(lent.into_owner());
        Ok(())
    }
}

/// `arrays` as the lent memory of one tensor, if they are all of element
/// type `T`; `None` when the first is not.
fn lend<T: numpy::Element + worker::Element>(
    arrays: &[Bound<'_, PyAny>],
) -> Option<PyResult<worker::LentHost>> {
    let typed = crate::arrays::typed::<T>(arrays, "an in-place allreduce")?;
    Some(typed.and_then(|t| crate::sys::lend_arrays(&t)))
}

/// Starts reducing `arrays` (C-contiguous, writeable, one element type) in
/// place over all ranks as one tensor of their elements one after another.
#[pyfunction]
#[pyo3(signature = (arrays, name=None, op=0))]
fn allreduce_inplace_async(
    arrays: Vec<Bound<'_, PyAny>>,
    name: Option<String>,
    op: i32,
) -> PyResult<InPlaceHandle> {
    let op = reduce_op(op)?;
    if arrays.is_empty() {
        return Err(PyValueError::new_err(
            "an in-place allreduce needs at least one array",
        ));
    }
    let lent = lend::<f32>(&arrays)
        .or_else(|| lend::<f64>(&arrays))
        .or_else(|| lend::<f16>(&arrays))
        .or_else(|| lend::<i32>(&arrays))
        .or_else(|| lend::<i64>(&arrays))
        .or_else(|| lend::<u8>(&arrays))
        .unwrap_or_else(|| {
            Err(PyTypeError::new_err(
                "an in-place allreduce takes numpy arrays of float32, float64, float16, int32, int64 or uint8",
            ))
        })?;
    let n = name.as_deref();
    // Negotiated as `grouped_allreduce_async` submits: one tensor, no
    // member lengths, so that ranks taking either path agree.
    let h = on_worker(|w| w.allreduce_lent_async(n, lent, Vec::new(), op))?;
    Ok(InPlaceHandle { inner: Some(h) })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(allreduce_inplace_async, m)?)?;
    m.add_class::<InPlaceHandle>()?;
    Ok(())
}
