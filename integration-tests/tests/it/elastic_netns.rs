//! Elastic chaos with hosts that are network namespaces (see
//! [`integration_tests::netns`]): elasticrun runs in a coordinator namespace
//! and starts `train` over ssh on two hosts of two slots each, found through
//! `discovery-scripts/hosts-from-file.sh`. Mid-run one host leaves: first
//! cleanly (taken out of the discovery file), by vanishing from the network
//! (its link taken down on the bridge) and the file at once, as a cluster
//! manager would report it, or by vanishing from the network only. Either way the job must go on with the other host
//! from where it was and exit 0, every rank of the last generation ending with
//! the same weights after the full number of steps.
//!
//! Needs root, `ip netns` and OpenSSH; skipped (with a note on stderr)
//! otherwise, unless `ELASTICRUN_REQUIRE_NETNS` is set (`.ci/run` sets it):
//! then a test that cannot make its namespaces fails.

use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::needs::Need;
use integration_tests::netns::{Cluster, Line, Watched, event, render, write_atomically};
use integration_tests::train;

const EPOCHS: u64 = 3;
const SAMPLES: u64 = 2048;
const STEP_DELAY_MS: &str = "40";
/// The steps of the whole run: `EPOCHS` passes of `SAMPLES / 64` batches.
const STEPS: u64 = EPOCHS * SAMPLES.div_ceil(64);
/// The event comes once rank 0 has logged this step (`--commit-every` is 10).
const EVENT_AT_STEP: u64 = 25;

/// Two hosts, or `None` when namespaces cannot be made here and are not
/// required (see [`Need::NetworkNamespaces`]).
#[track_caller]
fn cluster(tag: &str, net: (u8, u8)) -> Option<Cluster> {
    Need::NetworkNamespaces.or_skip(Cluster::create(tag, net, 2))
}

/// The discovery file's content: hosts `which`, two slots each.
fn hosts_text(c: &Cluster, which: &[usize]) -> String {
    which
        .iter()
        .map(|&i| format!("{}:2\n", c.host(i)))
        .collect()
}

fn start_job(c: &Cluster, hosts_file: &Path, options: &[&str]) -> Watched {
    let discovery = integration_tests::elastic::file_discovery(hosts_file);
    let train = train();
    let samples = SAMPLES.to_string();
    let epochs = EPOCHS.to_string();
    let mut args = options.to_vec();
    args.extend([
        "--min-np",
        "2",
        "--max-np",
        "4",
        "--host-discovery-script",
        &discovery,
        "--discovery-interval",
        "0.2",
        train.to_str().unwrap(),
        "--epochs",
        &epochs,
        "--samples",
        &samples,
        "--step-delay-ms",
        STEP_DELAY_MS,
        "--log-steps",
    ]);
    Watched::start(c.elasticrun(&args))
}

/// (step, world size) of a `--log-steps` line.
fn step(l: &Line) -> Option<(u64, u64)> {
    let e = event(l)?;
    (e["event"] == "step").then(|| {
        (
            e["step"].as_u64().unwrap(),
            e["world_size"].as_u64().unwrap(),
        )
    })
}

/// Starts the job on both hosts and waits until rank 0 of the 4-worker
/// generation has logged [`EVENT_AT_STEP`].
fn running_job(c: &Cluster, hosts_file: &Path, options: &[&str]) -> Watched {
    write_atomically(hosts_file, &hosts_text(c, &[0, 1]));
    let mut job = start_job(c, hosts_file, options);
    let at = format!("step {EVENT_AT_STEP} on 4 workers");
    job.wait_line(&at, Instant::now(), Duration::from_secs(60), |l| {
        step(l).is_some_and(|(s, w)| s >= EVENT_AT_STEP && w == 4)
    });
    job
}

/// The generation line elasticrun logs when `host` alone runs the job.
fn only_on(host: &str) -> impl Fn(&Line) -> bool {
    let want = format!(": 2 workers ({host}:2)");
    move |l| l.stderr && l.text.starts_with("elasticrun: generation") && l.text.ends_with(&want)
}

