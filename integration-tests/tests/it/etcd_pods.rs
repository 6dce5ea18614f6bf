//! Jobs run the Kubernetes way, on this machine: a real etcd (Debian's
//! etcd-server) on loopback ports, `elasticrun serve` replicas, and pods:
//! `train` processes with a pod's environment and no launcher.

use std::time::Duration;

use integration_tests::elastic::{
    Train, check_done, check_no_rollback, check_reset_limit_reached,
    check_too_few_for_elastic_timeout, done_lines, steps,
};
use integration_tests::etcd::Etcd;
use integration_tests::pods::{self, PodJob, SERVE, check_first_generation};
use integration_tests::prometheus;
use integration_tests::{Finished, wait_for};
use nix::sys::signal::Signal;

const LIMIT: Duration = Duration::from_secs(60);
fn short() -> Train {
    Train {
        epochs: 3,
        samples: 640,
        step_delay_ms: 0,
        commit_every: 5,
    }
}

/// Long enough for a failover in the middle: 20 steps an epoch, 40 ms each.
fn long() -> Train {
    Train {
        epochs: 8,
        samples: 1280,
        step_delay_ms: 40,
        commit_every: 5,
    }
}

fn undisturbed_and_never_reset(run: &Finished, train: &Train) {
    pods::undisturbed_and_never_reset(run, train, 3);
}

fn three_pods(job: &mut PodJob, train: &Train) {
    for node in ["node-a", "node-a", "node-b"] {
        job.pod(node, train);
    }
}

#[test]
fn pods_with_two_coordinators_train_to_the_weights_of_a_launcher_job() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("pods_train", etcd);
    let train = short();
    job.serve(&SERVE);
    job.serve(&SERVE);
    three_pods(&mut job, &train);
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    let state = check_done(&run, 3, train.expected_steps());
    assert_eq!(state, train.undisturbed_state(3), "{}", run.stderr);
    // Ranks and local ranks follow the nodes: two on node-a, one on node-b
    // (the node whose pod registered first comes first).
    check_first_generation(&run, &["node-a:2", "node-b:1"]);
    // Both replicas end: the leader with the job, the standby on seeing it over.
    for i in 0..2 {
        job.finish_serve(i, LIMIT).expect_code(0);
    }
}

#[test]
fn killing_the_leading_coordinator_resets_nothing_and_loses_no_step() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("leader_killed", etcd);
    let train = long();
    let mut options = SERVE.to_vec();
    options.extend(["--metrics-address", "127.0.0.1:0"]);
    job.serve(&options);
    let first = job.leader(&[], LIMIT);
    job.serve(&options);
    three_pods(&mut job, &train);
    job.wait_for_step(30, LIMIT);
    let (_, epoch) = leadership(&job, first, |leader, _| leader == 1.0);
    job.signal_serve(first, Signal::SIGKILL);
    let second = job.leader(&[first], LIMIT);
    // The new leader's metrics: leading, a later epoch, one failover.
    leadership(&job, second, |leader, later| leader == 1.0 && later > epoch);
    let (_, text) = prometheus::get(serve_metrics(&job, second), "/metrics").unwrap();
    let failovers = prometheus::sample(&text, "elasticrun_etcd_failovers_total");
    assert_eq!(failovers, Some(1.0), "{text}");
    let run = job.finish_pods(LIMIT);
    undisturbed_and_never_reset(&run, &train);
    assert_eq!(steps(&run.stdout).len() as u64, train.expected_steps());
    let said = job.serve_stderr(second);
    assert!(
        !said.contains("generation 2"),
        "the new leader formed a new generation:\n{said}"
    );
}

/// Replica `i`'s metrics address, from its stderr.
fn serve_metrics(job: &PodJob, i: usize) -> std::net::SocketAddr {
    wait_for("a replica's metrics address", LIMIT, || {
        job.serve_stderr(i)
            .lines()
            .find_map(prometheus::said_address)
    })
}

