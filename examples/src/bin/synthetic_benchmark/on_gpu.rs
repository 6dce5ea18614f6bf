//! `--device cuda`: the same steps on GPU gradients (docs/gpu.md): each
//! rank's tensors live on GPU `local rank % GPUs`, go through the same
//! engine (names, negotiation, fusion) and NCCL, and are checked on the host
//! after the first step and after the last.

use std::time::{Duration, Instant};

use worker::{DeviceBuffer, Element, ReduceOp, Worker};

use crate::BenchError;
use crate::check;
use crate::plan::Plan;

fn gpu_err(e: worker::GpuError) -> BenchError {
    BenchError::Gpu(e.to_string())
}

/// Runs the warm-up and the timed steps on the GPU; returns the timed
/// steps' times.
pub(crate) fn steps<T: Element>(w: &Worker, plan: &Plan) -> Result<Vec<Duration>, BenchError> {
    let info = gpu::probe().map_err(gpu_err)?;
    let stream = gpu::stream_on(w.local_rank() % info.devices).map_err(gpu_err)?;
    let (rank, size) = (w.rank(), w.size());
    let fill = T::from_f64(check::fill_value(rank));
    let mut grads: Vec<Option<DeviceBuffer<T>>> = Vec::with_capacity(plan.tensors.len());
    for t in &plan.tensors {
        let host = vec![fill; t.elements()];
        grads.push(Some(
            DeviceBuffer::from_host(&stream, &host).map_err(gpu_err)?,
        ));
    }
    let release = crate::step::release_times(plan.tensors.len(), plan.compute);
    let want = check::expected(size);
    let total = plan.warmup_steps + plan.steps;
    let mut times = Vec::with_capacity(plan.steps);
    for i in 0..total {
        if i == plan.warmup_steps {
            w.barrier()?;
        }
        let took = step(w, plan, &mut grads, &release)?;
        if i >= plan.warmup_steps {
            times.push(took);
        }
        if i == 0 || i + 1 == total {
            let host = grads
                .iter()
                .map(|g| g.as_ref().map_or(Ok(Vec::new()), DeviceBuffer::to_host))
                .collect::<Result<Vec<Vec<T>>, _>>()
                .map_err(gpu_err)?;
            check::verify(&plan.tensors, &host, want, rank, i)?;
        }
    }
    Ok(times)
}

/// One step: every gradient submitted in reverse layer order at its release
/// time, then all waited for.
fn step<T: Element>(
    w: &Worker,
    plan: &Plan,
    grads: &mut [Option<DeviceBuffer<T>>],
    release: &[Duration],
) -> Result<Duration, BenchError> {
    let start = Instant::now();
    let mut handles = Vec::with_capacity(grads.len());
    for (i, at) in (0..grads.len()).rev().zip(release) {
        let due = start + *at;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let Some(data) = grads[i].take() else {
            return Err(BenchError::Gpu(format!("gradient {i} was lost")));
        };
        let name = &plan.tensors[i].name;
        handles.push((
            i,
            w.allreduce_gpu_async(Some(name), data, ReduceOp::Average),
        ));
    }
    for (i, h) in handles {
        grads[i] = Some(h.wait()?.0);
    }
    Ok(start.elapsed())
}
