//! `elasticrun` on one machine: real jobs of `train`, failures, signals.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use integration_tests::{
    Running, assert_all_gone, descendants, dev_shm_leftovers, launch, shared_segments, start,
    train, workers,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const JOB: Duration = Duration::from_secs(60);

fn train_args(np: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["-np", np, train().to_str().unwrap()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn launch_train(np: &str, extra: &[&str]) -> Running {
    let args = train_args(np, extra);
    launch(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn training_reaches_the_same_accuracy_on_1_2_and_4_ranks() {
    let mut alone = Command::new(train());
    alone.args(["--epochs", "3"]);
    let alone = start(alone).finish(JOB);
    alone.expect_code(0);
    let reference = alone.done_event();
    assert_eq!(reference["world_size"], 1);
    for np in ["1", "2", "4"] {
        let run = launch_train(np, &["--epochs", "3"]).finish(JOB);
        run.expect_code(0);
        let done = run.done_event();
        assert_eq!(
            done["world_size"].as_u64(),
            Some(np.parse().unwrap()),
            "{done}"
        );
        assert_eq!(done["steps"], reference["steps"], "{done}");
        let (acc, acc1) = (
            done["accuracy"].as_f64().unwrap(),
            reference["accuracy"].as_f64().unwrap(),
        );
        assert!(
            (acc - acc1).abs() <= 0.005,
            "accuracy {acc} on {np} ranks vs {acc1} alone"
        );
        assert!(acc > 0.9, "training did not learn: accuracy {acc}");
        let (loss, loss1) = (
            done["loss"].as_f64().unwrap(),
            reference["loss"].as_f64().unwrap(),
        );
        assert!(
            (loss - loss1).abs() <= 1e-3 * loss1.max(1.0),
            "loss {loss} on {np} ranks vs {loss1} alone"
        );
        // Rank 0's lines carry horovodrun's prefix; the other ranks print
        // only their final line, with the same weights as rank 0's.
        let n: usize = np.parse().unwrap();
        for r in 1..n {
            let mine: Vec<&str> = run
                .stdout
                .lines()
                .filter_map(|l| l.strip_prefix(&format!("[{r}]<stdout>:")))
                .collect();
            assert_eq!(mine.len(), 1, "{}", run.stdout);
            let theirs: serde_json::Value = serde_json::from_str(mine[0]).unwrap();
            assert_eq!(theirs["rank"].as_u64(), Some(r as u64), "{theirs}");
            assert_eq!(theirs["state"], done["state"], "{theirs} vs {done}");
        }
        assert_eq!(done["resets"], 0, "{done}");
        assert_eq!(done["committed_steps"], done["steps"], "{done}");
    }
}

#[test]
fn aggregated_fp16_training_still_learns_with_half_the_steps() {
    let run = launch_train(
        "2",
        &[
            "--epochs",
            "3",
            "--backward-passes-per-step",
            "2",
            "--fp16-allreduce",
        ],
    )
    .finish(JOB);
    run.expect_code(0);
    let done = run.done_event();
    // 4096 samples in batches of 64, three epochs, two batches per step.
    assert_eq!(done["steps"], 96, "{done}");
    let acc = done["accuracy"].as_f64().unwrap();
    assert!(acc > 0.9, "training did not learn: accuracy {acc}");
}

#[test]
fn output_goes_to_per_rank_files_with_timestamps() {
    let dir = std::env::temp_dir().join(format!("elasticrun-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let script = "echo out-$ELASTICRUN_SLOT; echo err-$ELASTICRUN_SLOT >&2";
    let run = launch(&[
        "-np",
        "2",
        "--output-filename",
        dir.to_str().unwrap(),
        "--prefix-output-with-timestamp",
        "sh",
        "-c",
        script,
    ])
    .finish(JOB);
    run.expect_code(0);
    for rank in 0..2 {
        let out = std::fs::read_to_string(dir.join(format!("rank.{rank}/stdout"))).unwrap();
        let err = std::fs::read_to_string(dir.join(format!("rank.{rank}/stderr"))).unwrap();
        assert_eq!(out.trim(), format!("out-{rank}"));
        assert_eq!(err.trim(), format!("err-{rank}"));
        // Forwarded too, stamped and prefixed as horovodrun does:
        // "2026-11-22T02:50:14.786Z [1]<stdout>:out-1".
        let tail = format!("[{rank}]<stdout>:out-{rank}");
        let line = run
            .stdout
            .lines()
            .find(|l| l.ends_with(&tail))
            .unwrap_or_else(|| panic!("{}", run.stdout));
        let stamp = line.strip_suffix(&tail).unwrap().trim_end();
        assert!(
            stamp.len() >= 20 && stamp.starts_with("20") && stamp.ends_with('Z'),
            "no timestamp in {line}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `train` on `np` ranks for far longer than any test, once it trains: rank 0
/// has logged a step, so every rank has registered and taken part in a
/// collective. Hands back the job, its workers by rank, and every process
/// below elasticrun.
fn training_job(np: usize) -> (Running, Vec<i32>, BTreeSet<i32>) {
    let extra = ["--epochs", "1000", "--step-delay-ms", "20", "--log-steps"];
    let mut job = launch_train(&np.to_string(), &extra);
    let pids = workers(job.pid(), np, Duration::from_secs(30));
    job.wait_for_stdout_line("rank 0's first step", Duration::from_secs(30), |l| {
        l.contains("\"event\":\"step\"")
    });
    // Ranks on one host reach each other through shared memory.
    for &pid in &pids {
        assert_eq!(shared_segments(pid), np - 1, "segments of worker {pid}");
    }
    let all: BTreeSet<i32> = descendants(job.pid())
        .into_iter()
        .chain(pids.iter().copied())
        .collect();
    (job, pids, all)
}

#[test]
fn a_killed_worker_fails_the_job_naming_it_and_nothing_is_left() {
    let (job, pids, all) = training_job(3);
    kill(Pid::from_raw(pids[1]), Signal::SIGKILL).unwrap();
    // A bound against a hang only: the message below says the launcher saw
    // the child die (no heartbeat or collective timeout was waited out).
    let run = job.finish(Duration::from_secs(60));
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("rank 1 on localhost was killed by signal 9 (SIGKILL)"),
        "{}",
        run.stderr
    );
    assert_all_gone(&all, Duration::from_secs(10));
    assert_eq!(dev_shm_leftovers(), Vec::<String>::new());
}

/// With `--no-shared-memory` the ranks of one host stay on TCP.
#[test]
fn the_off_switch_keeps_one_hosts_ranks_on_tcp() {
    let extra = ["--epochs", "1000", "--step-delay-ms", "20", "--log-steps"];
    let mut args = vec!["--no-shared-memory".to_string()];
    args.extend(train_args("2", &extra));
    let mut job = launch(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let pids = workers(job.pid(), 2, Duration::from_secs(30));
    job.wait_for_stdout_line("rank 0's first step", Duration::from_secs(30), |l| {
        l.contains("\"event\":\"step\"")
    });
    for &pid in &pids {
        assert_eq!(shared_segments(pid), 0, "segments of worker {pid}");
    }
    kill(Pid::from_raw(job.pid()), Signal::SIGTERM).unwrap();
    assert_eq!(job.finish(JOB).status.code(), Some(143));
}

#[test]
fn a_failing_worker_reports_its_exit_code() {
    let run = launch(&[
        "-np",
        "2",
        "sh",
        "-c",
        "if [ $ELASTICRUN_SLOT = 1 ]; then exit 3; fi; exec sleep 30",
    ])
    .finish(JOB);
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("rank 1 on localhost exited with code 3"),
        "{}",
        run.stderr
    );
}

fn stop_with(sig: Signal, code: Option<i32>) {
    let (job, _, all) = training_job(2);
    kill(Pid::from_raw(job.pid()), sig).unwrap();
    let run = job.finish(Duration::from_secs(30));
    assert_eq!(run.status.code(), code, "{:?}\n{}", run.status, run.stderr);
    // SIGKILL gives elasticrun no chance to stop anyone: the workers notice the
    // lost coordinator themselves.
    assert_all_gone(&all, Duration::from_secs(10));
    assert_eq!(dev_shm_leftovers(), Vec::<String>::new());
}

#[test]
fn sigterm_stops_every_worker() {
    stop_with(Signal::SIGTERM, Some(143));
}

#[test]
fn sigint_stops_every_worker() {
    stop_with(Signal::SIGINT, Some(130));
}

#[test]
fn a_killed_elasticrun_leaves_no_worker_behind() {
    stop_with(Signal::SIGKILL, None);
}

/// Rank 0 links the runtime and registers, rank 1 never does: a program
/// that needs all of its ranks, so the start timeout ends the job naming the
/// missing slot. (A program none of whose ranks registers is supervised
/// instead: plain_programs.rs.)
#[test]
fn a_worker_that_never_registers_while_the_others_did_times_out_naming_its_slot() {
    let script = format!(
        r#"if [ "$RANK" = 0 ]; then exec {} --epochs 1000; fi; exec sleep 60"#,
        train().display()
    );
    let job = launch(&["-np", "2", "--start-timeout", "2", "sh", "-c", &script]);
    let pids: BTreeSet<i32> = workers(job.pid(), 2, Duration::from_secs(30))
        .into_iter()
        .collect();
    let run = job.finish(Duration::from_secs(30));
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("1 of 2 workers did not register within 2s: localhost slot 1"),
        "{}",
        run.stderr
    );
    assert_all_gone(&pids, Duration::from_secs(10));
}

#[test]
fn a_missing_program_is_a_clear_error() {
    let run = launch(&["-np", "2", "/nonexistent/train"]).finish(JOB);
    run.expect_code(1);
    assert!(
        run.stderr.contains("cannot start rank 0") && run.stderr.contains("/nonexistent/train"),
        "{}",
        run.stderr
    );
}

/// Every worker call on 4 ranks over two "hosts" (localhost and 127.0.0.1 are
/// both this machine), with the places and knobs each rank was given.
#[test]
fn every_worker_call_works_and_ranks_know_their_place() {
    let probe = env!("CARGO_BIN_EXE_worker_probe");
    let run = launch(&[
        "-H",
        "localhost:2,127.0.0.1:2",
        "--fusion-threshold-mb",
        "8",
        "--cycle-time-ms",
        "3",
        "--no-stall-check",
        probe,
    ])
    .finish(JOB);
    run.expect_code(0);
    let mut places: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l.split_once(":").unwrap().1).unwrap())
        .collect();
    places.sort_by_key(|p| p["rank"].as_u64());
    assert_eq!(places.len(), 4, "{}", run.stdout);
    for (r, p) in places.iter().enumerate() {
        let want = serde_json::json!({
            "rank": r, "size": 4, "local_rank": r % 2, "local_size": 2, "cross_rank": r / 2, "cross_size": 2,
        });
        for key in [
            "rank",
            "size",
            "local_rank",
            "local_size",
            "cross_rank",
            "cross_size",
        ] {
            assert_eq!(p[key], want[key], "{key} of rank {r}: {p}");
        }
        assert_eq!(p["secret_inherited"], false, "{p}");
        assert_eq!(
            p["knobs"]["tuning"]["fusion_threshold_bytes"],
            8 << 20,
            "{p}"
        );
        assert_eq!(p["knobs"]["tuning"]["cycle_time_us"], 3000, "{p}");
        assert_eq!(
            p["knobs"]["stall_warning_ms"],
            serde_json::Value::Null,
            "{p}"
        );
    }
}

/// Started with a low soft open-files limit, elasticrun raises it to the hard
/// limit, and its workers (which inherit it, and raise it themselves when ssh
/// starts them) run with the hard limit.
#[test]
fn the_open_files_limit_is_raised_to_the_hard_limit() {
    let probe = env!("CARGO_BIN_EXE_worker_probe");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -Sn 256 && exec \"$0\" \"$@\""])
        .arg(integration_tests::elasticrun())
        .args(["-np", "2", "--no-stall-check", probe]);
    let run = start(cmd).finish(JOB);
    run.expect_code(0);
    let limits: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l.split_once(":").unwrap().1).unwrap())
        .map(|p: serde_json::Value| p["open_files"].clone())
        .collect();
    assert_eq!(limits.len(), 2, "{}", run.stdout);
    for l in &limits {
        let (soft, hard) = (l[0].as_u64().unwrap(), l[1].as_u64().unwrap());
        assert!(hard > 256, "the hard limit is too low for this test: {l}");
        assert_eq!(soft, hard, "{l}");
    }
}

/// README's main command and the example of docs/launching.md print what
/// those pages show: rank 0's last line, JSON, as given there.
#[test]
fn the_documented_output_is_the_real_output() {
    let run = launch_train("2", &["--epochs", "5"]).finish(JOB);
    run.expect_code(0);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let shown = readme
        .lines()
        .find(|l| l.starts_with("[0]<stdout>:{"))
        .expect("README shows rank 0's last line");
    let launching = std::fs::read_to_string(root.join("docs/launching.md")).unwrap();
    let json = launching
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .expect("docs/launching.md shows a JSON line");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines.contains(&shown),
        "README shows {shown}; the run printed:\n{}",
        run.stdout
    );
    let prefixed = format!("[0]<stdout>:{json}");
    assert!(
        lines.contains(&prefixed.as_str()),
        "docs/launching.md shows {json}; the run printed:\n{}",
        run.stdout
    );
    // Rank 0's done line ends its output, whatever rank 1's place.
    let rank0: Vec<&&str> = lines.iter().filter(|l| l.starts_with("[0]")).collect();
    assert_eq!(rank0.last(), Some(&&shown), "{}", run.stdout);
}