/// Replica `i`'s `elasticrun_etcd_leader` and `_leader_epoch` once `ok`
/// says they are as expected.
fn leadership(job: &PodJob, i: usize, ok: impl Fn(f64, f64) -> bool) -> (f64, f64) {
    let addr = serve_metrics(job, i);
    wait_for("the replica's leadership on /metrics", LIMIT, || {
        let (_, text) = prometheus::get(addr, "/metrics").ok()?;
        let leader = prometheus::sample(&text, "elasticrun_etcd_leader")?;
        let epoch = prometheus::sample(&text, "elasticrun_etcd_leader_epoch")?;
        ok(leader, epoch).then_some((leader, epoch))
    })
}

/// Pods on the QUIC data plane (`ELASTICRUN_TRANSPORT=quic`) with replicas
/// run with `--transport quic`: the control connections are TLS under the
/// job's authority, which each replica derives from the secret, so the pods
/// follow a new leader through TLS too; the leader's death resets nothing,
/// and the job ends with the weights of an undisturbed run.
#[test]
fn pods_over_quic_follow_a_new_leader_through_tls_and_lose_nothing() {
    encrypted_pods_follow_a_new_leader("quic");
}

/// The same on the TLS-over-TCP data plane (`ELASTICRUN_TRANSPORT=tls`).
#[test]
fn pods_over_tls_follow_a_new_leader_through_tls_and_lose_nothing() {
    encrypted_pods_follow_a_new_leader("tls");
}

fn encrypted_pods_follow_a_new_leader(transport: &str) {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new(&format!("pods_{transport}"), etcd);
    job.pod_env
        .push((control::env::TRANSPORT.into(), transport.into()));
    let train = long();
    let serve: Vec<&str> = SERVE
        .iter()
        .copied()
        .chain(["--transport", transport])
        .collect();
    job.serve(&serve);
    let first = job.leader(&[], LIMIT);
    job.serve(&serve);
    three_pods(&mut job, &train);
    job.wait_for_step(30, LIMIT);
    job.signal_serve(first, Signal::SIGKILL);
    job.leader(&[first], LIMIT);
    let run = job.finish_pods(LIMIT);
    undisturbed_and_never_reset(&run, &train);
}

/// A pod started on another data plane than the replicas' is told so at
/// once, here `tls` against `quic`, where both control planes speak TLS.
#[test]
fn a_pod_on_another_transport_is_told_so_at_start() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("pod_transport", etcd);
    job.pod_env
        .push((control::env::TRANSPORT.into(), "tls".into()));
    let serve: Vec<&str> = SERVE
        .iter()
        .copied()
        .chain(["--transport", "quic"])
        .collect();
    job.serve(&serve);
    job.leader(&[], LIMIT);
    let pod = job.pod("node-a", &short());
    let refused = job.finish_pod(pod, LIMIT);
    assert_ne!(refused.status.code(), Some(0), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("this pod runs with ELASTICRUN_TRANSPORT=tls but the coordinator"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_pod_given_sigterm_leaves_at_a_commit_without_rollback() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("pod_sigterm", etcd);
    let train = long();
    job.serve(&SERVE);
    three_pods(&mut job, &train);
    job.wait_for_step(10, LIMIT);
    job.signal_pod(2, Signal::SIGTERM);
    let left = job.finish_pod(2, LIMIT);
    left.expect_code(0);
    assert!(
        left.stderr.contains("SIGTERM: leaving the job"),
        "{}",
        left.stderr
    );
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    check_no_rollback(&run.stdout);
    check_done(&run, 2, train.expected_steps());
    assert!(run.stderr.contains("hosts changed"), "{}", run.stderr);
}

#[test]
fn a_killed_pod_resets_the_others_from_the_last_commit() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("pod_killed", etcd);
    let train = long();
    let mut options = SERVE.to_vec();
    options.extend(["--metrics-address", "127.0.0.1:0"]);
    job.serve(&options);
    three_pods(&mut job, &train);
    job.wait_for_step(10, LIMIT);
    job.signal_pod(2, Signal::SIGKILL);
    let _ = job.finish_pod(2, LIMIT);
    // The leader's metrics show the reset and the smaller world.
    let addr = serve_metrics(&job, 0);
    wait_for("a reset and two ranks on /metrics", LIMIT, || {
        let (_, text) = prometheus::get(addr, "/metrics").ok()?;
        let resets = prometheus::sample(&text, r#"elasticrun_resets_total{cause="failure"}"#)?;
        (resets >= 1.0 && prometheus::sample(&text, "elasticrun_world_size")? == 2.0).then_some(())
    });
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    check_done(&run, 2, train.expected_steps());
    let resets: Vec<u64> = done_lines(&run.stdout)
        .iter()
        .filter_map(|d| d["resets"].as_u64())
        .collect();
    assert!(resets.iter().all(|&r| r >= 1), "{resets:?}\n{}", run.stderr);
}

#[test]
fn a_pod_with_a_wrong_secret_is_refused_and_the_job_goes_on() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("wrong_secret", etcd);
    let train = short();
    job.serve(&[
        "-np",
        "2",
        "--min-np",
        "2",
        "--max-np",
        "3",
        "--lease-ttl",
        "2",
    ]);
    let bad = job.pod_with_secret("node-c", &train, &"00".repeat(32));
    let refused = job.finish_pod(bad, LIMIT);
    assert_ne!(refused.status.code(), Some(0), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("authentication"),
        "{}",
        refused.stderr
    );
    job.pod("node-a", &train);
    job.pod("node-b", &train);
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    check_done(&run, 2, train.expected_steps());
}

