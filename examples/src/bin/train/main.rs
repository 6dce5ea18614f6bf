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
//!
//! The training state (weights, epoch, batch, step count, loss sums) is an
//! elastic [`State`]: committed every `--commit-every` steps, so that under
//! `elasticrun --host-discovery-script` training survives workers failing
//! (back to the last commit) and hosts coming and going (no rollback). Each
//! global batch is split by the current rank and size, so data is resharded
//! whenever the world changes. Every rank prints a final `done` line with
//! the step count, the resets it lived through and a checksum of its weights.

mod data;
mod model;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use worker::elastic::{self, ElasticError, Interrupt, State};
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
    /// Optimizer steps between commits of the training state (it is also
    /// committed at the end of every epoch); 0: only then. After workers fail,
    /// training goes on from the last commit.
    #[arg(long, default_value_t = 10)]
    commit_every: u64,
    /// Rank 0 prints a JSON line per optimizer step: the step, the wall clock
    /// in milliseconds since the Unix epoch, its process id and the world size.
    #[arg(long)]
    log_steps: bool,
    /// Testing aid: at this optimizer step, rank 1 stops submitting (sleeps
    /// for good) if FILE does not exist yet, creating it first; so the stall
    /// happens once per FILE, not again in the worker that replaces it.
    #[arg(long, num_args = 2, value_names = ["STEP", "FILE"])]
    hang_once_at: Option<Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
