//! `train`: data-parallel training of a small multi-layer perceptron on a
//! deterministic synthetic data set.
//!
//! Every rank starts from rank 0's weights (broadcast), computes the gradient of
//! its share of each global batch, and a [`DistributedOptimizer`] averages the
//! named gradient tensors across ranks (the engine fuses them into one
//! allreduce), so a run on N ranks takes the same steps as a run on one, up to
//! floating-point summation order. `--backward-passes-per-step K` sums K
//! batches locally per exchange; `--fp16-allreduce` halves the bytes on the
//! wire. Run it alone (`train`) or under `elasticrun -np 4 train`.

mod data;
mod model;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use worker::{Compression, DistributedOptimizer, OptimizerOptions, ReduceOp, Worker};

use data::{DataSet, Sample};
use model::{LAYERS, PARAMS};

/// Data-parallel training of a small MLP on synthetic data.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    /// Samples per step across all ranks (each rank takes an equal share).
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Learning rate of plain SGD.
    #[arg(long, default_value_t = 0.1)]
    lr: f32,
    /// Training samples (a further fifth, at least 200, is held out for accuracy).
    #[arg(long, default_value_t = 4096)]
    samples: u64,
    /// Seed of the data set, the initial weights and the shuffles.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Artificial compute time added to every step, in milliseconds.
    #[arg(long, default_value_t = 0)]
    step_delay_ms: u64,
    /// Batches whose gradients are summed locally before one exchange (and
    /// one optimizer step).
    #[arg(long, default_value_t = 1)]
    backward_passes_per_step: usize,
    /// Exchange gradients as 16-bit floats.
    #[arg(long)]
    fp16_allreduce: bool,
}

#[derive(Debug, thiserror::Error)]
enum TrainError {
    #[error("cannot join the job: {0}")]
    Init(#[from] worker::InitError),
    #[error("collective failed: {0}")]
    Collective(#[from] worker::Error),
    #[error("{0}")]
    Args(String),
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("train: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The part of `batch` that `rank` of `size` computes.
fn share(batch: &[u64], rank: usize, size: usize) -> &[u64] {
    let n = batch.len();
    &batch[rank * n / size..(rank + 1) * n / size]
}

struct Progress {
    steps: u64,
    train_loss: f32,
}

fn run(args: &Args) -> Result<(), TrainError> {
    if args.batch_size == 0 || args.samples == 0 || args.epochs == 0 {
        return Err(TrainError::Args(
            "--epochs, --batch-size and --samples must be positive".into(),
        ));
    }
    let w = worker::init()?;
    let (rank, size) = (w.rank(), w.size());
    if rank == 0 {
        println!(
            "training on {size} rank(s): {} samples, batch {}, lr {}",
            args.samples, args.batch_size, args.lr
        );
    }
    let data = DataSet::new(args.seed);
    let mut params = if rank == 0 {
        model::initial_params(args.seed)
    } else {
        vec![0.0; PARAMS]
    };
    w.broadcast(&mut params, 0)?;
    let mut order: Vec<u64> = (0..args.samples).collect();
    let mut p = Progress {
        steps: 0,
        train_loss: f32::NAN,
    };
    let mut accuracy = 0.0;
    let mut opt = DistributedOptimizer::new(
        &w,
        OptimizerOptions {
            backward_passes_per_step: args.backward_passes_per_step,
            compression: if args.fp16_allreduce {
                Compression::Fp16
            } else {
                Compression::None
            },
        },
    )?;
    for epoch in 1..=args.epochs {
        let started = Instant::now();
        order.shuffle(&mut StdRng::seed_from_u64(
            args.seed.wrapping_add(epoch as u64),
        ));
        p.train_loss = epoch_pass(&w, args, &data, &order, &mut params, &mut opt, &mut p.steps)?;
        let (test_loss, acc) = test(&w, args, &data, &params)?;
        accuracy = acc;
        if rank == 0 {
            println!(
                "epoch {epoch}/{}: train loss {:.4}, test loss {test_loss:.4}, accuracy {acc:.4} ({:.2} s)",
                args.epochs,
                p.train_loss,
                started.elapsed().as_secs_f64()
            );
        }
    }
    if rank == 0 {
        let done = serde_json::json!({
            "event": "done",
            "world_size": size,
            "epochs": args.epochs,
            "steps": p.steps,
            "loss": p.train_loss,
            "accuracy": accuracy,
        });
        println!("{done}");
    }
    w.shutdown();
    Ok(())
}

/// One pass over the training set in `order`; returns the mean training loss.
fn epoch_pass(
    w: &Worker,
    args: &Args,
    data: &DataSet,
    order: &[u64],
    params: &mut [f32],
    opt: &mut DistributedOptimizer<'_>,
    steps: &mut u64,
) -> Result<f32, TrainError> {
    let mut grad = vec![0.0f32; PARAMS];
    let (mut loss, mut seen) = (0.0f64, 0usize);
    for batch in order.chunks(args.batch_size) {
        grad.fill(0.0);
        let mine: Vec<Sample> = share(batch, w.rank(), w.size())
            .iter()
            .map(|&i| data.sample(i))
            .collect();
        loss += f64::from(model::accumulate_gradient(params, &mine, &mut grad));
        seen += mine.len();
        if args.step_delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.step_delay_ms));
        }
        // Averaged over ranks, size / n times each rank's sum is the mean
        // gradient of the whole batch, whatever each rank's share.
        let scale = w.size() as f32 / batch.len() as f32;
        for (name, range) in LAYERS {
            let g: Vec<f32> = grad[range].iter().map(|g| g * scale).collect();
            opt.submit(name, &g)?;
        }
        if let Some(averaged) = opt.step()? {
            for ((_, range), (_, g)) in LAYERS.iter().zip(&averaged) {
                for (p, g) in params[range.clone()].iter_mut().zip(g) {
                    *p -= args.lr * g;
                }
            }
            *steps += 1;
        }
    }
    let sums = [
        ("loss".to_owned(), loss),
        ("samples".to_owned(), seen as f64),
    ]
    .into();
    let avg = w.average_metrics(&sums)?;
    Ok((avg["loss"] / avg["samples"]) as f32)
}

/// (mean loss, accuracy) on the held-out samples, each rank taking every
/// size-th one.
fn test(w: &Worker, args: &Args, data: &DataSet, params: &[f32]) -> Result<(f32, f32), TrainError> {
    let held_out = (args.samples / 5).max(200);
    let mine = (args.samples + w.rank() as u64..args.samples + held_out).step_by(w.size());
    let (loss, right) = model::evaluate(params, mine.map(|i| data.sample(i)));
    let mut sums = [f64::from(loss), right as f64];
    w.allreduce(&mut sums, ReduceOp::Sum)?;
    Ok((
        (sums[0] / held_out as f64) as f32,
        (sums[1] / held_out as f64) as f32,
    ))
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_cover_the_batch_once() {
        let batch: Vec<u64> = (0..10).collect();
        for size in 1..=4 {
            let joined: Vec<u64> = (0..size)
                .flat_map(|r| share(&batch, r, size).to_vec())
                .collect();
            assert_eq!(joined, batch, "size {size}");
        }
    }
}