#[test]
fn both_coordinators_killed_and_one_restarted_resume_the_job_from_the_store() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("both_killed", etcd);
    let train = long();
    job.serve(&SERVE);
    job.serve(&SERVE);
    three_pods(&mut job, &train);
    job.wait_for_step(30, LIMIT);
    job.signal_serve(0, Signal::SIGKILL);
    job.signal_serve(1, Signal::SIGKILL);
    // The pods train on without a coordinator (up to 30 s), then one comes back.
    let at = steps(&job.pods_stdout()).len();
    job.wait_for_step(at as u64 + 10, LIMIT);
    let third = job.serve(&SERVE);
    job.leader(&[0, 1], LIMIT);
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    let state = check_done(&run, 3, train.expected_steps());
    check_no_rollback(&run.stdout);
    assert_eq!(state, train.undisturbed_state(3));
    let said = job.serve_stderr(third);
    assert!(!said.contains("generation 2"), "{said}");
}

#[test]
fn etcd_restarted_mid_run_changes_nothing_for_the_job() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("etcd_restarted", etcd);
    let train = long();
    job.serve(&SERVE);
    three_pods(&mut job, &train);
    job.wait_for_step(20, LIMIT);
    job.etcd.kill(0);
    // Longer than the coordinator's lease: it steps down, then leads again.
    let at = steps(&job.pods_stdout()).len();
    job.wait_for_step(at as u64 + 70, LIMIT);
    job.etcd.restart(0);
    let run = job.finish_pods(LIMIT);
    undisturbed_and_never_reset(&run, &train);
    // Said once when etcd went, once when it came back.
    assert!(
        run.stderr.contains("etcd: cannot renew the lease"),
        "{}",
        run.stderr
    );
    let said = job.serve_stderr(0);
    assert!(said.contains("stepping down"), "{said}");
    // It leads again once etcd is back (more than once if a renewal is
    // missed again on a loaded machine), never forming a new generation.
    assert!(
        said.matches("elasticrun: leading job").count() >= 2,
        "{said}"
    );
    assert!(!said.contains("generation 2"), "{said}");
}

