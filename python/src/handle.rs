//! Asynchronous collectives: each `*_async` function submits a numpy array
//! to the engine and returns a [`Handle`] (`poll()`, `wait()`); the blocking
//! forms in the Python package are `*_async(...).wait()`.

use half::f16;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use worker::{Element, Tensor, Worker};

use crate::arrays::{concat_numpy, from_numpy, to_numpy};
use crate::pool::Data;
use crate::{ElasticrunError, engine_err, on_worker, reduce_op};

/// A submitted collective of one element type.
#[derive(Debug)]
enum Typed {
    F32(worker::Handle<f32>),
    F64(worker::Handle<f64>),
    F16(worker::Handle<f16>),
    I32(worker::Handle<i32>),
    I64(worker::Handle<i64>),
    U8(worker::Handle<u8>),
}

/// Runs `$body` (a `worker::Handle<T>` from `$v: Vec<T>`) for the type `$data`
/// holds, wrapping the handle.
macro_rules! submit {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            Data::F32($v) => Typed::F32($body),
            Data::F64($v) => Typed::F64($body),
            Data::F16($v) => Typed::F16($body),
            Data::I32($v) => Typed::I32($body),
            Data::I64($v) => Typed::I64($body),
            Data::U8($v) => Typed::U8($body),
        }
    };
}

/// A collective in flight: `poll()` says whether it is done, `wait()`
/// returns its result (the interpreter released while it waits).
#[pyclass(module = "elasticrun._elasticrun")]
#[derive(Debug)]
pub struct Handle {
    typed: Option<Typed>,
    /// How the flat result is shaped.
    out: Out,
}

/// The shape of a result.
#[derive(Clone, Debug)]
enum Out {
    /// As the engine says (the input's, or an allgather's rows).
    Engine,
    /// Rows of `row` elements with these trailing dimensions; alltoall also
    /// returns the rows each rank sent.
    Rows {
        row: usize,
        trailing: Vec<usize>,
        splits: bool,
    },
}

fn finish<T: Element + numpy::Element + crate::pool::Pooled>(
    py: Python<'_>,
    h: worker::Handle<T>,
    out: &Out,
) -> PyResult<Py<PyAny>> {
    let (t, splits) = py
        .detach(move || h.wait_with_splits())
        .map_err(engine_err)?;
    let Out::Rows {
        row,
        trailing,
        splits: with_splits,
    } = out
    else {
        return to_numpy(py, t.data, &t.shape);
    };
    let row = (*row).max(1);
    let shape: Vec<usize> = std::iter::once(t.data.len() / row)
        .chain(trailing.iter().copied())
        .collect();
    let array = to_numpy(py, t.data, &shape)?;
    if *with_splits {
        let rows: Vec<usize> = splits.iter().map(|s| s / row).collect();
        return Ok((array, rows).into_pyobject(py)?.into_any().unbind());
    }
    Ok(array)
}

#[pymethods]
impl Handle {
    /// Whether the result is ready (then `wait()` returns at once).
    fn poll(&mut self) -> bool {
        match &mut self.typed {
            Some(Typed::F32(h)) => h.poll(),
            Some(Typed::F64(h)) => h.poll(),
            Some(Typed::F16(h)) => h.poll(),
            Some(Typed::I32(h)) => h.poll(),
            Some(Typed::I64(h)) => h.poll(),
            Some(Typed::U8(h)) => h.poll(),
            None => true,
        }
    }

    /// The result as a new numpy array (alltoall: and the received splits).
    fn wait(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let s = &self.out;
        match self.typed.take() {
            Some(Typed::F32(h)) => finish(py, h, s),
            Some(Typed::F64(h)) => finish(py, h, s),
            Some(Typed::F16(h)) => finish(py, h, s),
            Some(Typed::I32(h)) => finish(py, h, s),
            Some(Typed::I64(h)) => finish(py, h, s),
            Some(Typed::U8(h)) => finish(py, h, s),
            None => Err(ElasticrunError::new_err(
                "this handle was already waited for",
            )),
        }
    }
}

fn handle(typed: Typed, out: Out) -> Handle {
    Handle {
        typed: Some(typed),
        out,
    }
}

/// Elements per row of `shape` and its trailing dimensions.
fn rows_of(shape: &[usize]) -> (usize, Vec<usize>) {
    let trailing = shape.get(1..).unwrap_or_default().to_vec();
    (trailing.iter().product(), trailing)
}

fn tensor<T>(v: Vec<T>, shape: Vec<usize>) -> Tensor<T> {
    Tensor { data: v, shape }
}

/// Starts reducing `array` over all ranks (Horovod's op codes).
#[pyfunction]
#[pyo3(signature = (array, name=None, op=0))]
fn allreduce_async(array: &Bound<'_, PyAny>, name: Option<String>, op: i32) -> PyResult<Handle> {
    let op = reduce_op(op)?;
    let (data, shape) = from_numpy(array)?;
    let n = name.as_deref();
    let typed = on_worker(|w| submit!(data, v => w.allreduce_async(n, tensor(v, shape), op)))?;
    Ok(handle(typed, Out::Engine))
}

/// Starts gathering every rank's `array` along its first dimension.
#[pyfunction]
#[pyo3(signature = (array, name=None))]
fn allgather_async(array: &Bound<'_, PyAny>, name: Option<String>) -> PyResult<Handle> {
    let (data, shape) = from_numpy(array)?;
    let n = name.as_deref();
    let typed = on_worker(|w| submit!(data, v => w.allgather_async(n, tensor(v, shape))))?;
    Ok(handle(typed, Out::Engine))
}

