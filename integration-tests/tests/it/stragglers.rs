//! Stragglers: one worker of an elastic job slowed by SIGSTOP bursts (a
//! rank that computes slowly) is named a straggler from the heartbeats and,
//! with `--straggler-action replace`, taken out with its host blacklisted;
//! training goes on without it and the job ends well; `/metrics` counts
//! the straggler and the reset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use integration_tests::elastic::{Job, Scratch};
use integration_tests::prometheus::{get, sample};
use integration_tests::wait_for;

use super::metrics::LONG;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(90);

/// Stops `pid` for 120 ms of every 180 until `done`, then lets it go.
fn bursts(pid: i32, done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let pid = Pid::from_raw(pid);
        while !done.load(Ordering::Relaxed) {
            if kill(pid, Signal::SIGSTOP).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(120));
            let _ = kill(pid, Signal::SIGCONT);
            std::thread::sleep(Duration::from_millis(60));
        }
        let _ = kill(pid, Signal::SIGCONT);
    })
}

#[test]
fn a_slowed_rank_is_named_a_straggler_and_replaced() {
    let scratch = Scratch::new("straggler");
    // 127.0.0.1 is this machine under another name: a host of its own.
    scratch.set_hosts("localhost:2\n127.0.0.1:1\n");
    let discovery = scratch.file_discovery();
    let job = Job::start(
        &[
            "--host-discovery-script",
            &discovery,
            "--min-np",
            "2",
            "--max-np",
            "3",
            "--straggler-action",
            "replace",
            "--straggler-steps",
            "30",
            "--metrics-address",
            "127.0.0.1:0",
        ],
        &LONG,
    );
    let addr = job.metrics_address(LIMIT);
    job.wait_for_step_at_least(5);
    let slow = wait_for("the worker on 127.0.0.1", LIMIT, || {
        job.workers().into_iter().find(|w| w.host == "127.0.0.1")
    });
    let done = Arc::new(AtomicBool::new(false));
    let slowing = bursts(slow.pid, done.clone());
    let named = job.wait_for_stderr("is a straggler", LIMIT);
    done.store(true, Ordering::Relaxed);
    let _ = slowing.join();
    assert!(named.contains("on 127.0.0.1 slot 0"), "{named}");
    assert!(named.contains("taking it out"), "{named}");
    job.wait_for_stderr("host 127.0.0.1 is blacklisted", LIMIT);
    let on_two = job.wait_for_step("a step on 2 ranks", |s| s.world_size == 2);
    assert!(on_two.step < LONG.expected_steps(), "replaced too late");
    wait_for("the straggler and its reset on /metrics", LIMIT, || {
        let (_, text) = get(addr, "/metrics").ok()?;
        let resets = sample(&text, r#"elasticrun_resets_total{cause="straggler"}"#)?;
        let named = sample(&text, "elasticrun_stragglers_total")?;
        (resets == 1.0 && named >= 1.0).then_some(())
    });
    let run = job.finish(Duration::from_secs(120));
    run.expect_code(0);
    let healthy = run.stderr.lines().filter(|l| l.contains("is a straggler"));
    assert_eq!(healthy.count(), 1, "only the slowed rank:\n{}", run.stderr);
}