#[test]
fn one_member_of_three_killed_has_no_effect_on_the_job() {
    let Some(etcd) = Etcd::cluster(3, false) else {
        return;
    };
    let mut job = PodJob::new("etcd_member_killed", etcd);
    let train = long();
    job.serve(&SERVE);
    job.serve(&SERVE);
    three_pods(&mut job, &train);
    job.wait_for_step(20, LIMIT);
    job.etcd.kill(0);
    let run = job.finish_pods(LIMIT);
    undisturbed_and_never_reset(&run, &train);
}

#[test]
fn a_pod_added_mid_run_joins_at_a_commit_without_rollback() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("pod_added", etcd);
    let train = long();
    job.serve(&[
        "-np",
        "2",
        "--min-np",
        "2",
        "--max-np",
        "3",
        "--lease-ttl",
        "2",
    ]);
    job.pod("node-a", &train);
    job.pod("node-b", &train);
    job.wait_for_step(10, LIMIT);
    job.pod("node-c", &train);
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    check_no_rollback(&run.stdout);
    check_done(&run, 3, train.expected_steps());
    assert!(run.stderr.contains("hosts changed"), "{}", run.stderr);
}

/// An nftables table dropping this machine's packets to one TCP port,
/// deleted when dropped.
struct Cut(String);

impl Cut {
    fn port(port: u16) -> Option<Cut> {
        use integration_tests::needs::{Need, on_path};
        let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        if on_path("nft").is_none() || uid.ok() != Some(0) {
            Need::NetworkNamespaces.unavailable("cutting a port needs root and nft (nftables)");
            return None;
        }
        let name = format!("elasticrun_cut_{}_{port}", std::process::id());
        let script = format!(
            "table inet {name} {{\n  chain out {{\n    type filter hook output priority 0; policy accept;\n    \
             tcp dport {port} drop\n  }}\n}}\n"
        );
        let file = std::env::temp_dir().join(format!("{name}.nft"));
        std::fs::write(&file, script).unwrap_or_else(|e| panic!("{e}"));
        let out = std::process::Command::new("nft")
            .arg("-f")
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("cannot run nft: {e}"));
        let _ = std::fs::remove_file(&file);
        assert!(
            out.status.success(),
            "nft: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Cut(name))
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nft")
            .args(["delete", "table", "inet", &self.0])
            .output();
    }
}

/// A leader frozen (SIGSTOP) past its lease wakes to find another leading:
/// it steps down and stands by again, and the job, which the standby led
/// meanwhile, never notices (the workers followed the election in etcd).
#[test]
fn a_leader_frozen_past_its_lease_wakes_deposed_and_stands_by() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("leader_frozen", etcd);
    let train = long();
    let first = job.serve(&SERVE);
    job.leader(&[], LIMIT);
    job.serve(&SERVE);
    three_pods(&mut job, &train);
    job.wait_for_step(20, LIMIT);
    job.signal_serve(first, Signal::SIGSTOP);
    let second = job.leader(&[first], LIMIT);
    let frozen_at = job.serve_stderr(first).len();
    job.wait_for_more_steps(5, LIMIT);
    job.signal_serve(first, Signal::SIGCONT);
    // It steps down on seeing its lease lapsed, or on its first write
    // being refused as deposed, whichever comes first.
    let down = job.wait_serve_says(
        first,
        "stepping down, the workers keep training",
        frozen_at,
        LIMIT,
    );
    job.wait_serve_says(first, "standing by", down, LIMIT);
    let run = job.finish_pods(LIMIT);
    undisturbed_and_never_reset(&run, &train);
    assert!(!job.serve_stderr(second).contains("generation 2"));
    // The woken replica formed nothing either.
    let woken = &job.serve_stderr(first)[frozen_at..];
    assert!(!woken.contains("generation"), "{woken}");
}

