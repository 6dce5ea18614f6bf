//! numpy arrays in and out: the element types elasticrun reduces (f32, f64,
//! f16, i32, i64, u8), copied into the engine's buffers in C order and back
//! into new arrays of the same shape.

use half::f16;
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// A tensor's elements, of the type the array had.
pub(crate) enum Data {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
}

impl Data {
    pub(crate) fn dtype(&self) -> &'static str {
        match self {
            Data::F32(_) => "float32",
            Data::F64(_) => "float64",
            Data::F16(_) => "float16",
            Data::I32(_) => "int32",
            Data::I64(_) => "int64",
            Data::U8(_) => "uint8",
        }
    }
}

fn elements<T: numpy::Element + Copy>(a: &Bound<'_, PyArrayDyn<T>>) -> (Vec<T>, Vec<usize>) {
    let mut v = Vec::new();
    let shape = append(a, &mut v);
    (v, shape)
}

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

/// The elements of `arrays`, all of element type `T`, one after another in
/// one allocation, and each one's shape; `None` when the first is not `T`.
fn gather<T: numpy::Element + Copy>(
    arrays: &[Bound<'_, PyAny>],
    total: usize,
) -> Option<PyResult<Gathered<T>>> {
    let first = arrays.first()?.cast::<PyArrayDyn<T>>().ok()?;
    let mut all = Vec::with_capacity(total);
    let mut shapes = vec![append(first, &mut all)];
    for a in &arrays[1..] {
        match a.cast::<PyArrayDyn<T>>() {
            Ok(arr) => shapes.push(append(arr, &mut all)),
            Err(_) => {
                let want = first.dtype().to_string();
                return Some(Err(match from_numpy(a) {
                    Ok((other, _)) => PyTypeError::new_err(format!(
                        "a grouped allreduce's arrays must share one dtype: {want} and {}",
                        other.dtype()
                    )),
                    Err(e) => e,
                }));
            }
        }
    }
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
    // The first is no array elasticrun reduces: its own error.
    from_numpy(first).map(|(d, s)| (d, vec![s]))
}

/// The elements and shape of numpy array `a`.
pub(crate) fn from_numpy(a: &Bound<'_, PyAny>) -> PyResult<(Data, Vec<usize>)> {
    macro_rules! try_type {
        ($t:ty, $variant:ident) => {
            if let Ok(arr) = a.cast::<PyArrayDyn<$t>>() {
                let (v, shape) = elements(arr);
                return Ok((Data::$variant(v), shape));
            }
        };
    }
    try_type!(f32, F32);
    try_type!(f64, F64);
    try_type!(f16, F16);
    try_type!(i32, I32);
    try_type!(i64, I64);
    try_type!(u8, U8);
    let what = a
        .getattr("dtype")
        .map_or_else(|_| a.get_type().to_string(), |d| d.to_string());
    Err(PyTypeError::new_err(format!(
        "elasticrun reduces numpy arrays of float32, float64, float16, int32, int64 or uint8, not {what}"
    )))
}

/// A new numpy array of `shape` holding `v`.
pub(crate) fn to_numpy<T: numpy::Element>(
    py: Python<'_>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Py<PyAny>> {
    let flat = numpy::PyArray1::from_vec(py, v).reshape(shape.to_vec())?;
    Ok(flat.into_any().unbind())
}
