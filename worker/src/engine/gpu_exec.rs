//! Running a negotiated group of GPU tensors (docs/gpu.md): the same
//! collectives as the host path, through NCCL.
//!
//! The generation's NCCL communicator is made when its first GPU group runs:
//! negotiation puts that group at the same point on every rank, and the
//! host data plane carries NCCL's unique id. It lives and dies with the
//! engine, so a new generation (a new engine) makes a new one, and an NCCL
//! failure aborts it and fails the engine like any data-plane failure.
//! A fused group is packed into a GPU buffer kept across cycles, one per
//! element type, copied in and out on the communicator's stream.

use collectives::{FusedPhases, GroupCollectives, Host};

use super::error::EngineError;
use super::messages::Ready;
use super::tensor::Submission;

type Failed = (EngineError, Vec<Submission>);

/// What the engine keeps for GPU tensors: nothing without the `cuda`
/// feature (no GPU tensor can be submitted then).
#[derive(Debug, Default)]
pub(super) struct GpuSide {
    /// How long one NCCL operation may take before its communicator is
    /// aborted (a peer is gone or stuck): the data plane's timeout.
    #[cfg(feature = "cuda")]
    timeout: std::time::Duration,
    #[cfg(feature = "cuda")]
    comm: Option<gpu::NcclComm>,
    /// The host's communicator of the two-level allreduce.
    #[cfg(feature = "cuda")]
    two_level: Option<gpu::TwoLevel>,
    #[cfg(feature = "cuda")]
    scratch: std::collections::HashMap<collectives::DType, gpu::DeviceTensor>,
}

/// What a joined rank cannot do with GPU tensors.
fn unsupported_join() -> EngineError {
    EngineError::Unsupported {
        what: "join() while GPU tensors are reduced",
        instead: "join only after the last GPU collective, or keep tensors on the host",
    }
}

impl GpuSide {
    /// Nothing yet; each NCCL operation may take `timeout`
    /// (`--gloo-timeout-seconds`, as one data-plane operation).
    pub(super) fn new(timeout: std::time::Duration) -> Self {
        #[cfg(feature = "cuda")]
        {
            Self {
                timeout,
                ..Self::default()
            }
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = timeout;
            Self::default()
        }
    }