#[test]
fn a_leader_cut_off_from_etcd_steps_down_and_a_standby_takes_over() {
    let Some(etcd) = Etcd::cluster(3, false) else {
        return;
    };
    let mut job = PodJob::new("leader_cut_off", etcd);
    let (p0, p1, p2) = (
        job.etcd.client_port(0),
        job.etcd.client_port(1),
        job.etcd.client_port(2),
    );
    let rest = format!("http://127.0.0.1:{p0},http://127.0.0.1:{p1}");
    job.pod_etcd = Some(rest.clone());
    let train = long();
    // The first replica reaches etcd through member 2 only, the other and
    // the pods through members 0 and 1.
    let first = job.serve_on(&format!("http://127.0.0.1:{p2}"), &SERVE);
    job.leader(&[], LIMIT);
    job.serve_on(&rest, &SERVE);
    three_pods(&mut job, &train);
    job.wait_for_step(20, LIMIT);
    let Some(cut) = Cut::port(p2) else { return };
    let second = job.leader(&[first], LIMIT);
    let said = job.serve_stderr(first);
    assert!(said.contains("no longer leading the job"), "{said}");
    let run = job.finish_pods(LIMIT);
    drop(cut);
    undisturbed_and_never_reset(&run, &train);
    assert!(!job.serve_stderr(second).contains("generation 2"));
}