/// After the host left at `event_at`: elasticrun logs a generation of the
/// 2 workers on `host` within `detect`, they go on from their last commit (no
/// start from scratch) and the job exits 0 within 30 s more; every rank of
/// the last generation reports the full step count and the same weights.
/// `detect` only guards against a hang (about three times the timeouts that
/// apply): the times are printed, not asserted. Prints the times after the
/// event and elasticrun's log since; returns every line.
fn finishes_on_two(
    mut job: Watched,
    what: &str,
    host: &str,
    event_at: Instant,
    detect: Duration,
) -> Vec<Line> {
    let left = detect.saturating_sub(event_at.elapsed());
    let generation = job.wait_line("the 2-worker generation", event_at, left, only_on(host));
    let resumed = job.wait_line("a step on 2 workers", event_at, detect, |l| {
        step(l).is_some_and(|(_, w)| w == 2)
    });
    let (run, lines) = job.finish(Duration::from_secs(30));
    let exited = event_at.elapsed().as_secs_f64();
    run.expect_code(0);
    let (first, _) = step(&resumed).unwrap();
    assert!(
        first > 10,
        "the 2 workers started over at step {first} instead of going on from a commit\n{}",
        render(&lines)
    );
    let mut done: Vec<serde_json::Value> = lines
        .iter()
        .filter(|l| l.at >= event_at)
        .filter_map(event)
        .filter(|e| e["event"] == "done")
        .collect();
    done.sort_by_key(|e| e["rank"].as_u64());
    assert_eq!(done.len(), 2, "one done line per rank\n{}", render(&lines));
    for (r, d) in done.iter().enumerate() {
        assert_eq!(d["rank"], r, "{d}");
        assert_eq!(d["world_size"], 2, "{d}");
        assert_eq!(d["steps"], STEPS, "{d}");
        assert!(d["resets"].as_u64().unwrap() >= 1, "{d}");
        assert_eq!(d["state"], done[0]["state"], "ranks disagree: {done:?}");
    }
    let secs = |l: &Line| l.at.saturating_duration_since(event_at).as_secs_f64();
    eprintln!(
        "{what}: 2-worker generation after {:.2} s, training on 2 workers (from step {first}) \
         after {:.2} s, exit 0 after {exited:.2} s; elasticrun said:\n{}",
        secs(&generation),
        secs(&resumed),
        timeline(&lines, event_at)
    );
    lines
}

/// Fails the test if elasticrun logged a line containing `needle`.
fn never_said(lines: &[Line], needle: &str) {
    assert!(
        !lines.iter().any(|l| l.stderr && l.text.contains(needle)),
        "unexpected {needle:?}\n{}",
        render(lines)
    );
}

/// elasticrun's stderr from `since` on, timed from it, for the report.
fn timeline(lines: &[Line], since: Instant) -> String {
    lines
        .iter()
        .filter(|l| l.stderr && l.at >= since && l.text.starts_with("elasticrun"))
        .map(|l| format!("  +{:6.2} s {}\n", (l.at - since).as_secs_f64(), l.text))
        .collect()
}

#[test]
fn a_host_taken_out_of_discovery_leaves_and_the_job_goes_on() {
    let Some(c) = cluster("s1", (231, 1)) else {
        return;
    };
    let hosts_file = c.dir().join("hosts");
    let job = running_job(&c, &hosts_file, &[]);
    let removed_at = Instant::now();
    write_atomically(&hosts_file, &hosts_text(&c, &[0]));
    let what = "host taken out of discovery";
    let lines = finishes_on_two(job, what, &c.host(0), removed_at, Duration::from_secs(30));
    // Host 1's workers reached their commit and left cleanly: no failure, no
    // rollback.
    let leaving = lines
        .iter()
        .filter(|l| l.stderr && l.text.starts_with("elasticrun: left the job as told: "))
        .count();
    assert_eq!(leaving, 2, "{}", render(&lines));
    never_said(&lines, "elasticrun: worker");
    // Nothing is left behind anywhere.
    let limit = Duration::from_secs(10);
    c.wait_empty(&c.host_ns(1), &[c.sshd_pid(1)], limit)
        .unwrap();
    c.wait_empty(&c.host_ns(0), &[c.sshd_pid(0)], limit)
        .unwrap();
    c.wait_empty(&c.coordinator_ns(), &[], limit).unwrap();
}

