//! Exercises every call of the worker runtime under elasticrun and checks each
//! result against what the ranks' places imply; prints one JSON line per rank
//! (its place and the knobs it was given) or exits 1 naming the first mismatch.
#![allow(clippy::cast_precision_loss)]

use std::process::ExitCode;

use serde::{Deserialize, Serialize};
use worker::{ReduceOp, Worker};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Config {
    name: String,
    layers: Vec<u32>,
}

fn check(what: &str, ok: bool) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what} gave a wrong result"))
    }
}

fn probe(w: &Worker) -> Result<(), String> {
    let (r, n) = (w.rank(), w.size());
    let e = |e: worker::Error| e.to_string();

    let mut v = vec![(r + 1) as f32; 1000];
    w.allreduce(&mut v, ReduceOp::Sum).map_err(e)?;
    check(
        "allreduce sum",
        v.iter().all(|&x| x == (n * (n + 1) / 2) as f32),
    )?;
    let mut m = [r as i64 * 7];
    w.allreduce(&mut m, ReduceOp::Max).map_err(e)?;
    check("allreduce max", m[0] == (n as i64 - 1) * 7)?;

    let gathered = w.allgather(&vec![r as u8; r + 1]).map_err(e)?;
    let want: Vec<u8> = (0..n).flat_map(|i| vec![i as u8; i + 1]).collect();
    check("allgather", gathered == want)?;

    let root = n - 1;
    let mut b = vec![r as f64; 33];
    w.broadcast(&mut b, root).map_err(e)?;
    check("broadcast", b.iter().all(|&x| x == root as f64))?;

    let splits: Vec<usize> = (0..n).map(|j| j + 1).collect();
    let input: Vec<i32> = (0..n)
        .flat_map(|j| vec![(r * 100 + j) as i32; j + 1])
        .collect();
    let (got, counts) = w.alltoall(&input, &splits).map_err(e)?;
    let want: Vec<i32> = (0..n)
        .flat_map(|i| vec![(i * 100 + r) as i32; r + 1])
        .collect();
    check("alltoall", got == want && counts == vec![r + 1; n])?;

    let len = 10 * n + 1;
    let input: Vec<f32> = (0..len).map(|i| (i * (r + 1)) as f32).collect();
    let mine = w.reducescatter(&input, ReduceOp::Sum).map_err(e)?;
    let start: usize = (0..r).map(|i| len / n + usize::from(i < len % n)).sum();
    let want: Vec<f32> = (start..start + mine.len())
        .map(|i| (i * n * (n + 1) / 2) as f32)
        .collect();
    check(
        "reducescatter",
        mine == want && mine.len() == len / n + usize::from(r < len % n),
    )?;

    w.barrier().map_err(e)?;

    let cfg = Config {
        name: format!("from rank {r}"),
        layers: vec![r as u32; 3],
    };
    let got: Config = w.broadcast_object(&cfg, 0).map_err(|e| e.to_string())?;
    check(
        "broadcast_object",
        got == Config {
            name: "from rank 0".into(),
            layers: vec![0; 3],
        },
    )
}

fn main() -> ExitCode {
    let w = match worker::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("worker_probe: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(why) = probe(&w) {
        eprintln!("worker_probe: rank {}: {why}", w.rank());
        return ExitCode::FAILURE;
    }
    let line = serde_json::json!({
        "rank": w.rank(), "size": w.size(),
        "local_rank": w.local_rank(), "local_size": w.local_size(),
        "cross_rank": w.cross_rank(), "cross_size": w.cross_size(),
        "knobs": w.knobs(),
    });
    println!("{line}");
    w.shutdown();
    ExitCode::SUCCESS
}
