//! `--metrics-address`: a real Prometheus (Debian's, started by the test)
//! scrapes an elastic job of `train` through a `kill -9` and a host leaving
//! and coming back, and its query API then shows the reset by failure, the
//! recovery histogram's count, and the world size going down and back up;
//! `promtool check metrics` passes on the exposition.

use std::time::Duration;

use integration_tests::elastic::{Job, Scratch, Train};
use integration_tests::prometheus::{Prometheus, get, promtool_check};
use integration_tests::wait_for;

/// 600 steps of about 25 ms: long enough for every event and Prometheus's
/// scrapes of each (the status page's and the stragglers' tests too).
pub(crate) const LONG: Train = Train {
    epochs: 60,
    samples: 640,
    step_delay_ms: 20,
    commit_every: 4,
};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn prometheus_sees_a_reset_a_recovery_and_the_world_size_move() {
    let scratch = Scratch::new("metrics");
    scratch.set_hosts("localhost:3\n");
    let discovery = scratch.file_discovery();
    let job = Job::start(
        &[
            "--host-discovery-script",
            &discovery,
            "--min-np",
            "2",
            "--max-np",
            "3",
            "--replacement-wait",
            "30",
            "--metrics-address",
            "127.0.0.1:0",
        ],
        &LONG,
    );
    let addr = job.metrics_address(LIMIT);
    let Some(prom) = Prometheus::start("job", addr) else {
        return;
    };
    let (code, exposition) = get(addr, "/metrics").expect("GET /metrics");
    assert_eq!(code, 200, "{exposition}");
    promtool_check(&exposition).unwrap_or_else(|e| panic!("promtool: {e}\n{exposition}"));
    let seen = |q: &str, ok: &dyn Fn(f64) -> bool| {
        wait_for(&format!("Prometheus to show {q}"), LIMIT, || {
            prom.query(q).filter(|&v| ok(v)).map(|_| ())
        });
    };
    seen("elasticrun_world_size", &|v| v == 3.0);
    seen(r#"elasticrun_workers{state="training"}"#, &|v| v == 3.0);
    // A worker killed: a reset by failure, and a recovery.
    job.wait_for_step_at_least(10);
    let victim = job.wait_for_workers(3)[1].pid;
    job.kill(victim);
    job.wait_for_stderr("generation 2 running", LIMIT);
    seen(r#"elasticrun_resets_total{cause="failure"}"#, &|v| v >= 1.0);
    seen("elasticrun_recovery_seconds_count", &|v| v >= 1.0);
    seen("elasticrun_worker_failures_total", &|v| v >= 1.0);
    // A slot leaving and coming back: the world size down and up again.
    scratch.set_hosts("localhost:2\n");
    job.wait_for_step("a step on 2 ranks", |s| s.world_size == 2);
    seen("elasticrun_world_size", &|v| v == 2.0);
    scratch.set_hosts("localhost:3\n");
    job.wait_for_step("a step on 3 ranks again", |s| s.world_size == 3);
    seen("elasticrun_world_size", &|v| v == 3.0);
    seen("min_over_time(elasticrun_world_size[10m])", &|v| v == 2.0);
    seen(r#"elasticrun_resets_total{cause="hosts_removed"}"#, &|v| {
        v >= 1.0
    });
    seen(r#"elasticrun_resets_total{cause="hosts_added"}"#, &|v| {
        v >= 1.0
    });
    seen(r#"elasticrun_job_state{state="training"}"#, &|v| v == 1.0);
    seen(r#"elasticrun_time_seconds{part="recovery"}"#, &|v| v > 0.0);
    seen(r#"elasticrun_time_seconds{part="startup"}"#, &|v| v > 0.0);
    seen("elasticrun_goodput_ratio", &|v| v > 0.0 && v < 1.0);
    check_ranks(&prom);
    if std::env::var_os("ELASTIC_TEST_SHOW").is_some() {
        eprintln!("{}", prom.log());
    }
    let run = job.finish(Duration::from_secs(120));
    run.expect_code(0);
    check_goodput_line(&run.stderr);
}

/// The goodput line at the end of the job: the parts add up to the wall
/// time, and the share is training's.
fn check_goodput_line(stderr: &str) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("elasticrun: goodput "))
        .unwrap_or_else(|| panic!("no goodput line:\n{stderr}"));
    let numbers: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.parse().ok())
        .collect();
    // share, training, wall, start-up, waiting, recovery, rolled back, stalls
    let [
        share,
        training,
        wall,
        startup,
        waiting,
        recovery,
        rolled,
        stalls,
    ] = numbers[..]
    else {
        panic!("{line}");
    };
    assert!(training > 0.0 && recovery > 0.0 && startup > 0.0, "{line}");
    let sum = training + startup + waiting + recovery + rolled + stalls;
    assert!((sum - wall).abs() <= 0.05, "{line}");
    assert!((share - 100.0 * training / wall).abs() <= 1.0, "{line}");
}

/// Every rank's progress, from its heartbeats, as Prometheus sees it.
fn check_ranks(prom: &Prometheus) {
    for rank in 0..3 {
        for name in [
            "rank_steps_per_second",
            "rank_step_seconds",
            "rank_collective_bytes_per_second",
            "rank_collective_wait_ratio",
        ] {
            let q = format!("elasticrun_{name}{{rank=\"{rank}\"}}");
            wait_for(&format!("Prometheus to show {q} above 0"), LIMIT, || {
                prom.query(&q).filter(|&v| v > 0.0).map(|_| ())
            });
        }
    }
}