/// The host leaves the network and discovery at once (as a cluster manager
/// would report it): the survivors, stuck in a collective with its workers,
/// never reach the commit that `HostsUpdated` waits for, so at the rejoin
/// timeout (10 s) they are reset and go on from their last commit. The
/// vanished host holds ranks 0 and 1: the survivors also get a new rank 0.
#[test]
fn a_host_that_vanishes_from_the_network_and_discovery_is_left_behind() {
    let Some(c) = cluster("s2", (231, 2)) else {
        return;
    };
    let hosts_file = c.dir().join("hosts");
    let job = running_job(&c, &hosts_file, &[]);
    let vanished_at = Instant::now();
    c.set_link(0, false);
    write_atomically(&hosts_file, &hosts_text(&c, &[1]));
    let what = "host vanished from the network and discovery";
    let lines = finishes_on_two(job, what, &c.host(1), vanished_at, Duration::from_secs(45));
    // The survivors were reset, not stopped and replaced.
    never_said(&lines, "did not rejoin");
    let limit = Duration::from_secs(10);
    c.wait_empty(&c.host_ns(1), &[c.sshd_pid(1)], limit)
        .unwrap();
    c.wait_empty(&c.coordinator_ns(), &[], limit).unwrap();
    // The vanished host's workers cannot hear that the job ended: dropping
    // the cluster kills them.
}

/// The same over the QUIC data plane (`--transport quic`): workers on two
/// hosts meet under mutual TLS across the namespaces' bridge; the host
/// vanishes from the network and discovery, and the survivors go on, reset
/// onto a new QUIC mesh of their own.
#[test]
fn a_quic_job_across_two_hosts_goes_on_when_one_vanishes() {
    encrypted_job_goes_on("quic", ("s4", (231, 4)));
}

/// The same over TLS on TCP (`--transport tls`).
#[test]
fn a_tls_job_across_two_hosts_goes_on_when_one_vanishes() {
    encrypted_job_goes_on("tls", ("s5", (231, 5)));
}

fn encrypted_job_goes_on(transport: &str, (name, net): (&str, (u8, u8))) {
    let Some(c) = cluster(name, net) else {
        return;
    };
    let hosts_file = c.dir().join("hosts");
    let job = running_job(&c, &hosts_file, &["--transport", transport]);
    let vanished_at = Instant::now();
    c.set_link(0, false);
    write_atomically(&hosts_file, &hosts_text(&c, &[1]));
    let what = format!("{transport} job: host vanished from the network and discovery");
    let lines = finishes_on_two(job, &what, &c.host(1), vanished_at, Duration::from_secs(45));
    never_said(&lines, "did not rejoin");
    never_said(&lines, "data-plane connection refused");
    let limit = Duration::from_secs(10);
    c.wait_empty(&c.host_ns(1), &[c.sshd_pid(1)], limit)
        .unwrap();
    c.wait_empty(&c.coordinator_ns(), &[], limit).unwrap();
}

/// The host leaves the network but stays in discovery (a partition): its
/// workers fail by heartbeat silence (15 s), replacements started there over
/// ssh cannot register (`--start-timeout 8` here, 30 s by default), and the
/// host, failing again and again, is blacklisted; the survivors go on. Here
/// the survivors wait for the replacements until they time out
/// (`--replacement-wait` past the start timeout; by default they would go
/// on after 0.5 s and the job could end before the host is blacklisted).
#[test]
fn a_host_that_vanishes_from_the_network_only_is_blacklisted() {
    let Some(c) = cluster("s3", (231, 3)) else {
        return;
    };
    let hosts_file = c.dir().join("hosts");
    // Noticed after 6 s of silence instead of the default 15.
    let options = [
        "--start-timeout",
        "8",
        "--replacement-wait",
        "20",
        "--heartbeat-timeout",
        "6",
    ];
    let job = running_job(&c, &hosts_file, &options);
    let vanished_at = Instant::now();
    c.set_link(0, false);
    let what = "host vanished from the network only";
    let lines = finishes_on_two(job, what, &c.host(1), vanished_at, Duration::from_secs(90));
    let silent = format!(
        "elasticrun: worker on {} slot 0: no heartbeat for 6s",
        c.host(0)
    );
    let banned = format!("elasticrun: host {} is blacklisted", c.host(0));
    for needle in [silent, banned] {
        assert!(
            lines
                .iter()
                .any(|l| l.stderr && l.text.starts_with(&needle)),
            "no {needle:?}\n{}",
            render(&lines)
        );
    }
    never_said(&lines, "did not rejoin");
    let limit = Duration::from_secs(10);
    c.wait_empty(&c.host_ns(1), &[c.sshd_pid(1)], limit)
        .unwrap();
    c.wait_empty(&c.coordinator_ns(), &[], limit).unwrap();
}
