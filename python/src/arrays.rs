//! numpy arrays in and out: the element types elasticrun reduces (f32, f64,
//! f16, i32, i64, u8), copied into the engine's buffers in C order and back
//! into new arrays of the same shape.

use half::f16;
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::pool::{self, Data, Pooled};

/// Appends `a`'s elements to `out` in C order; returns `a`'s shape.
fn append<T: numpy::Element + Copy>(a: &Bound<'_, PyArrayDyn<T>>, out: &mut Vec<T>) -> Vec<usize> {
    let ro = a.readonly();
    // One copy of memory in C order where the array is laid out so; element
    // by element in C order otherwise (`as_slice` also takes a Fortran-order
    // array, whose memory is the transpose).
    match ro.as_slice() {
        Ok(s) if ro.is_c_contiguous() => out.extend_from_slice(s),
        _ => out.extend(ro.as_array().iter().copied()),
    }
    ro.shape().to_vec()
}

/// Several arrays' elements one after another, and each one's shape.
type Gathered<T> = (Vec<T>, Vec<Vec<usize>>);

/// `arrays` as arrays of element type `T`: `None` when the first is not `T`,
/// an error naming both dtypes when a later one is not (`what`: the
/// operation, for the message).
pub(crate) fn typed<'py, T: numpy::Element>(
    arrays: &[Bound<'py, PyAny>],
    what: &str,
) -> Option<PyResult<Vec<Bound<'py, PyArrayDyn<T>>>>> {
    let first = arrays.first()?.cast::<PyArrayDyn<T>>().ok()?;
    let mut out = Vec::with_capacity(arrays.len());
    for a in arrays {
        match a.cast::<PyArrayDyn<T>>() {
            Ok(arr) => out.push(arr.clone()),
            Err(_) => {
                return Some(Err(PyTypeError::new_err(format!(
                    "{what}'s arrays must share one dtype: {} and {}",
                    dtype_of(first.as_any()),
                    dtype_of(a)
                ))));
            }
        }
    }
    Some(Ok(out))
}

/// The elements of `arrays`, all of element type `T`, one after another in
/// one allocation, and each one's shape; `None` when the first is not `T`.
fn gather<T: numpy::Element + Copy + Pooled>(
    arrays: &[Bound<'_, PyAny>],
    total: usize,
) -> Option<PyResult<Gathered<T>>> {
    let typed = match typed::<T>(arrays, "a grouped allreduce")? {
        Ok(t) => t,
        Err(e) => return Some(Err(e)),
    };
    let mut all = pool::take(total);
    let shapes = typed.iter().map(|a| append(a, &mut all)).collect();
    Some(Ok((all, shapes)))
}

/// Arrays of one element type as one tensor: their elements one after
/// another (copied once, into one allocation) and each one's shape.
pub(crate) fn concat_numpy(arrays: &[Bound<'_, PyAny>]) -> PyResult<(Data, Vec<Vec<usize>>)> {
    let Some(first) = arrays.first() else {
        return Err(PyValueError::new_err(
            "a grouped allreduce needs at least one array",
        ));
    };
    let mut total = 0usize;
    for a in arrays {
        total += a.cast::<PyUntypedArray>().map_or(0, |u| u.len());
    }
    macro_rules! try_type {
        ($t:ty, $variant:ident) => {
            if let Some(r) = gather::<$t>(arrays, total) {
                let (v, shapes) = r?;
                return Ok((Data::$variant(v), shapes));
            }
        };
    }
    try_type!(f32, F32);
    try_type!(f64, F64);
    try_type!(f16, F16);
    try_type!(i32, I32);
    try_type!(i64, I64);
    try_type!(u8, U8);
    Err(PyTypeError::new_err(format!(
        "elasticrun reduces numpy arrays of float32, float64, float16, int32, int64 or uint8, not {}",
        dtype_of(first)
    )))
}

/// `a`'s numpy dtype, or its Python type when it has none.
fn dtype_of(a: &Bound<'_, PyAny>) -> String {
    a.getattr("dtype")
        .map_or_else(|_| a.get_type().to_string(), |d| d.to_string())
}

/// The elements and shape of numpy array `a`.
pub(crate) fn from_numpy(a: &Bound<'_, PyAny>) -> PyResult<(Data, Vec<usize>)> {
    let (data, mut shapes) = concat_numpy(std::slice::from_ref(a))?;
    Ok((data, shapes.pop().unwrap_or_default()))
}

/// A new numpy array of `shape` holding `v` (a large one lent from the
/// pool: its memory goes back there when Python drops the array).
pub(crate) fn to_numpy<T: numpy::Element + Pooled>(
    py: Python<'_>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Py<PyAny>> {
    if pool::keeps::<T>(v.capacity()) {
        return crate::sys::lend(py, v, shape);
    }
    let flat = numpy::PyArray1::from_vec(py, v).reshape(shape.to_vec())?;
    Ok(flat.into_any().unbind())
}
