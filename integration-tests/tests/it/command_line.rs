//! `elasticrun`'s command line as horovodrun users type it, on real jobs:
//! Horovod's README command line runs, and the library options reach the
//! workers (`--gloo-timeout-seconds` ends a hung peer's collective in its
//! time, `--thread-affinity` pins each slot's engine thread). The usage
//! errors are tested with the binary alone, in coordinator/tests/cli.rs.

use std::time::{Duration, Instant};

use integration_tests::{launch, train, workers};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const JOB: Duration = Duration::from_secs(60);

/// Horovod's README line (`horovodrun --gloo -np 2 python train.py`), the
/// program's own options passed through untouched.
#[test]
fn horovods_readme_command_line_runs() {
    let train = train();
    let run = launch(&[
        "--gloo",
        "-np",
        "2",
        train.to_str().unwrap(),
        "--epochs",
        "1",
        "--samples",
        "256",
    ])
    .finish(JOB);
    run.expect_code(0);
    assert_eq!(run.done_event()["epochs"], 1, "{}", run.stdout);
}

/// A stopped peer: without `--gloo-timeout-seconds` the others wait 60 s on
/// it (elasticrun's 15 s heartbeat check ends the job first); with 2 s, rank
/// 0's collective fails after 2 s, naming the timeout.
#[test]
fn gloo_timeout_seconds_ends_a_collective_on_a_hung_peer() {
    let mut job = launch(&[
        "--gloo-timeout-seconds",
        "2",
        "-np",
        "2",
        train().to_str().unwrap(),
        "--epochs",
        "1000",
        "--step-delay-ms",
        "20",
        "--log-steps",
    ]);
    let pids = workers(job.pid(), 2, Duration::from_secs(30));
    job.wait_for_stdout_line("rank 0's first step", Duration::from_secs(30), |l| {
        l.contains("\"event\":\"step\"")
    });
    kill(Pid::from_raw(pids[1]), Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    let run = job.finish(JOB);
    let took = stopped.elapsed();
    run.expect_code(1);
    assert!(
        run.stderr.contains("timed out after 2s waiting on rank 1"),
        "{}",
        run.stderr
    );
    // 2 s, then 3 s for the stopped worker to be killed; the heartbeat check
    // would have taken 15 s.
    assert!(took < Duration::from_secs(12), "{took:?}\n{}", run.stderr);
}

/// The CPUs this process may run on, from /proc (`0-3,8`).
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    list.split(',')
        .flat_map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()
        })
        .collect()
}

/// Slot N's worker pins its engine thread to the Nth CPU of the list.
#[test]
fn thread_affinity_pins_each_slots_engine_thread() {
    let cpus = allowed_cpus();
    // Two CPUs, in reverse order when there are two, so that slot order shows.
    let list = [*cpus.last().unwrap(), cpus[0]];
    let arg = format!("{},{}", list[0], list[1]);
    let probe = env!("CARGO_BIN_EXE_worker_probe");
    let run = launch(&[
        "--thread-affinity",
        &arg,
        "-np",
        "2",
        "--no-stall-check",
        probe,
    ])
    .finish(JOB);
    run.expect_code(0);
    let mut seen = 0;
    for line in run.stdout.lines() {
        let json: serde_json::Value =
            serde_json::from_str(line.split_once(':').unwrap().1).unwrap();
        let rank = json["rank"].as_u64().unwrap() as usize;
        assert_eq!(
            json["engine_cpus"],
            serde_json::json!([list[rank]]),
            "rank {rank} (slot {rank}): {json}"
        );
        seen += 1;
    }
    assert_eq!(seen, 2, "{}", run.stdout);
    // Without it, nothing is pinned.
    let run = launch(&["-np", "1", "--no-stall-check", probe]).finish(JOB);
    run.expect_code(0);
    let json: serde_json::Value =
        serde_json::from_str(run.stdout.split_once(':').unwrap().1.trim()).unwrap();
    assert_eq!(json["engine_cpus"], serde_json::json!(cpus), "{json}");
}
