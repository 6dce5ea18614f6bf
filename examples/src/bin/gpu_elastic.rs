//! `gpu_elastic`: an elastic run loop on GPU gradients (docs/gpu.md). Every
//! step each rank sums `--tensors` GPU tensors through the engine and NCCL,
//! checks every element of the result on the host, and commits. Kill a
//! worker mid-run and the survivors see the lost peer (NCCL's error or the
//! deadline, then an aborted communicator), roll back to the last commit,
//! and go on in the next generation on a new communicator.
//!
//! ```text
//! elasticrun --min-np 2 --max-np 2 --host-discovery-script ./hosts.sh gpu_elastic --steps 200
//! ```
//!
//! Rank 0 prints a `step` JSON line every `--print-every` steps; every rank
//! prints a final `done` line with its step count and the resets it lived
//! through. So that a recovery can be timed from the outside, every rank also
//! prints a `ready` line once it has joined and made its CUDA stream, and a
//! `train` line each time it (re)enters training, both with the wall clock
//! (`unix_ms`) and the milliseconds since the process started.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use worker::elastic::{self, ElasticError, Interrupt, State};
use worker::{DeviceBuffer, ReduceOp, Worker};

/// An elastic loop of GPU allreduces, checked exactly every step.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Steps to run (committed steps survive a lost worker).
    #[arg(long, default_value_t = 200)]
    steps: u64,
    /// GPU tensors summed per step.
    #[arg(long, default_value_t = 4)]
    tensors: usize,
    /// f32 elements of each tensor.
    #[arg(long, default_value_t = 1 << 20)]
    elements: usize,
    /// Rank 0 prints a step line this often.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    print_every: u64,
    /// Pause after every step, in milliseconds.
    #[arg(long, default_value_t = 0)]
    step_delay_ms: u64,
}

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("cannot join the job: {0}")]
    Init(#[from] worker::InitError),
    #[error(transparent)]
    Elastic(#[from] ElasticError),
    #[error("GPU: {0}")]
    Gpu(#[from] worker::GpuError),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let gpus = match gpu::probe() {
        Ok(info) => info.devices,
        Err(e) => {
            eprintln!("gpu_elastic: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args, gpus) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_elastic: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Joins the job and trains on GPU `local rank % gpus`.
fn run(args: &Args, gpus: usize) -> Result<(), RunError> {
    let started = Instant::now();
    let mut w = worker::init()?;
    let joined_ms = started.elapsed().as_millis();
    let stream = gpu::stream_on(w.local_rank() % gpus)?;
    let ready = serde_json::json!({
        "event": "ready",
        "rank": w.rank(),
        "joined_ms": joined_ms,
        "since_start_ms": started.elapsed().as_millis(),
        "unix_ms": unix_ms(),
    });
    println!("{ready}");
    let mut state = State::new(0u64);
    let outcome = elastic::run(&mut w, &mut state, |w, st| {
        let entered = serde_json::json!({
            "event": "train",
            "rank": w.rank(),
            "world_size": w.size(),
            "from_step": *st.get(),
            "since_start_ms": started.elapsed().as_millis(),
            "unix_ms": unix_ms(),
        });
        println!("{entered}");
        train(w, args, &stream, st)
    })?;
    let done = serde_json::json!({
        "event": "done",
        "rank": w.rank(),
        "world_size": w.size(),
        "steps": *state.get(),
        "resets": outcome.resets,
    });
    println!("{done}");
    w.shutdown();
    Ok(())
}

/// The wall clock in milliseconds since the Unix epoch (0 before it).
fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The value rank `r` gives element `i` of tensor `t`: small integers, so
/// that every sum is exact in f32.
fn value(r: usize, t: usize, i: usize) -> f32 {
    ((r + 1) * (1 + (t + i) % 7)) as f32
}

fn gpu_failed(e: worker::GpuError) -> Interrupt {
    Interrupt::Fatal(format!("GPU: {e}"))
}

/// Runs from the committed step to `--steps`.
fn train(
    w: &Worker,
    args: &Args,
    stream: &std::sync::Arc<gpu::cudarc::driver::CudaStream>,
    st: &mut State<u64>,
) -> Result<(), Interrupt> {
    let (rank, size) = (w.rank(), w.size());
    // The sum of (r + 1) over the ranks: what every element's factor sums to.
    let ranks_sum = (size * (size + 1) / 2) as f32;
    while *st.get() < args.steps {
        let mut handles = Vec::with_capacity(args.tensors);
        for t in 0..args.tensors {
            let host: Vec<f32> = (0..args.elements).map(|i| value(rank, t, i)).collect();
            let buf = DeviceBuffer::from_host(stream, &host).map_err(gpu_failed)?;
            let name = format!("grad.{t}");
            handles.push(w.allreduce_gpu_async(Some(&name), buf, ReduceOp::Sum));
        }
        for (t, h) in handles.into_iter().enumerate() {
            let got = h.wait()?.0.to_host().map_err(gpu_failed)?;
            let wrong = got
                .iter()
                .enumerate()
                .position(|(i, &x)| x != ranks_sum * value(0, t, i));
            if let Some(i) = wrong {
                return Err(Interrupt::Fatal(format!(
                    "step {}: tensor {t} element {i} is {} on {size} rank(s), not {}",
                    st.get(),
                    got[i],
                    ranks_sum * value(0, t, i)
                )));
            }
        }
        *st.get_mut() += 1;
        st.commit(w)?;
        if rank == 0 && st.get().is_multiple_of(args.print_every) {
            let line = serde_json::json!({"event": "step", "step": *st.get(), "world_size": size});
            println!("{line}");
        }
        if args.step_delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.step_delay_ms));
        }
    }
    Ok(())
}
