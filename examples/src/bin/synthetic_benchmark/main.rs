//! `synthetic_benchmark`: the engine under a training step's load, as
//! Horovod's `pytorch_synthetic_benchmark.py` measures it. Every step
//! allreduces (averages) a model's gradient tensors, each under its parameter's
//! name, and waits for them all; rank 0 prints steps/s and gradient bytes/s as
//! one JSON line.
//!
//! ```text
//! elasticrun -np 2 synthetic_benchmark                       # ResNet-50's 161 tensors
//! elasticrun -np 2 synthetic_benchmark --num-tensors 100 --tensor-bytes 16K
//! elasticrun -np 2 synthetic_benchmark --compute-ms 50       # overlap with "backward"
//! elasticrun -np 2 synthetic_benchmark --device cuda         # GPU gradients, NCCL
//! ```

#[path = "../../bytes.rs"]
mod bytes;
mod check;
mod model;
#[cfg(feature = "cuda")]
mod on_gpu;
mod plan;
mod report;
mod step;

use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use worker::{Element, Worker, f16};

use check::WrongResult;
use plan::{Plan, PlanError, Precision, Workload};

/// Allreduce a model's gradients every step and report steps/s and bytes/s.
#[derive(Debug, Parser)]
#[command(name = "synthetic_benchmark", version)]
struct Args {
    /// Allreduce this many equal tensors per step instead of ResNet-50's 161
    /// parameter tensors (needs --tensor-bytes).
    #[arg(long, value_name = "N", requires = "tensor_bytes")]
    num_tensors: Option<usize>,
    /// Bytes of each of the --num-tensors tensors as allreduced, e.g. 4096,
    /// 16K or 4M.
    #[arg(long, value_name = "SIZE", requires = "num_tensors", value_parser = bytes::parse_bytes)]
    tensor_bytes: Option<usize>,
    /// Timed steps.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Untimed steps first (tensor names negotiated, caches filled).
    #[arg(long, default_value_t = 3)]
    warmup_steps: usize,
    /// Simulated backward compute per step, in milliseconds: the gradients
    /// are submitted one by one during it, last layer first.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    compute_ms: f64,
    /// Allreduce the gradients as f16 (half the bytes), as Horovod's
    /// --fp16-allreduce does.
    #[arg(long)]
    fp16_allreduce: bool,
    /// Where the gradients live: host memory, or a GPU per rank (NCCL; needs
    /// a build with `--features cuda`, docs/gpu.md).
    #[arg(long, value_enum, default_value_t = Device::Host)]
    device: Device,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Device {
    Host,
    Cuda,
}

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("cannot join the job: {0}")]
    Init(#[from] worker::InitError),
    #[error("collective failed: {0}")]
    Collective(#[from] worker::Error),
    #[error(transparent)]
    Wrong(#[from] WrongResult),
    #[error("GPU: {0}")]
    Gpu(String),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let plan = match make_plan(&args) {
        Ok(p) => p,
        // A usage error, reported (exit code 2) as clap reports its own.
        Err(e) => Args::command().error(ErrorKind::ValueValidation, e).exit(),
    };
    if args.device == Device::Cuda
        && let Err(e) = gpu::probe()
    {
        eprintln!("synthetic_benchmark: --device cuda: {e}");
        return ExitCode::from(2);
    }
    match run(&plan, args.device) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("synthetic_benchmark: {e}");
            ExitCode::FAILURE
        }
    }
}

fn make_plan(args: &Args) -> Result<Plan, PlanError> {
    let workload = match (args.num_tensors, args.tensor_bytes) {
        (Some(count), Some(bytes)) => Workload::Uniform { count, bytes },
        // clap requires both or neither.
        _ => Workload::ResNet50,
    };
    let precision = if args.fp16_allreduce {
        Precision::F16
    } else {
        Precision::F32
    };
    Plan::new(
        workload,
        precision,
        args.warmup_steps,
        args.steps,
        args.compute_ms,
    )
}

fn run(plan: &Plan, device: Device) -> Result<(), BenchError> {
    let w = worker::init()?;
    let (rank, size) = (w.rank(), w.size());
    if rank == 0 {
        println!(
            "synthetic_benchmark: {} ({} tensors, {:.2} MiB of {} gradients) on {size} rank(s), \
             {} warm-up + {} timed steps",
            plan.workload.name(),
            plan.tensors.len(),
            plan.step_bytes() as f64 / f64::from(1 << 20),
            plan.precision.name(),
            plan.warmup_steps,
            plan.steps,
        );
    }
    let step_times = match (device, plan.precision) {
        (Device::Host, Precision::F32) => steps::<f32>(&w, plan)?,
        (Device::Host, Precision::F16) => steps::<f16>(&w, plan)?,
        (Device::Cuda, precision) => gpu_steps(&w, plan, precision)?,
    };
    let knobs = report::knobs(&w);
    let engine = w.shutdown();
    if rank == 0 {
        let outcome = report::Outcome {
            plan,
            world_size: size,
            step_times: &step_times,
            knobs,
            engine,
        };
        println!("{}", report::summary(&outcome));
    }
    Ok(())
}

#[cfg(feature = "cuda")]
fn gpu_steps(w: &Worker, plan: &Plan, p: Precision) -> Result<Vec<Duration>, BenchError> {
    match p {
        Precision::F32 => on_gpu::steps::<f32>(w, plan),
        Precision::F16 => on_gpu::steps::<f16>(w, plan),
    }
}

#[cfg(not(feature = "cuda"))]
fn gpu_steps(_: &Worker, _: &Plan, _: Precision) -> Result<Vec<Duration>, BenchError> {
    Err(BenchError::Gpu(gpu::GpuError::NotBuilt.to_string()))
}

/// Runs the warm-up and the timed steps; returns the timed steps' times. The
/// results are checked after the first step and after the last.
fn steps<T: Element>(w: &Worker, plan: &Plan) -> Result<Vec<Duration>, BenchError> {
    let (rank, size) = (w.rank(), w.size());
    let fill = T::from_f64(check::fill_value(rank));
    let mut grads: Vec<Vec<T>> = plan
        .tensors
        .iter()
        .map(|t| vec![fill; t.elements()])
        .collect();
    let release = step::release_times(plan.tensors.len(), plan.compute);
    let want = check::expected(size);
    let total = plan.warmup_steps + plan.steps;
    let mut times = Vec::with_capacity(plan.steps);
    for i in 0..total {
        if i == plan.warmup_steps {
            // The timed steps start together.
            w.barrier()?;
        }
        let took = step::run(w, &plan.tensors, &mut grads, &release)?;
        if i >= plan.warmup_steps {
            times.push(took);
        }
        if i == 0 || i + 1 == total {
            check::verify(&plan.tensors, &grads, want, rank, i)?;
        }
    }
    Ok(times)
}