#[test]
fn the_workers_runtime_logs_at_elasticruns_level() {
    let engine_lines = |level: Option<&str>| {
        let mut args: Vec<String> = level
            .map(|l| vec!["--log-level".to_string(), l.to_string()])
            .unwrap_or_default();
        args.extend(train_args("2", &["--epochs", "1"]));
        let run = launch(&args.iter().map(String::as_str).collect::<Vec<_>>()).finish(JOB);
        run.expect_code(0);
        let lines: Vec<String> = run
            .stderr
            .lines()
            .filter(|l| l.contains("engine shut down"))
            .map(str::to_owned)
            .collect();
        (lines, run.stderr)
    };
    // A debug line of the runtime in each worker, forwarded with its rank.
    let (lines, all) = engine_lines(Some("debug"));
    for rank in ["[0]", "[1]"] {
        assert!(
            lines.iter().any(|l| l.starts_with(rank)),
            "no debug line of rank {rank} in:\n{all}"
        );
    }
    // The default, warning, keeps it out.
    let (lines, all) = engine_lines(None);
    assert!(lines.is_empty(), "debug lines at the default level:\n{all}");
}

#[test]
fn sigusr1_to_elasticrun_reaches_every_worker_and_the_job_goes_on() {
    let program = r#"trap 'n=$((n+1)); echo "rank $RANK got USR1"' USR1
n=0; echo "rank $RANK ready"
while [ "$n" -lt 2 ]; do sleep 0.05; done
echo "rank $RANK done""#;
    let run = launch(&["-np", "2", "sh", "-c", program]);
    let count = |what: &str| {
        run.stdout_so_far()
            .lines()
            .filter(|l| l.ends_with(what))
            .count()
    };
    for n in 1..=2 {
        integration_tests::wait_for("every worker ready", JOB, || {
            (count(" ready") == 2).then_some(())
        });
        kill(Pid::from_raw(run.pid()), Signal::SIGUSR1).expect("signal elasticrun");
        integration_tests::wait_for(&format!("warning {n} at every worker"), JOB, || {
            (count(" got USR1") == 2 * n).then_some(())
        });
    }
    let run = run.finish(JOB);
    run.expect_code(0);
    assert!(
        run.stderr.contains("SIGUSR1 passed on to 2 workers"),
        "{}",
        run.stderr
    );
}
