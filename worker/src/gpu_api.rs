//! Collectives on GPU tensors (feature `cuda`, docs/gpu.md): the host API's
//! names with `_gpu`, on [`gpu::DeviceBuffer`]s, through the same engine
//! (names, negotiation, response cache, fusion, mismatch errors, timeline)
//! and NCCL. Each tensor is one-dimensional here; the result stays on the GPU.

use collectives::{Element, ReduceOp};
use gpu::DeviceBuffer;

use crate::engine::{DeviceHandle, GpuHandle, Invalid, Kind};
use crate::{Error, Worker};

/// A collective on a GPU tensor whose element type is known at run time
/// ([`Worker::submit_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceOp {
    /// Reduced in place.
    Allreduce(ReduceOp),
    /// Every rank's rows in rank order (a new buffer).
    Allgather,
    /// `root`'s tensor, in place.
    Broadcast { root: usize },
    /// This rank's even share of the reduction (a new buffer).
    Reducescatter(ReduceOp),
}

impl Worker {
    fn submit_gpu<T: Element>(
        &self,
        name: Option<&str>,
        kind: Kind,
        data: DeviceBuffer<T>,
    ) -> GpuHandle<T> {
        let name = self.name(name, kind);
        let shape = vec![data.len()];
        self.engine.submit_gpu(name, kind, data, shape)
    }

    /// Starts `op` on GPU tensor `data` of `shape` (row-major; an
    /// allgather joins the first dimension) through the engine and NCCL.
    /// Lent memory ([`gpu::lend`]) is reduced or broadcast where it lies.
    pub fn submit_device(
        &self,
        name: Option<&str>,
        op: DeviceOp,
        data: gpu::DeviceTensor,
        shape: Vec<usize>,
    ) -> Result<DeviceHandle, Error> {
        if shape.iter().product::<usize>() != data.len() {
            let elements = data.len();
            return Err(Invalid::Shape { elements, shape }.into());
        }
        let kind = match op {
            DeviceOp::Allreduce(op) => Kind::Allreduce(op),
            DeviceOp::Allgather => Kind::Allgather,
            DeviceOp::Reducescatter(op) => Kind::Reducescatter(op),
            DeviceOp::Broadcast { root } => self.broadcast_kind(root)?,
        };
        let name = self.name(name, kind);
        Ok(self.engine.submit_device(name, kind, data, shape))
    }

    /// Starts reducing GPU tensor `data` over all ranks (NCCL; `Average` is
    /// NCCL's own).
    pub fn allreduce_gpu_async<T: Element>(
        &self,
        name: Option<&str>,
        data: DeviceBuffer<T>,
        op: ReduceOp,
    ) -> GpuHandle<T> {
        self.submit_gpu(name, Kind::Allreduce(op), data)
    }

    /// Starts gathering every rank's GPU tensor (lengths may differ) in rank
    /// order.
    pub fn allgather_gpu_async<T: Element>(
        &self,
        name: Option<&str>,
        data: DeviceBuffer<T>,
    ) -> GpuHandle<T> {
        self.submit_gpu(name, Kind::Allgather, data)
    }

    /// Starts copying `root`'s GPU tensor to every rank.
    pub fn broadcast_gpu_async<T: Element>(
        &self,
        name: Option<&str>,
        data: DeviceBuffer<T>,
        root: usize,
    ) -> Result<GpuHandle<T>, Error> {
        let kind = self.broadcast_kind(root)?;
        Ok(self.submit_gpu(name, kind, data))
    }

    /// Starts reducing GPU tensor `data` and keeping this rank's even share.
    pub fn reducescatter_gpu_async<T: Element>(
        &self,
        name: Option<&str>,
        data: DeviceBuffer<T>,
        op: ReduceOp,
    ) -> GpuHandle<T> {
        self.submit_gpu(name, Kind::Reducescatter(op), data)
    }

    /// Reduces GPU tensor `data` over all ranks and returns the result.
    pub fn allreduce_gpu<T: Element>(
        &self,
        data: DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<DeviceBuffer<T>, Error> {
        Ok(self.allreduce_gpu_async(None, data, op).wait()?.0)
    }
}
