//! The GPU's room and what it takes to open one: the generation's NCCL
//! communicator, made at the first GPU group; and the two-level allreduce.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use collectives::{DType, Element, FusedPhases, GroupCollectives, Host, ReduceOp};
use gpu::cudarc::driver::CudaStream;
use gpu::{Device, DeviceBuffer, DeviceTensor, NcclComm, TwoLevel};

use super::{Failed, GpuSide, unsupported_join};
use crate::engine::error::{EngineError, Internal};
use crate::engine::exec::{self, Room};
use crate::engine::messages::{Kind, Ready};
use crate::engine::tensor::{Storage, Submission, with_element};

type Result<T> = std::result::Result<T, EngineError>;

impl GpuSide {
    pub(super) async fn run_on_gpu<B: GroupCollectives<Host>>(
        &mut self,
        host: &B,
        group: &[Ready],
        locals: Vec<Submission>,
        marks: &mut FusedPhases,
        active: usize,
    ) -> std::result::Result<(), Failed> {
        // Refused before the communicator is made, which every rank does
        // at the same group.
        if let Some(e) = GpuRoom::refusal(group[0].kind(), active, host.size()) {
            exec::refuse(locals, &e);
            return Ok(());
        }
        let like = match locals.first().map(|l| &l.data) {
            Some(Storage::Gpu(t)) => t.stream().clone(),
            _ => return Err((Internal::EmptyGroup.into(), locals)),
        };
        if let (Kind::Allreduce(op), Some(h)) = (
            group[0].kind(),
            host.options().device_hierarchical_allreduce.clone(),
        ) {
            return with_element!(group[0].dtype(), T =>
                self.two_level::<T, B>(host, h, &like, locals, op, marks).await);
        }
        if let Err(e) = self.connect(host, &like).await {
            return Err((e, locals));
        }
        let GpuSide {
            comm: Some(comm),
            scratch,
            ..
        } = self
        else {
            let e = into_engine(gpu::GpuError::Aborted { op: "connect" });
            return Err((e, locals));
        };
        let mut room = GpuRoom { comm, scratch };
        exec::run(&mut room, group, locals, marks, active).await
    }

    /// Makes the generation's communicator, on the GPU of `like`'s stream,
    /// unless it is made.
    async fn connect<B: GroupCollectives<Host>>(
        &mut self,
        host: &B,
        like: &Arc<CudaStream>,
    ) -> Result<()> {
        if self.comm.is_none() {
            let stream = gpu::stream_beside(like).map_err(into_engine)?;
            let c = NcclComm::connect(host, stream, self.timeout)
                .await
                .map_err(into_engine)?;
            self.comm = Some(c);
        }
        Ok(())
    }

    /// Allreduce in two levels (`--hierarchical-allreduce`): NCCL on the
    /// host, the host data plane across hosts; a fused group is packed
    /// into the GPU fusion buffer first.
    async fn two_level<T: Element, B: GroupCollectives<Host>>(
        &mut self,
        host: &B,
        hierarchy: Arc<collectives::Hierarchy>,
        like: &Arc<CudaStream>,
        mut locals: Vec<Submission>,
        op: ReduceOp,
        marks: &mut FusedPhases,
    ) -> std::result::Result<(), Failed> {
        let taken: Result<Vec<DeviceBuffer<T>>> =
            locals.iter_mut().map(Submission::take_gpu::<T>).collect();
        let mut data = match taken {
            Ok(d) => d,
            Err(e) => return Err((e, locals)),
        };
        if let Err(e) = self
            .two_level_on(host, hierarchy, like, &mut data, op, marks)
            .await
        {
            return Err((e, locals));
        }
        for (local, d) in locals.into_iter().zip(data) {
            let shape = local.req.shape.clone();
            local.answer(Storage::Gpu(d.into()), shape, vec![]);
        }
        Ok(())
    }

    async fn two_level_on<T: Element, B: GroupCollectives<Host>>(
        &mut self,
        host: &B,
        hierarchy: Arc<collectives::Hierarchy>,
        like: &Arc<CudaStream>,
        data: &mut [DeviceBuffer<T>],
        op: ReduceOp,
        marks: &mut FusedPhases,
    ) -> Result<()> {
        if self.two_level.is_none() {
            let stream = gpu::stream_beside(like).map_err(into_engine)?;
            let t = TwoLevel::connect(host, hierarchy, stream, self.timeout)
                .await
                .map_err(into_engine)?;
            self.two_level = Some(t);
        }
        let Some(two) = &mut self.two_level else {
            return Err(into_engine(gpu::GpuError::Aborted { op: "connect" }));
        };
        if let [one] = data {
            return Ok(two.allreduce(host, one, op).await?);
        }
        let stream = two.local().stream().clone();
        let total: usize = data.iter().map(DeviceBuffer::len).sum();
        let mut buf = kept_or_zeros::<T>(&mut self.scratch, total, &stream)?;
        let mut at = 0;
        for d in data.iter() {
            buf.copy_in(at, d, &stream).map_err(into_engine)?;
            at += d.len();
        }
        marks.packed = Some(Instant::now());
        let r = two.allreduce(host, &mut buf, op).await;
        marks.reduced = Some(Instant::now());
        let mut at = 0;
        for d in data.iter_mut() {
            buf.copy_out(at, d, &stream).map_err(into_engine)?;
            at += d.len();
        }
        self.scratch.insert(T::DTYPE, buf.into());
        Ok(r?)
    }
}

