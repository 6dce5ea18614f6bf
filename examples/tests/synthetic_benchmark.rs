//! synthetic_benchmark run on its own (a world of one, no elasticrun): the
//! JSON summary, the workloads, the simulated compute time, and refused
//! arguments. Runs under elasticrun are in integration-tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;
use std::time::Duration;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_synthetic_benchmark");

/// Runs the benchmark with `args`; fails the test after `limit`.
fn run(args: &[&str], limit: Duration) -> Output {
    common::run(BIN, args, limit)
}

/// The summary line of a successful run.
fn summary(args: &[&str]) -> Value {
    let out = run(args, Duration::from_secs(120));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{args:?}: {}\n{stderr}", out.status);
    let line = stdout
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in\n{stdout}"));
    serde_json::from_str(line).expect("the summary is JSON")
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn alone_it_averages_and_reports_a_world_of_one() {
    let v = summary(&[
        "--num-tensors",
        "10",
        "--tensor-bytes",
        "4K",
        "--steps",
        "3",
    ]);
    assert_eq!(v["world_size"], 1, "{v}");
    assert_eq!(v["model"], "uniform");
    assert_eq!(v["dtype"], "f32");
    assert_eq!(v["num_tensors"], 10);
    assert_eq!(v["total_bytes"], 10 * 4096);
    assert_eq!(v["steps"], 3);
    assert_eq!(v["checked"], true);
    let sps = f(&v, "steps_per_sec");
    assert!(sps > 0.0 && sps.is_finite(), "{v}");
    let bps = f(&v, "bytes_per_sec");
    assert!((bps - sps * 40960.0).abs() <= 1e-6 * bps, "{v}");
    // The engine's defaults are in effect, and it ran every tensor of every
    // step (3 warm-up + 3 timed).
    assert_eq!(v["knobs"]["fusion_threshold_bytes"], 64 << 20, "{v}");
    assert_eq!(v["knobs"]["cycle_time_us"], 1000, "{v}");
    assert!(v["engine"]["tensors"].as_u64().unwrap() >= 60, "{v}");
}

#[test]
fn resnet50_is_the_default_workload() {
    let v = summary(&["--steps", "1", "--warmup-steps", "0"]);
    assert_eq!(v["model"], "resnet50", "{v}");
    assert_eq!(v["num_tensors"], 161);
    assert_eq!(v["total_bytes"], 25_557_032 * 4);
    let v = summary(&["--steps", "1", "--warmup-steps", "0", "--fp16-allreduce"]);
    assert_eq!(v["dtype"], "f16", "{v}");
    assert_eq!(v["total_bytes"], 25_557_032 * 2);
}

#[test]
fn every_step_lasts_at_least_the_compute_time() {
    let v = summary(&[
        "--num-tensors",
        "4",
        "--tensor-bytes",
        "1K",
        "--steps",
        "2",
        "--warmup-steps",
        "0",
        "--compute-ms",
        "30",
    ]);
    assert_eq!(v["compute_ms"], 30.0);
    assert!(v["step_ms"]["min"].as_f64().unwrap() >= 30.0, "{v}");
    assert!(f(&v, "steps_per_sec") <= 1000.0 / 30.0, "{v}");
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    for (args, says) in [
        (&["--num-tensors", "3"][..], "--tensor-bytes"),
        (&["--tensor-bytes", "4K"][..], "--num-tensors"),
        (
            &["--num-tensors", "3", "--tensor-bytes", "12Q"][..],
            "suffix",
        ),
        (
            &["--num-tensors", "3", "--tensor-bytes", "6"][..],
            "multiple of 4",
        ),
        (
            &["--num-tensors", "0", "--tensor-bytes", "4K"][..],
            "--num-tensors",
        ),
        (&["--steps", "0"][..], "--steps"),
        (&["--compute-ms=-5"][..], "--compute-ms"),
    ] {
        let out = run(args, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
