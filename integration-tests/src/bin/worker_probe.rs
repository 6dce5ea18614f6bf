//! Exercises every call of the worker runtime under elasticrun and checks each
//! result against what the ranks' places imply; prints one JSON line per rank
//! (its place, the knobs it was given and the CPUs its engine thread may run
//! on) or exits 1 naming the first mismatch.
//!
//! `worker_probe --stall RANK SECONDS` instead allreduces one tensor named
//! `grad.stalled`, which rank RANK submits only after sleeping SECONDS: the
//! other ranks wait on it (a stall for the coordinator's inspector).
//!
//! `worker_probe --collectives` instead runs allreduce and allgather of many
//! sizes, alone and fused ([`integration_tests::collectives_check`]); the JSON
//! line then says which path (flat or hierarchical) each ran on.
#![allow(clippy::cast_precision_loss)]

use std::process::ExitCode;
use std::time::Duration;

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

    // Of another length on every rank: only root's is known to the others.
    let cfg = Config {
        name: format!("from rank {r}"),
        layers: vec![r as u32; 3 + r],
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

/// The tensor `--stall` holds back.
const STALLED: &str = "grad.stalled";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Probe,
    Stall { late: usize, sleep: Duration },
    Collectives,
}

fn mode(args: &[String]) -> Result<Mode, String> {
    match args {
        [] => Ok(Mode::Probe),
        [flag] if flag == "--collectives" => Ok(Mode::Collectives),
        [flag, rank, secs] if flag == "--stall" => {
            let late = rank.parse().map_err(|e| format!("--stall RANK: {e}"))?;
            let sleep = secs
                .parse()
                .ok()
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .ok_or_else(|| format!("--stall SECONDS: {secs:?} is not a duration"))?;
            Ok(Mode::Stall { late, sleep })
        }
        _ => Err("usage: worker_probe [--stall RANK SECONDS | --collectives]".into()),
    }
}

/// Every rank allreduces `STALLED`; rank `late` first sleeps `sleep`.
fn stall(w: &Worker, late: usize, sleep: Duration) -> Result<(), String> {
    if w.rank() == late {
        std::thread::sleep(sleep);
    }
    let h = w.allreduce_async(Some(STALLED), vec![1.0f32; 4], ReduceOp::Sum);
    let got = h.wait().map_err(|e| e.to_string())?;
    check(
        "the stalled allreduce",
        got.data.iter().all(|&x| x == w.size() as f32),
    )
}

/// This process's open-files limit, `[soft, hard]`.
fn open_files() -> Option<[u64; 2]> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, hard)| [soft, hard])
}

/// Whether a program this one starts finds the job secret in its environment.
fn secret_inherited() -> Option<bool> {
    let out = std::process::Command::new("env").output().ok()?;
    let var = format!("{}=", control::env::SECRET);
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with(&var)),
    )
}

/// How many UDP sockets this process holds (a QUIC data plane binds one):
/// its sockets' inodes found in the system's UDP tables.
fn udp_sockets() -> usize {
    let ours: std::collections::HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    ["/proc/self/net/udp", "/proc/self/net/udp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .flat_map(|t| {
            t.lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().nth(9).map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .filter(|inode| ours.contains(inode))
        .count()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = match mode(&args) {
        Ok(m) => m,
        Err(why) => {
            eprintln!("worker_probe: {why}");
            return ExitCode::from(2);
        }
    };
    let w = match worker::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("worker_probe: {e}");
            return ExitCode::FAILURE;
        }
    };
    let run = match mode {
        Mode::Probe => probe(&w),
        Mode::Stall { late, sleep } => stall(&w, late, sleep),
        Mode::Collectives => integration_tests::collectives_check::run(&w),
    };
    if let Err(why) = run {
        eprintln!("worker_probe: rank {}: {why}", w.rank());
        return ExitCode::FAILURE;
    }
    let line = serde_json::json!({
        "rank": w.rank(), "size": w.size(),
        "local_rank": w.local_rank(), "local_size": w.local_size(),
        "cross_rank": w.cross_rank(), "cross_size": w.cross_size(),
        "knobs": w.knobs(),
        "secret_inherited": secret_inherited(),
        "udp_sockets": udp_sockets(),
        "shm_segments": integration_tests::shared_segments(std::process::id() as i32),
        "open_files": open_files(),
        "engine_cpus": w.engine_thread_cpus().ok(),
        "paths": {
            "allreduce": w.collective_paths().allreduce.to_string(),
            "allgather": w.collective_paths().allgather.to_string(),
        },
    });
    println!("{line}");
    w.shutdown();
    ExitCode::SUCCESS
}
