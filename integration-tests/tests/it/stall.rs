//! The stall inspector on real jobs: `worker_probe --stall RANK SECONDS` holds
//! one rank's allreduce back while the others wait on it.

use std::collections::BTreeSet;
use std::time::Duration;

use integration_tests::{Finished, assert_all_gone, descendants, launch, workers};

const PROBE: &str = env!("CARGO_BIN_EXE_worker_probe");
/// Bound on a job whose late rank sleeps only a few seconds.
const JOB: Duration = Duration::from_secs(60);

/// `elasticrun OPTIONS -np N worker_probe --stall LATE SECONDS`.
fn stall_job(np: usize, options: &[&str], late: usize, seconds: u32) -> Vec<String> {
    let mut args: Vec<String> = options.iter().map(|s| s.to_string()).collect();
    args.extend(["-np".into(), np.to_string(), PROBE.into()]);
    args.extend(["--stall".into(), late.to_string(), seconds.to_string()]);
    args
}

fn run(args: &[String]) -> integration_tests::Running {
    launch(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The log lines elasticrun wrote at WARN about stalls.
fn warnings(run: &Finished) -> Vec<&str> {
    run.stderr
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("stall: "))
        .collect()
}

#[test]
fn a_stall_is_warned_about_naming_the_late_rank_and_ends_the_job_at_the_shutdown_time() {
    // Rank 1 would sleep for two minutes: only the inspector can end this job
    // within the bound.
    let args = stall_job(
        3,
        &[
            "--stall-check-warning-time-seconds",
            "1",
            "--stall-check-shutdown-time-seconds",
            "3",
        ],
        1,
        120,
    );
    let job = run(&args);
    let pids = workers(job.pid(), 3, Duration::from_secs(20));
    let all: BTreeSet<i32> = descendants(job.pid())
        .into_iter()
        .chain(pids.iter().copied())
        .collect();
    let run = job.finish(JOB);
    run.expect_code(1);
    let stalled = "stall: tensor grad.stalled has waited";
    let waits_on = "on rank 1 (localhost slot 1); ranks 0, 2 submitted it";
    let warned = warnings(&run);
    assert!(
        warned
            .iter()
            .any(|l| l.contains(stalled) && l.contains(waits_on)),
        "no warning naming grad.stalled and rank 1 in\n{}",
        run.stderr
    );
    let ended = run
        .stderr
        .lines()
        .find(|l| l.contains("past the stall shutdown time of 3 s"))
        .unwrap_or_else(|| panic!("the job did not end on the stall:\n{}", run.stderr));
    assert!(
        ended.starts_with("elasticrun: ")
            && ended.contains(stalled)
            && ended.contains(waits_on)
            && ended.ends_with("stopping every worker"),
        "{ended}"
    );
    assert_all_gone(&all, Duration::from_secs(10));
}

#[test]
fn without_a_shutdown_time_a_stall_only_warns_and_the_job_finishes() {
    let args = stall_job(2, &["--stall-check-warning-time-seconds", "1"], 0, 3);
    let run = run(&args).finish(JOB);
    run.expect_code(0);
    let warned = warnings(&run);
    assert!(
        warned
            .iter()
            .any(|l| l.contains("stall: tensor grad.stalled has waited")
                && l.contains("on rank 0 (localhost slot 0); rank 1 submitted it")),
        "no warning naming grad.stalled and rank 0 in\n{}",
        run.stderr
    );
    assert_eq!(
        run.stdout
            .lines()
            .filter(|l| l.contains("\"rank\""))
            .count(),
        2,
        "both ranks finish the stalled allreduce:\n{}",
        run.stdout
    );
}

#[test]
fn no_stall_check_turns_the_inspector_off() {
    let args = stall_job(
        2,
        &[
            "--no-stall-check",
            "--stall-check-warning-time-seconds",
            "1",
        ],
        1,
        3,
    );
    let run = run(&args).finish(JOB);
    run.expect_code(0);
    assert!(
        !run.stderr.contains("stall"),
        "stall reported with the check off:\n{}",
        run.stderr
    );
    assert_eq!(
        run.stdout
            .lines()
            .filter(|l| l.contains("\"rank\""))
            .count(),
        2,
        "{}",
        run.stdout
    );
}