#[test]
fn etcd_unreachable_at_start_is_a_clear_error_after_the_deadline() {
    // A port nothing listens on.
    let port = integration_tests::ports::unused();
    let dir = integration_tests::elastic::Scratch::new("etcd_unreachable");
    let secret = dir.write("secret", &"ab".repeat(32));
    let url = format!("http://127.0.0.1:{port}");
    let mut serve = std::process::Command::new(integration_tests::elasticrun());
    serve
        .args([
            "serve",
            "--etcd",
            &url,
            "--job",
            "j",
            "--min-np",
            "1",
            "--start-timeout",
            "2",
        ])
        .arg("--secret-file")
        .arg(&secret);
    let run = integration_tests::start(serve).finish(LIMIT);
    run.expect_code(1);
    assert!(
        run.stderr
            .contains(&format!("etcd at {url} cannot be reached within 2s")),
        "{}",
        run.stderr
    );
    let train = short();
    let args = train.args();
    let mut pod = std::process::Command::new(&args[0]);
    for k in control::env::ALL {
        pod.env_remove(k);
    }
    pod.args(&args[1..])
        .env("ELASTICRUN_ETCD", &url)
        .env("ELASTICRUN_JOB", "j")
        .env("ELASTICRUN_SECRET_FILE", &secret)
        .env("ELASTICRUN_START_TIMEOUT", "2");
    let run = integration_tests::start(pod).finish(LIMIT);
    run.expect_code(1);
    assert!(
        run.stderr.contains("cannot be reached within 2s"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_job_that_ends_while_no_coordinator_leads_is_closed_by_the_next_one() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("ends_leaderless", etcd);
    let train = long();
    job.serve(&SERVE);
    three_pods(&mut job, &train);
    job.wait_for_step(train.expected_steps() - 25, LIMIT);
    job.signal_serve(0, Signal::SIGKILL);
    // The pods finish on their own, no coordinator leading.
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    check_done(&run, 3, train.expected_steps());
    // The next replica sees every member finished, ends the job and records it.
    let next = job.serve(&SERVE);
    let ended = job.finish_serve(next, Duration::from_secs(30));
    ended.expect_code(0);
    assert!(ended.stderr.contains("succeeded"), "{}", ended.stderr);
}

/// `--reset-limit` counts in pod mode as in launcher mode: the second pod
/// killed would be the second reset of a job allowed one, so the leader
/// stops every worker and the job (and the replica) fails.
#[test]
fn the_reset_limit_ends_a_job_of_pods() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("pods_reset_limit", etcd);
    let train = long();
    let serve = job.serve(&[
        "-np",
        "4",
        "--min-np",
        "2",
        "--max-np",
        "4",
        "--lease-ttl",
        "2",
        "--reset-limit",
        "1",
    ]);
    for node in ["node-a", "node-a", "node-b", "node-b"] {
        job.pod(node, &train);
    }
    job.wait_for_step(10, LIMIT);
    job.signal_pod(3, Signal::SIGKILL);
    let mut stdout = job.finish_pod(3, LIMIT).stdout;
    job.wait_serve_says(serve, "generation 2: 3 workers", 0, LIMIT);
    job.wait_for_more_steps(3, LIMIT);
    job.signal_pod(2, Signal::SIGKILL);
    stdout.push_str(&job.finish_pod(2, LIMIT).stdout);
    let said = job.finish_serve(serve, LIMIT);
    said.expect_code(1);
    check_reset_limit_reached(&said.stderr, 1);
    let run = job.finish_pods(LIMIT);
    assert!(!run.status.success(), "the stopped pods exited 0");
    stdout.push_str(&run.stdout);
    // Rank 0 logs the steps, on whichever node registered first.
    let last = steps(&stdout).iter().map(|s| s.step).max();
    assert!(
        last.is_some_and(|s| s < train.expected_steps()),
        "the job trained to the end (last step {last:?})"
    );
    assert!(done_lines(&stdout).is_empty(), "{stdout}");
}

/// Blacklisting is by node in pod mode: the pod of node-b dies in each of
/// three generations (Kubernetes starting a new one there each time), the
/// third failure within the window blacklists node-b, a pod started there
/// afterwards is not admitted, and the job finishes on node-a's two pods.
#[test]
fn a_node_whose_pods_keep_dying_is_blacklisted_and_the_job_goes_on() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("pods_blacklist", etcd);
    let train = Train {
        epochs: 16,
        ..long()
    };
    let serve = job.serve(&SERVE);
    job.pod("node-a", &train);
    job.pod("node-a", &train);
    let mut victim = job.pod("node-b", &train);
    let banned = "elasticrun: host node-b is blacklisted for the rest of the job";
    let mut since = 0;
    for _ in 1..=3 {
        // A generation of 3 with the pod of node-b in it (the kill of the
        // last one may have formed one of 2 before the new pod joined).
        job.wait_serve_line(
            serve,
            "a generation of 3 on node-a and node-b",
            since,
            LIMIT,
            |l| {
                l.contains("elasticrun: generation ")
                    && l.contains(": 3 workers (")
                    && l.contains("node-b:1")
            },
        );
        job.wait_for_more_steps(3, LIMIT);
        assert!(!job.serve_stderr(serve).contains(banned), "too early");
        since = job.serve_stderr(serve).len();
        job.signal_pod(victim, Signal::SIGKILL);
        let _ = job.finish_pod(victim, LIMIT);
        victim = job.pod("node-b", &train);
    }
    job.wait_serve_says(serve, banned, 0, LIMIT);
    // The pod started on node-b after the ban never joins: it gives up.
    let late = job.finish_pod(victim, LIMIT);
    assert!(!late.status.success(), "{}", late.stderr);
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    check_done(&run, 2, train.expected_steps());
    let last = run
        .stderr
        .lines()
        .rfind(|l| l.contains("elasticrun: generation ") && l.contains("workers ("))
        .unwrap_or_default()
        .to_owned();
    assert!(
        last.contains("2 workers (node-a:2)"),
        "{last}\n{}",
        run.stderr
    );
}

/// `--elastic-timeout` counts in pod mode as in launcher mode: with one of
/// two pods killed and none coming back, the job waits that long for
/// `--min-np` pods, then stops every worker and fails.
#[test]
fn too_few_pods_for_longer_than_the_elastic_timeout_end_the_job() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("pods_too_few", etcd);
    let train = long();
    let serve = job.serve(&[
        "-np",
        "2",
        "--min-np",
        "2",
        "--max-np",
        "2",
        "--lease-ttl",
        "2",
        "--elastic-timeout",
        "2",
    ]);
    job.pod("node-a", &train);
    job.pod("node-b", &train);
    job.wait_for_step(5, LIMIT);
    job.signal_pod(1, Signal::SIGKILL);
    let mut stdout = job.finish_pod(1, LIMIT).stdout;
    // A bound against a hang, far above the 2 s timeout.
    let said = job.finish_serve(serve, LIMIT);
    said.expect_code(1);
    check_too_few_for_elastic_timeout(&said.stderr, 2, "2");
    let run = job.finish_pods(LIMIT);
    assert!(!run.status.success(), "the stopped pod exited 0");
    stdout.push_str(&run.stdout);
    assert!(done_lines(&stdout).is_empty(), "{stdout}");
}

