//! `elasticrun -np 2 synthetic_benchmark`: the engine benchmark across real
//! processes, its summary line, and the engine knobs reaching it.

use std::time::Duration;

use integration_tests::{Finished, binary, launch};
use serde_json::Value;

const JOB: Duration = Duration::from_secs(120);

fn bench(elasticrun_args: &[&str], bench_args: &[&str]) -> Finished {
    let exe = binary("synthetic_benchmark");
    let mut args: Vec<&str> = elasticrun_args.to_vec();
    args.push(exe.to_str().unwrap());
    args.extend_from_slice(bench_args);
    launch(&args).finish(JOB)
}

const SMALL: [&str; 6] = [
    "--num-tensors",
    "10",
    "--tensor-bytes",
    "4K",
    "--steps",
    "3",
];

fn u(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

#[test]
fn two_ranks_average_every_tensor_and_rank_0_reports() {
    let run = bench(&["-np", "2"], &SMALL);
    run.expect_code(0);
    let v = run.done_event();
    assert_eq!(v["world_size"], 2, "{v}");
    assert_eq!(v["num_tensors"], 10);
    assert_eq!(v["total_bytes"], 40960);
    assert_eq!(v["steps"], 3);
    assert_eq!(v["checked"], true);
    let sps = v["steps_per_sec"].as_f64().unwrap();
    let bps = v["bytes_per_sec"].as_f64().unwrap();
    assert!(sps > 0.0 && sps.is_finite(), "{v}");
    assert!((bps - sps * 40960.0).abs() <= 1e-6 * bps, "{v}");
    // elasticrun's defaults reached the engine, and fusion packed the ten
    // tensors submitted together into fewer collectives.
    assert_eq!(u(&v, &["knobs", "fusion_threshold_bytes"]), 64 << 20, "{v}");
    assert_eq!(u(&v, &["knobs", "cycle_time_us"]), 1000, "{v}");
    let (collectives, tensors) = (
        u(&v, &["engine", "collectives"]),
        u(&v, &["engine", "tensors"]),
    );
    assert!(tensors >= 60, "{v}");
    assert!(collectives < tensors, "no fusion: {v}");
    // Only rank 0 prints.
    assert!(
        run.stdout.lines().all(|l| l.starts_with("[0]<stdout>:")),
        "{}",
        run.stdout
    );
}

#[test]
fn with_fusion_off_every_tensor_is_its_own_collective() {
    let run = bench(
        &[
            "-np",
            "2",
            "--fusion-threshold-mb",
            "0",
            "--cycle-time-ms",
            "0.5",
        ],
        &SMALL,
    );
    run.expect_code(0);
    let v = run.done_event();
    assert_eq!(u(&v, &["knobs", "fusion_threshold_bytes"]), 0, "{v}");
    assert_eq!(u(&v, &["knobs", "cycle_time_us"]), 500, "{v}");
    assert_eq!(
        u(&v, &["engine", "collectives"]),
        u(&v, &["engine", "tensors"]),
        "{v}"
    );
}

#[test]
fn half_precision_resnet50_steps_with_compute_overlap() {
    let run = bench(
        &["-np", "2"],
        &[
            "--fp16-allreduce",
            "--steps",
            "2",
            "--warmup-steps",
            "1",
            "--compute-ms",
            "20",
        ],
    );
    run.expect_code(0);
    let v = run.done_event();
    assert_eq!(
        (v["model"].as_str(), v["dtype"].as_str()),
        (Some("resnet50"), Some("f16"))
    );
    assert_eq!(v["num_tensors"], 161);
    assert_eq!(v["total_bytes"], 25_557_032 * 2);
    assert!(v["step_ms"]["min"].as_f64().unwrap() >= 20.0, "{v}");
}
