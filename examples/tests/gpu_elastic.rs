//! gpu_elastic on its own (a world of one): without a GPU it exits 2 with
//! the probe's one line; with one it runs its steps, checked, and prints its
//! `done` line. Its runs under elasticrun, with a worker killed mid-run, are
//! in scripts/gpu_checks.sh, which needs a GPU machine (docs/gpu.md).
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_gpu_elastic");

#[test]
fn alone_it_runs_its_checked_steps_or_says_what_is_missing() {
    let args = ["--steps", "5", "--elements", "1000", "--print-every", "2"];
    let out = common::run(BIN, &args, Duration::from_secs(60));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    match gpu::probe() {
        Err(e) => {
            println!("no GPU here ({e}): checking the refusal");
            assert_eq!(out.status.code(), Some(2), "{stderr}");
            assert_eq!(stderr.trim(), format!("gpu_elastic: {e}"));
            assert!(stdout.is_empty(), "{stdout}");
        }
        Ok(_) => {
            assert!(out.status.success(), "{}\n{stderr}", out.status);
            // NCCL may print lines of its own.
            let lines: Vec<Value> = stdout
                .lines()
                .filter(|l| l.starts_with('{'))
                .map(|l| serde_json::from_str(l).expect("JSON lines"))
                .collect();
            let steps: Vec<u64> = lines
                .iter()
                .filter(|l| l["event"] == "step")
                .map(|l| l["step"].as_u64().unwrap())
                .collect();
            assert_eq!(steps, [2, 4]);
            let done = lines.last().expect("a done line");
            assert_eq!(done["event"], "done");
            assert_eq!((&done["steps"], &done["resets"]), (&5.into(), &0.into()));
            assert_eq!(done["world_size"], 1);
        }
    }
}

#[test]
fn a_print_interval_of_zero_is_refused() {
    let out = common::run(BIN, &["--print-every", "0"], Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--print-every"), "{err}");
}