/// etcd frozen (SIGSTOP, as a stalled disk freezes it) for several times
/// the pods' lease: every lease lapses while the pods, which still reach
/// each other and the coordinator, train on. Woken, etcd ends the lapsed
/// leases and deletes the pods' keys; each pod takes a new lease and claims
/// its slot again, the coordinator leads again, and the job ends as if
/// nothing had happened.
#[test]
fn etcd_frozen_past_every_lease_loses_no_pod() {
    let Some(etcd) = Etcd::start() else { return };
    let run = etcd_frozen(etcd, "etcd_frozen", &SERVE, "stepping down");
    // It led again once etcd woke.
    let led = run.stderr.matches("elasticrun: leading job").count();
    assert!(led >= 2, "{}", run.stderr);
}

/// The same stall with a coordinator whose lease outlasts it: it leads on
/// while the pods' keys vanish, and takes each pod's key claimed again for
/// the same worker.
#[test]
fn etcd_frozen_past_the_pods_leases_only_loses_no_pod() {
    let mut serve = SERVE;
    serve[7] = "30";
    let Some(etcd) = Etcd::start() else { return };
    let run = etcd_frozen(etcd, "etcd_frozen_pods", &serve, "cannot renew the lease");
    assert!(!run.stderr.contains("stepping down"), "{}", run.stderr);
}

/// A pod's lease revoked in etcd while the pod lives on (what a stall's end
/// does to one lease): the coordinator, leading throughout, sees the key
/// vanish; the pod takes a new lease and claims its slot again within
/// moments, and the job never resets.
#[test]
fn a_pod_whose_lease_etcd_ended_claims_its_slot_again() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("lease_revoked", etcd);
    let train = long();
    job.serve(&SERVE);
    three_pods(&mut job, &train);
    job.wait_for_step(20, LIMIT);
    let key = format!("/elasticrun/{}/workers/node-b/0", job.job);
    let listed = job.etcd.ctl(&["get", &key, "-w", "json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("etcdctl's JSON");
    let lease = listed["kvs"][0]["lease"]
        .as_i64()
        .unwrap_or_else(|| panic!("no lease on {key}: {listed}"));
    job.etcd.ctl(&["lease", "revoke", &format!("{lease:x}")]);
    let run = job.finish_pods(LIMIT);
    undisturbed_and_never_reset(&run, &train);
    let claimed = run.stderr.matches("claimed its slot again").count();
    assert_eq!(claimed, 1, "{}", run.stderr);
}

/// Freezes `etcd` under a job of three pods until the leader says `sign`,
/// then for 100 more steps (40 ms each, twice the pods' 2 s lease at
/// least); the finished run, checked undisturbed and every pod's slot
/// claimed again.
fn etcd_frozen(etcd: Etcd, name: &str, serve: &[&str], sign: &str) -> Finished {
    let mut job = PodJob::new(name, etcd);
    let train = Train {
        epochs: 20,
        ..long()
    };
    job.serve(serve);
    three_pods(&mut job, &train);
    job.wait_for_step(20, LIMIT);
    let before = job.serve_stderr(0).len();
    job.etcd.signal(0, Signal::SIGSTOP);
    job.wait_serve_says(0, sign, before, LIMIT);
    job.wait_for_more_steps(100, LIMIT);
    job.etcd.signal(0, Signal::SIGCONT);
    let run = job.finish_pods(LIMIT);
    undisturbed_and_never_reset(&run, &train);
    let claimed = run.stderr.matches("claimed its slot again").count();
    assert_eq!(claimed, 3, "{}", run.stderr);
    run
}