/// Starts copying `root`'s `array` to every rank.
#[pyfunction]
#[pyo3(signature = (array, root, name=None))]
fn broadcast_async(
    array: &Bound<'_, PyAny>,
    root: usize,
    name: Option<String>,
) -> PyResult<Handle> {
    broadcast(array, root, name, false)
}

/// Starts copying `root`'s `array` to every rank, whose own `array` may be
/// of any length (they get root's): an object's bytes in one round.
#[pyfunction]
#[pyo3(signature = (array, root, name=None))]
fn broadcast_sized_async(
    array: &Bound<'_, PyAny>,
    root: usize,
    name: Option<String>,
) -> PyResult<Handle> {
    broadcast(array, root, name, true)
}

fn broadcast(
    array: &Bound<'_, PyAny>,
    root: usize,
    name: Option<String>,
    sized: bool,
) -> PyResult<Handle> {
    let (data, shape) = from_numpy(array)?;
    let n = name.as_deref();
    let typed = on_worker(|w| {
        submit!(data, v => if sized {
            w.broadcast_sized_async(n, tensor(v, shape), root)
        } else {
            w.broadcast_async(n, tensor(v, shape), root)
        })
    })?;
    Ok(handle(typed, Out::Engine))
}

/// Starts reducing `array` and keeping this rank's share of its first
/// dimension.
#[pyfunction]
#[pyo3(signature = (array, name=None, op=0))]
fn reducescatter_async(
    array: &Bound<'_, PyAny>,
    name: Option<String>,
    op: i32,
) -> PyResult<Handle> {
    let op = reduce_op(op)?;
    let (data, shape) = from_numpy(array)?;
    let (row, trailing) = rows_of(&shape);
    let rows = shape.first().copied().unwrap_or(1);
    let size = on_worker(|w: &Worker| w.size())?;
    if shape.len() > 1 && rows % size != 0 {
        return Err(PyValueError::new_err(format!(
            "reducescatter of {rows} rows over {size} ranks: the rows must divide evenly"
        )));
    }
    let n = name.as_deref();
    let typed = on_worker(|w| submit!(data, v => w.reducescatter_async(n, tensor(v, shape), op)))?;
    let out = Out::Rows {
        row,
        trailing,
        splits: false,
    };
    Ok(handle(typed, out))
}

/// Starts sending `splits[j]` rows of `array` to rank `j` (even splits when
/// `None`); `wait()` returns the received array and the received splits.
#[pyfunction]
#[pyo3(signature = (array, splits=None, name=None))]
fn alltoall_async(
    array: &Bound<'_, PyAny>,
    splits: Option<Vec<usize>>,
    name: Option<String>,
) -> PyResult<Handle> {
    let (data, shape) = from_numpy(array)?;
    let (row, trailing) = rows_of(&shape);
    let rows = shape.first().copied().unwrap_or(1);
    let size = on_worker(|w: &Worker| w.size())?;
    let splits = match splits {
        Some(s) => s,
        None if rows % size == 0 => vec![rows / size; size],
        None => {
            return Err(PyValueError::new_err(format!(
                "alltoall of {rows} rows over {size} ranks without splits: the rows must divide evenly"
            )));
        }
    };
    let elements: Vec<usize> = splits.iter().map(|s| s * row).collect();
    let n = name.as_deref();
    let typed = on_worker(|w| submit!(data, v => w.alltoall_async(n, v, elements.clone())))?;
    let out = Out::Rows {
        row,
        trailing,
        splits: true,
    };
    Ok(handle(typed, out))
}

/// Several arrays of one element type reduced as one tensor: negotiated
/// together and fused.
#[pyclass(module = "elasticrun._elasticrun")]
#[derive(Debug)]
pub struct GroupHandle {
    inner: Handle,
    /// Each member's shape, in order.
    shapes: Vec<Vec<usize>>,
}

#[pymethods]
impl GroupHandle {
    fn poll(&mut self) -> bool {
        self.inner.poll()
    }

    /// Every member's result, in submission order, as new arrays.
    fn wait<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let all = self.inner.wait(py)?;
        let all = all.bind(py);
        let mut out = Vec::with_capacity(self.shapes.len());
        let mut at = 0usize;
        for shape in &self.shapes {
            let n: usize = shape.iter().product();
            let part = all
                .get_item(pyo3::types::PySlice::new(
                    py,
                    at as isize,
                    (at + n) as isize,
                    1,
                ))?
                .call_method1("reshape", (shape.clone(),))?;
            out.push(part);
            at += n;
        }
        PyList::new(py, out)
    }
}

/// Starts reducing `arrays` (one element type) as one tensor.
#[pyfunction]
#[pyo3(signature = (arrays, name=None, op=0))]
fn grouped_allreduce_async(
    arrays: Vec<Bound<'_, PyAny>>,
    name: Option<String>,
    op: i32,
) -> PyResult<GroupHandle> {
    let op = reduce_op(op)?;
    let (data, shapes) = concat_numpy(&arrays)?;
    let total = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    let inner = Handle {
        typed: Some(on_worker(|w| {
            let n = name.as_deref();
            submit!(data, v => w.allreduce_async(n, tensor(v, vec![total]), op))
        })?),
        out: Out::Engine,
    };
    Ok(GroupHandle { inner, shapes })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(allreduce_async, m)?)?;
    m.add_function(wrap_pyfunction!(allgather_async, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast_async, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast_sized_async, m)?)?;
    m.add_function(wrap_pyfunction!(reducescatter_async, m)?)?;
    m.add_function(wrap_pyfunction!(alltoall_async, m)?)?;
    m.add_function(wrap_pyfunction!(grouped_allreduce_async, m)?)?;
    Ok(())
}