    /// Runs `group` (GPU tensors, one kind and element type) with this
    /// rank's submissions `locals`; `host` carries NCCL's unique id when the
    /// communicator is made.
    pub(super) async fn run<B: GroupCollectives<Host>>(
        &mut self,
        host: &B,
        group: &[Ready],
        locals: Vec<Submission>,
        marks: &mut FusedPhases,
        active: usize,
    ) -> Result<(), Failed> {
        if active < host.size() {
            return Err((unsupported_join(), locals));
        }
        #[cfg(feature = "cuda")]
        {
            use crate::engine::tensor::with_element;
            with_element!(group[0].dtype(), T =>
                self.run_typed::<T, B>(host, group, locals, marks).await)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (group, marks);
            Err((
                EngineError::Unsupported {
                    what: "a GPU tensor in a build without the `cuda` feature",
                    instead: "build with `--features cuda` (docs/gpu.md)",
                },
                locals,
            ))
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::time::Instant;

    use collectives::schedule::even_counts;
    use collectives::{Collectives, Element, FusedPhases, GroupCollectives, Host};
    use gpu::{Device, DeviceBuffer, NcclComm, TwoLevel};

    use super::{Failed, GpuSide};
    use crate::engine::error::EngineError;
    use crate::engine::messages::{Kind, Ready};
    use crate::engine::tensor::Submission;

    type Result<T> = std::result::Result<T, EngineError>;
    /// A result: data, its shape when the collective changed it, alltoall's
    /// received counts.
    type Out<T> = (DeviceBuffer<T>, Option<Vec<usize>>, Vec<usize>);

    impl GpuSide {
        /// The generation's communicator, made on the GPU of `like`'s stream.
        async fn comm<B: GroupCollectives<Host>>(
            &mut self,
            host: &B,
            like: &std::sync::Arc<gpu::cudarc::driver::CudaStream>,
        ) -> Result<&NcclComm> {
            if self.comm.is_none() {
                let stream = gpu::stream_beside(like).map_err(into_engine)?;
                let c = NcclComm::connect(host, stream, self.timeout)
                    .await
                    .map_err(into_engine)?;
                self.comm = Some(c);
            }
            match &self.comm {
                Some(c) => Ok(c),
                None => Err(into_engine(gpu::GpuError::Aborted { op: "connect" })),
            }
        }

        pub(super) async fn run_typed<T: Element, B: GroupCollectives<Host>>(
            &mut self,
            host: &B,
            group: &[Ready],
            mut locals: Vec<Submission>,
            marks: &mut FusedPhases,
        ) -> std::result::Result<(), Failed> {
            let taken: Result<Vec<DeviceBuffer<T>>> =
                locals.iter_mut().map(Submission::take_gpu::<T>).collect();
            let data = match taken {
                Ok(d) => d,
                Err(e) => return Err((e, locals)),
            };
            let result = self.collective(host, group, data, marks).await;
            let outs = match result {
                Ok(o) => o,
                Err(e) => return Err((e, locals)),
            };
            for (local, (data, shape, splits)) in locals.into_iter().zip(outs) {
                let shape = shape.unwrap_or_else(|| local.req.shape.clone());
                local.answer(crate::engine::Storage::Gpu(data.into()), shape, splits);
            }
            Ok(())
        }

        async fn collective<T: Element, B: GroupCollectives<Host>>(
            &mut self,
            host: &B,
            group: &[Ready],
            mut data: Vec<DeviceBuffer<T>>,
            marks: &mut FusedPhases,
        ) -> Result<Vec<Out<T>>> {
            let Some(like) = data.first().map(|d| d.stream().clone()) else {
                return Err(crate::engine::error::Internal::EmptyGroup.into());
            };
            if let (Kind::Allreduce(op), Some(h)) = (
                group[0].kind(),
                host.options().device_hierarchical_allreduce.clone(),
            ) {
                return self.two_level(host, h, &like, data, op, marks).await;
            }
            let mut scratch = self.scratch.remove(&T::DTYPE);
            let comm = self.comm(host, &like).await?;
            let result = match group[0].kind() {
                Kind::Allreduce(op) if data.len() > 1 => {
                    let mut buf = match scratch.take().map(gpu::DeviceTensor::into_typed::<T>) {
                        Some(Ok(b)) => b,
                        _ => DeviceBuffer::zeros(comm.stream(), 0).map_err(into_engine)?,
                    };
                    let r = comm.allreduce_fused(&mut data, op, &mut buf, marks).await;
                    scratch = Some(buf.into());
                    r.map(|()| plain(data)).map_err(EngineError::from)
                }
                Kind::Allreduce(op) => {
                    for d in &mut data {
                        Collectives::<Device>::allreduce(comm, d, op).await?;
                    }
                    Ok(plain(data))
                }
                Kind::Allgather => allgather(comm, group, data, marks).await,
                Kind::Broadcast { root } => {
                    let mut out = Vec::with_capacity(data.len());
                    for mut d in data {
                        Collectives::<Device>::broadcast(comm, &mut d, root as usize).await?;
                        out.push((d, None, vec![]));
                    }
                    Ok(out)
                }
                Kind::Reducescatter(op) => {
                    let mut out = Vec::with_capacity(data.len());
                    for mut d in data {
                        let counts = even_counts(d.len(), comm.size());
                        let mine = comm.reducescatter(&mut d, &counts, op).await?;
                        let n = mine.len();
                        let kept = d.copy_range(mine, comm.stream()).map_err(into_engine)?;
                        out.push((kept, Some(vec![n]), vec![]));
                    }
                    Ok(out)
                }
                Kind::Alltoall => Err(EngineError::Unsupported {
                    what: "alltoall of GPU tensors through the engine",
                    instead: "copy the tensor to the host for alltoall",
                }),
            };
            if let Some(s) = scratch {
                self.scratch.insert(T::DTYPE, s);
            }
            result
        }
    }

    impl GpuSide {
        /// Allreduce in two levels (`--hierarchical-allreduce`): NCCL on the
        /// host, the host data plane across hosts; a fused group is packed
        /// into the GPU fusion buffer first.
        async fn two_level<T: Element, B: GroupCollectives<Host>>(
            &mut self,
            host: &B,
            hierarchy: std::sync::Arc<collectives::Hierarchy>,
            like: &std::sync::Arc<gpu::cudarc::driver::CudaStream>,
            mut data: Vec<DeviceBuffer<T>>,
            op: collectives::ReduceOp,
            marks: &mut FusedPhases,
        ) -> Result<Vec<Out<T>>> {
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
            if let [one] = &mut data[..] {
                two.allreduce(host, one, op).await?;
                return Ok(plain(data));
            }
            let stream = two.local().stream().clone();
            let total: usize = data.iter().map(DeviceBuffer::len).sum();
            let mut buf = match self
                .scratch
                .remove(&T::DTYPE)
                .map(gpu::DeviceTensor::into_typed::<T>)
            {
                Some(Ok(b)) if b.len() == total => b,
                _ => DeviceBuffer::zeros(&stream, total).map_err(into_engine)?,
            };
            let mut at = 0;
            for d in &data {
                buf.copy_in(at, d, &stream).map_err(into_engine)?;
                at += d.len();
            }
            marks.packed = Some(Instant::now());
            let r = two.allreduce(host, &mut buf, op).await;
            marks.reduced = Some(Instant::now());
            let mut at = 0;
            for d in &mut data {
                buf.copy_out(at, d, &stream).map_err(into_engine)?;
                at += d.len();
            }
            self.scratch.insert(T::DTYPE, buf.into());
            r?;
            Ok(plain(data))
        }
    }

    fn plain<T>(data: Vec<DeviceBuffer<T>>) -> Vec<Out<T>> {
        data.into_iter().map(|d| (d, None, vec![])).collect()
    }

    fn into_engine(e: gpu::GpuError) -> EngineError {
        EngineError::from(collectives::CollectiveError::from(e))
    }

    /// Each tensor of the group gathered on its own, in group order; the
    /// first dimension of each is the sum of every rank's.
    async fn allgather<T: Element>(
        comm: &NcclComm,
        group: &[Ready],
        data: Vec<DeviceBuffer<T>>,
        marks: &mut FusedPhases,
    ) -> Result<Vec<Out<T>>> {
        let mut out = Vec::with_capacity(data.len());
        marks.packed = (group.len() > 1).then(Instant::now);
        for (d, g) in data.into_iter().zip(group) {
            let counts: Vec<usize> = g.per_rank.iter().map(|q| q.elements()).collect();
            let mut all =
                DeviceBuffer::zeros(comm.stream(), counts.iter().sum()).map_err(into_engine)?;
            comm.allgatherv_into(&d, &counts, &mut all).await?;
            let rows: usize = g
                .per_rank
                .iter()
                .map(|q| q.shape.first().copied().unwrap_or(1))
                .sum();
            let rest = g.per_rank[0].shape.get(1..).unwrap_or_default();
            let shape = std::iter::once(rows).chain(rest.iter().copied()).collect();
            out.push((all, Some(shape), vec![]));
        }
        marks.reduced = (group.len() > 1).then(Instant::now);
        Ok(out)
    }
}
