//! numpy arrays in and out: the element types elasticrun reduces (f32, f64,
//! f16, i32, i64, u8), copied into the engine's buffers in C order and back
//! into new arrays of the same shape.

use half::f16;
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
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
    let ro = a.readonly();
    // One copy of contiguous memory where the layout allows; element by
    // element in C order otherwise.
    let v = match ro.as_slice() {
        Ok(s) => s.to_vec(),
        Err(_) => ro.as_array().iter().copied().collect(),
    };
    (v, ro.shape().to_vec())
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
