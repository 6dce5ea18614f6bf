//! The unsafe things this crate does: a numpy array over the memory of a
//! pooled buffer ([`crate::pool`]), which goes back to the pool once no
//! array looks at it any more; and (feature `cuda`) a CUDA tensor's memory
//! lent to the engine, held by the tensor object it belongs to.

use numpy::PyArrayDyn;
use numpy::ndarray::{ArrayViewMutD, IxDyn};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::pool::{Data, Pooled};

/// Owns a result's buffer for the numpy arrays that look at it (it is their
/// base object); returns the buffer to the pool when the last one is gone.
#[pyclass(module = "elasticrun._elasticrun")]
#[derive(Debug)]
pub(crate) struct Lent {
    buf: Option<Data>,
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(h) = self.buf.take() {
            h.give_back();
        }
    }
}

/// A new numpy array of `shape` over `v`'s memory, without a copy.
pub(crate) fn lend<T: numpy::Element + Pooled>(
    py: Python<'_>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Py<PyAny>> {
    let owner = Bound::new(
        py,
        Lent {
            buf: Some(T::hold(v)),
        },
    )?;
    let base = owner.clone().into_any();
    let mut lent = owner.borrow_mut();
    let Some(elements) = lent.buf.as_mut().and_then(T::elements) else {
        return Err(PyValueError::new_err(
            "a lent buffer of another element type",
        ));
    };
    let view = ArrayViewMutD::from_shape(IxDyn(shape), elements).map_err(|e| {
        PyValueError::new_err(format!("a result does not fit its shape {shape:?}: {e}"))
    })?;
    // SAFETY: `base` (the `Lent` that owns the buffer) becomes the array's
    // base object, so it outlives the array and every view of it; nothing
    // touches the buffer again until `Lent` drops it, and a `Vec`'s heap
    // memory stays where it is while the `Vec` is held there.
    let array = unsafe { PyArrayDyn::<T>::borrow_from_array(&view, base) };
    Ok(array.into_any().unbind())
}

/// The memory of `arrays` (C-contiguous, writeable) lent to the engine as one
/// tensor, their elements one after another, reduced in place; references to
/// the arrays go with it and keep the memory alive until it comes back.
pub(crate) fn lend_arrays<T: numpy::Element + worker::Element>(
    arrays: &[Bound<'_, PyArrayDyn<T>>],
) -> PyResult<worker::LentHost> {
    use numpy::{PyArrayMethods, PyUntypedArrayMethods};
    let mut segments = Vec::with_capacity(arrays.len());
    let mut owner: Vec<Py<PyAny>> = Vec::with_capacity(arrays.len());
    for (i, a) in arrays.iter().enumerate() {
        if !a.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "array {i} of an in-place allreduce is not C-contiguous"
            )));
        }
        // Writeable, and not borrowed mutably elsewhere in Rust code.
        drop(a.try_readwrite().map_err(|e| {
            PyValueError::new_err(format!("array {i} of an in-place allreduce: {e}"))
        })?);
        segments.push((a.data(), a.len()));
        owner.push(a.clone().into_any().unbind());
    }
    // SAFETY: each segment is the whole memory of a C-contiguous, writeable
    // numpy array of `len` elements of `T` (checked above); `owner` holds a
    // reference to every array, so neither the arrays nor the memory they
    // look at (their base objects, a torch tensor's storage among them) are
    // freed until the engine hands `owner` back. That no Python code reads or
    // writes the arrays meanwhile is the contract of the in-place operation,
    // as of Horovod's: elasticrun.torch's optimizer, its one caller, submits
    // a gradient once backward has finished it and touches it again only
    // after the handle's `wait()`. Overlapping arrays are refused by `new`.
    let lent = unsafe { worker::LentHost::new(&segments, Box::new(owner)) };
    lent.map_err(|e| PyValueError::new_err(format!("an in-place allreduce's arrays: {e}")))
}

/// `tensor`'s device memory (`t`, read off it) lent to the engine, ordered
/// after the work queued on `stream`; the lent memory keeps `tensor`
/// alive until the engine lets it go.
#[cfg(feature = "cuda")]
pub(crate) fn lend_cuda(
    tensor: &Bound<'_, PyAny>,
    t: &crate::cuda::Lent,
    stream: u64,
) -> PyResult<gpu::DeviceTensor> {
    let owner: gpu::Owner = Box::new(tensor.clone().unbind());
    // SAFETY: `t` was read off `tensor` just now (a contiguous CUDA tensor:
    // `numel` elements of `dtype` at `ptr` on GPU `device`), and `owner`
    // holds the tensor, whose storage stays allocated while it lives;
    // `stream` is torch's current stream of that device, which torch never
    // destroys while the process runs.
    unsafe { gpu::lend(t.device, stream, t.ptr, t.numel, t.dtype, owner) }
        .map_err(|e| crate::ElasticrunError::new_err(e.to_string()))
}
