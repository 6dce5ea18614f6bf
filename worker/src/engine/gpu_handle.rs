//! Submitting GPU tensors (feature `cuda`): the same negotiation, cache,
//! fusion and errors as host tensors, run through NCCL (docs/gpu.md).

use std::marker::PhantomData;

use collectives::Element;
use gpu::DeviceBuffer;
use tokio::sync::oneshot;

use super::driver::Command;
use super::error::{EngineError, Internal};
use super::messages::{Kind, Location, Request};
use super::tensor::Submission;
use super::{Engine, Reply};

/// A submitted collective on a GPU tensor: [`GpuHandle::poll`] says whether
/// it is done, [`GpuHandle::wait`] blocks for the result, which stays on the
/// GPU.
#[derive(Debug)]
pub struct GpuHandle<T> {
    reply: Reply,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> GpuHandle<T> {
    /// Whether the result is ready (then [`GpuHandle::wait`] does not block).
    pub fn poll(&mut self) -> bool {
        self.reply.poll()
    }

    /// Blocks until the collective completes; returns the result and its
    /// shape. Must not be called from inside an async runtime.
    pub fn wait(self) -> Result<(DeviceBuffer<T>, Vec<usize>), EngineError> {
        let out = self.reply.wait()?;
        let data = out
            .data
            .into_gpu::<T>()
            .map_err(|held| Internal::ElementType {
                name: String::from("(a result)"),
                held: held.dtype(),
                wanted: T::DTYPE,
            })?;
        Ok((data, out.shape))
    }
}

/// A submitted collective on a GPU tensor whose element type is known at
/// run time (the Python package's): [`DeviceHandle::wait`] gives the result
/// back as a [`gpu::DeviceTensor`], the tensor's own lent memory when the
/// collective worked in place.
#[derive(Debug)]
pub struct DeviceHandle {
    reply: Reply,
}

impl DeviceHandle {
    /// Whether the result is ready (then [`DeviceHandle::wait`] does not block).
    pub fn poll(&mut self) -> bool {
        self.reply.poll()
    }

    /// Blocks until the collective completes (its NCCL work has run on the
    /// GPU); returns the result and its shape.
    pub fn wait(self) -> Result<(gpu::DeviceTensor, Vec<usize>), EngineError> {
        let out = self.reply.wait()?;
        match out.data {
            super::Storage::Gpu(t) => Ok((t, out.shape)),
            other => Err(Internal::NotOnGpu {
                held: other.dtype(),
            }
            .into()),
        }
    }
}

impl Engine {
    /// Submits GPU tensor `data` of `shape` for `kind` under `name`.
    pub fn submit_gpu<T: Element>(
        &self,
        name: String,
        kind: Kind,
        data: DeviceBuffer<T>,
        shape: Vec<usize>,
    ) -> GpuHandle<T> {
        GpuHandle {
            reply: self.submit_device(name, kind, data.into(), shape).reply,
            _t: PhantomData,
        }
    }

    /// Submits GPU tensor `data` (its element type known at run time) of
    /// `shape` for `kind` under `name`.
    pub fn submit_device(
        &self,
        name: String,
        kind: Kind,
        data: gpu::DeviceTensor,
        shape: Vec<usize>,
    ) -> DeviceHandle {
        let (reply, rx) = oneshot::channel();
        let entry = self.pending.enter(&name, std::time::Instant::now());
        let req = Request {
            name,
            kind,
            dtype: data.dtype(),
            shape,
            parts: Vec::new(),
            place: Location::Gpu,
        };
        let local = Submission {
            req,
            data: super::Storage::Gpu(data),
            splits: Vec::new(),
            reply,
            submitted: std::time::Instant::now(),
            _pending: entry,
        };
        let reply = match self.tx.send(Command::Submit(local)) {
            Ok(()) => Reply::waiting(rx),
            Err(_) => Reply::known(Err(EngineError::ShutDown)),
        };
        DeviceHandle { reply }
    }
}