/// The kept fusion buffer of `T` if it holds `len` elements, else `len`
/// new zeroed ones on `stream`.
fn kept_or_zeros<T: Element>(
    kept: &mut HashMap<DType, DeviceTensor>,
    len: usize,
    stream: &Arc<CudaStream>,
) -> Result<DeviceBuffer<T>> {
    match kept.remove(&T::DTYPE).map(DeviceTensor::into_typed::<T>) {
        Some(Ok(b)) if b.len() == len => Ok(b),
        _ => DeviceBuffer::zeros(stream, len).map_err(into_engine),
    }
}

fn into_engine(e: gpu::GpuError) -> EngineError {
    EngineError::from(collectives::CollectiveError::from(e))
}

/// A GPU's room: the generation's communicator, and the fusion buffers
/// kept across cycles (one per element type). Copies run on the
/// communicator's stream.
#[derive(Debug)]
struct GpuRoom<'a> {
    comm: &'a NcclComm,
    scratch: &'a mut HashMap<DType, DeviceTensor>,
}

impl Room for GpuRoom<'_> {
    type Mem = Device;
    type Comm = NcclComm;
    type Held<T: Element> = DeviceBuffer<T>;

    fn comm(&self) -> &NcclComm {
        self.comm
    }

    fn refusal(kind: Kind, active: usize, size: usize) -> Option<EngineError> {
        if active < size {
            return Some(unsupported_join());
        }
        match kind {
            Kind::Alltoall => Some(EngineError::Unsupported {
                what: "alltoall of GPU tensors through the engine",
                instead: "copy the tensor to the host for alltoall",
            }),
            Kind::BroadcastSized { .. } => Some(EngineError::Unsupported {
                what: "a broadcast of GPU tensors whose length only the root knows",
                instead: "broadcast the length first, then a tensor of that length",
            }),
            _ => None,
        }
    }

    fn take<T: Element>(s: &mut Submission) -> Result<DeviceBuffer<T>> {
        s.take_gpu::<T>()
    }

    fn segments<T: Element>(h: &mut DeviceBuffer<T>) -> Vec<&mut DeviceBuffer<T>> {
        vec![h]
    }

    fn whole<T: Element>(h: DeviceBuffer<T>) -> DeviceBuffer<T> {
        h
    }

    fn slice<T: Element>(o: &DeviceBuffer<T>) -> &DeviceBuffer<T> {
        o
    }

    fn slice_mut<T: Element>(o: &mut DeviceBuffer<T>) -> &mut DeviceBuffer<T> {
        o
    }

    fn count<T: Element>(s: &DeviceBuffer<T>) -> usize {
        s.len()
    }

    fn give_held<T: Element>(h: DeviceBuffer<T>) -> Storage {
        Storage::Gpu(h.into())
    }

    fn give<T: Element>(o: DeviceBuffer<T>) -> Storage {
        Storage::Gpu(o.into())
    }

    fn scratch<T: Element>(&mut self, len: usize) -> Result<DeviceBuffer<T>> {
        // NCCL's fused allreduce sizes it to the group.
        let kept = self
            .scratch
            .remove(&T::DTYPE)
            .map(DeviceTensor::into_typed::<T>);
        match kept {
            Some(Ok(b)) => Ok(b),
            _ => self.zeros(len),
        }
    }

    fn scratch_of<T: Element>(&mut self, len: usize) -> Result<DeviceBuffer<T>> {
        kept_or_zeros(self.scratch, len, self.comm.stream())
    }

    fn zeros<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::zeros(self.comm.stream(), len).map_err(into_engine)
    }

    fn put_back<T: Element>(&mut self, o: DeviceBuffer<T>) {
        self.scratch.insert(T::DTYPE, o.into());
    }

    fn concat<T: Element>(
        &self,
        mut parts: Vec<DeviceBuffer<T>>,
        total: usize,
    ) -> Result<DeviceBuffer<T>> {
        if parts.len() == 1
            && let Some(one) = parts.pop()
        {
            return Ok(one);
        }
        let mut all = self.zeros(total)?;
        let mut at = 0;
        for p in &parts {
            all.copy_in(at, p, self.comm.stream())
                .map_err(into_engine)?;
            at += p.len();
        }
        Ok(all)
    }

    fn pick<T: Element>(
        &self,
        from: &DeviceBuffer<T>,
        ranges: &[Range<usize>],
    ) -> Result<DeviceBuffer<T>> {
        let mut out = self.zeros(ranges.iter().map(Range::len).sum())?;
        let mut at = 0;
        for r in ranges {
            out.copy_in_range(at, from, r.clone(), self.comm.stream())
                .map_err(into_engine)?;
            at += r.len();
        }
        Ok(out)
    }

    fn keep<T: Element>(&self, o: DeviceBuffer<T>, range: Range<usize>) -> Result<DeviceBuffer<T>> {
        o.copy_range(range, self.comm.stream()).map_err(into_engine)
    }

    fn average<T: Element>(&self, _: &mut [Vec<&mut DeviceBuffer<T>>], _: usize) -> Result<()> {
        // `refusal` keeps a joined world's groups from here.
        Err(unsupported_join())
    }
}