enum TrainError {
    #[error("cannot join the job: {0}")]
    Init(#[from] worker::InitError),
    #[error("{0}")]
    Elastic(#[from] ElasticError),
    #[error("{0}")]
    Args(String),
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        // Told to leave (the job shrank): news, not an error.
        Err(TrainError::Elastic(ElasticError::Left(why))) => {
            println!("train: {why}; leaving");
            ExitCode::SUCCESS
        }
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

/// Everything training needs to go on from where it was: committed every
/// `--commit-every` steps and at each epoch's end, synced from rank 0 into
/// every new generation. Loss sums are over all ranks, so they mean the
/// same on every rank.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Progress {
    params: Vec<f32>,
    /// The epoch under way (from 1) and its next batch.
    epoch: usize,
    batch: usize,
    steps: u64,
    /// Sum of the batch losses of this epoch, and their samples.
    loss_sum: f64,
    loss_samples: f64,
    train_loss: f32,
    accuracy: f32,
}

fn run(args: &Args) -> Result<(), TrainError> {
    if args.batch_size == 0 || args.samples == 0 || args.epochs == 0 {
        return Err(TrainError::Args(
            "--epochs, --batch-size and --samples must be positive".into(),
        ));
    }
    let mut w = worker::init()?;
    if w.rank() == 0 {
        println!(
            "training on {} rank(s): {} samples, batch {}, lr {}",
            w.size(),
            args.samples,
            args.batch_size,
            args.lr
        );
    }
    let data = DataSet::new(args.seed);
    // Rank 0's initial weights reach every rank through the first sync.
    let mut state = State::new(Progress {
        params: model::initial_params(args.seed),
        epoch: 1,
        batch: 0,
        steps: 0,
        loss_sum: 0.0,
        loss_samples: 0.0,
        train_loss: f32::NAN,
        accuracy: 0.0,
    });
    let outcome = elastic::run(&mut w, &mut state, |w, st| train(w, args, &data, st))?;
    let p = state.get();
    let done = serde_json::json!({
        "event": "done",
        "rank": w.rank(),
        "world_size": w.size(),
        "epochs": args.epochs,
        "steps": p.steps,
        "loss": p.train_loss,
        "accuracy": p.accuracy,
        "resets": outcome.resets,
        "committed_steps": state.committed().steps,
        "state": format!("{:016x}", checksum(&p.params)),
    });
    println!("{done}");
    w.shutdown();
    Ok(())
}

/// FNV-1a over the weights' bits: equal on every rank that holds the same
/// model.
fn checksum(params: &[f32]) -> u64 {
    params.iter().fold(0xcbf2_9ce4_8422_2325, |h, p| {
        p.to_bits()
            .to_le_bytes()
            .iter()
            .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
    })
}

/// Trains from wherever `st` stands to the last epoch.
fn train(
    w: &Worker,
    args: &Args,
    data: &DataSet,
    st: &mut State<Progress>,
) -> Result<(), Interrupt> {
    let mut opt = DistributedOptimizer::new(
        w,
        OptimizerOptions {
            backward_passes_per_step: args.backward_passes_per_step,
            compression: if args.fp16_allreduce {
                Compression::Fp16
            } else {
                Compression::None
            },
        },
    )?;
    let mut order: Vec<u64> = (0..args.samples).collect();
    while st.get().epoch <= args.epochs {
        let (epoch, started) = (st.get().epoch, Instant::now());
        order.sort_unstable();
        order.shuffle(&mut StdRng::seed_from_u64(
            args.seed.wrapping_add(epoch as u64),
        ));
        epoch_pass(w, args, data, &order, st, &mut opt)?;
        let (test_loss, acc) = test(w, args, data, &st.get().params)?;
        let p = st.get_mut();
        p.train_loss = (p.loss_sum / p.loss_samples.max(1.0)) as f32;
        p.accuracy = acc;
        if w.rank() == 0 {
            println!(
                "epoch {epoch}/{}: train loss {:.4}, test loss {test_loss:.4}, accuracy {acc:.4} ({:.2} s)",
                args.epochs,
                p.train_loss,
                started.elapsed().as_secs_f64()
            );
        }
        (p.epoch, p.batch, p.loss_sum, p.loss_samples) = (epoch + 1, 0, 0.0, 0.0);
        st.commit(w)?;
    }
    Ok(())
}

/// The rest of the epoch's batches in `order`, from the state's next batch.
fn epoch_pass(
    w: &Worker,
    args: &Args,
    data: &DataSet,
    order: &[u64],
    st: &mut State<Progress>,
    opt: &mut DistributedOptimizer<'_>,
) -> Result<(), Interrupt> {
    let mut grad = vec![0.0f32; PARAMS];
    let batches: Vec<&[u64]> = order.chunks(args.batch_size).collect();
    for (i, batch) in batches.iter().enumerate().skip(st.get().batch) {
        grad.fill(0.0);
        let mine: Vec<Sample> = share(batch, w.rank(), w.size())
            .iter()
            .map(|&i| data.sample(i))
            .collect();
        let loss = model::accumulate_gradient(&st.get().params, &mine, &mut grad);
        let loss = w.allreduce_async(
            Some("train.loss"),
            vec![loss, mine.len() as f32],
            ReduceOp::Sum,
        );
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
        let stepped = opt.step()?;
        let loss = loss.wait()?.data;
        let p = st.get_mut();
        if let Some(averaged) = &stepped {
            for ((_, range), (_, g)) in LAYERS.iter().zip(averaged) {
                for (p, g) in p.params[range.clone()].iter_mut().zip(g) {
                    *p -= args.lr * g;
                }
            }
            p.steps += 1;
        }
        p.loss_sum += f64::from(loss[0]);
        p.loss_samples += f64::from(loss[1]);
        p.batch = i + 1;
        if args.log_steps && stepped.is_some() && w.rank() == 0 {
            log_step(p.steps, w.size());
        }
        if stepped.is_some() && w.rank() == 1 {
            hang_once(args.hang_once_at.as_deref(), p.steps);
        }
        if stepped.is_some() && args.commit_every > 0 && p.steps.is_multiple_of(args.commit_every) {
            st.commit(w)?;
        }
    }
    Ok(())
}

/// See `--hang-once-at`.
fn hang_once(at: Option<&[String]>, step: u64) {
    let Some([when, file]) = at else { return };
    if when.parse() != Ok(step) {
        return;
    }
    let new = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file);
    if new.is_ok() {
        eprintln!("train: hanging at step {step} (--hang-once-at)");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

fn log_step(step: u64, size: usize) {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let line = serde_json::json!({
        "event": "step",
        "step": step,
        "ms": ms as u64,
        "pid": std::process::id(),
        "world_size": size,
    });
    println!("{line}");
}

/// (mean loss, accuracy) on the held-out samples, each rank taking every
/// size-th one.
fn test(w: &Worker, args: &Args, data: &DataSet, params: &[f32]) -> Result<(f32, f32), Interrupt> {
    let held_out = (args.samples / 5).max(200);
    let mine = (args.samples + w.rank() as u64..args.samples + held_out).step_by(w.size());
    let (loss, right) = model::evaluate(params, mine.map(|i| data.sample(i)));
    let sums = [
        ("loss".to_owned(), f64::from(loss)),
        ("right".to_owned(), right as f64),
    ]
    .into();
    // The mean over ranks, times the ranks, is the sum over the held-out set.
    let avg = w.average_metrics(&sums)?;
    let total = |k: &str| avg[k] * w.size() as f64 / held_out as f64;
    Ok((total("loss") as f32, total("right") as f32))
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
