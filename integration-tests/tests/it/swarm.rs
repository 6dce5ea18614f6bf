//! The coordinator holding a thousand workers: `swarm` runs elasticrun's
//! coordinator in a process of its own with 1,000 simulated workers' real
//! control connections over loopback (register, heartbeats, assignments
//! answered, an address looked up, resets rejoined), kills one, and ends
//! the job; and, in etcd mode, simulated pods against two `elasticrun
//! serve` replicas and a real etcd. Every phase has the swarm's deadline;
//! the figures it prints are checked for what they say happened, never
//! for speed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::binary;
use integration_tests::etcd::Etcd;

/// The swarm's own deadline for each phase, and the test's for the whole.
const PHASE_S: u64 = 120;
const WHOLE: Duration = Duration::from_secs(400);

fn seed() -> String {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    eprintln!("swarm seed {seed}");
    seed.to_string()
}

/// Runs `swarm` with `args` within [`WHOLE`]: the one JSON line it printed.
fn run_swarm(args: &[&str]) -> serde_json::Value {
    let mut child = Command::new(binary("swarm"))
        .args(args)
        .args(["--within", &PHASE_S.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("swarm starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("swarm's status") {
            break status;
        }
        if started.elapsed() > WHOLE {
            let _ = child.kill();
            panic!("swarm still ran after {WHOLE:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out)
        .expect("swarm's output");
    assert!(
        status.success(),
        "swarm failed ({status}); it printed {out:?}"
    );
    serde_json::from_str(out.trim()).expect("one JSON line")
}

/// `figures[name]`, a number.
fn field(figures: &serde_json::Value, name: &str) -> f64 {
    figures[name]
        .as_f64()
        .unwrap_or_else(|| panic!("no {name} in {figures}"))
}

#[test]
fn a_thousand_workers_register_train_lose_one_and_all_take_the_new_generation() {
    let n = 1000;
    let figures = run_swarm(&[
        "--workers",
        &n.to_string(),
        "--steady",
        "2",
        "--seed",
        &seed(),
    ]);
    let field = |name: &str| field(&figures, name);
    assert_eq!(field("workers"), f64::from(n));
    assert_eq!(field("worker_failures"), 0.0, "{figures}");
    assert_eq!(
        field("coordinator_exit_code"),
        0.0,
        "the job ended well: {figures}"
    );
    // Every survivor took the new generation, then the replacement did.
    assert!(field("recovery_ms") > 0.0 && field("recovery_full_ms") >= field("recovery_ms"));
    // The reset reached every worker: at least a Reset and an assignment each.
    assert!(field("reset_bytes_per_worker") > 100.0, "{figures}");
    assert!(field("coordinator_peak_rss_mib") > 0.0, "{figures}");
    // The coordinator worked through the reset.
    assert!(field("recovery_coordinator_cpu_ms") > 0.0, "{figures}");
    // A thousand ranks get partial address tables: each worker looked one
    // peer up at each assignment, and the coordinator answered.
    assert!(field("lookups") >= f64::from(n), "{figures}");
    assert!(field("lookups_answered") >= f64::from(n), "{figures}");
}

/// Etcd mode: 200 simulated pods (each its own etcd connection, lease,
/// slot key and watch of the election) against two `elasticrun serve`
/// replicas and a real etcd. The leader is killed: every pod registers
/// with the next one and no generation is made; then a pod is killed: the
/// survivors take a new generation without a pod asking etcd anything.
#[test]
fn pods_follow_a_new_leader_through_etcd_and_a_lost_pod_costs_etcd_nothing_per_pod() {
    let Some(etcd) = Etcd::start() else { return };
    let n = 200;
    let figures = run_swarm(&[
        "--etcd",
        &etcd.endpoints(),
        "--workers",
        &n.to_string(),
        "--steady",
        "1",
        "--seed",
        &seed(),
    ]);
    let field = |name: &str| field(&figures, name);
    assert_eq!(field("pods"), f64::from(n));
    assert_eq!(field("pod_failures"), 0.0, "{figures}");
    assert_eq!(
        field("leader_exit_code"),
        0.0,
        "the job ended well: {figures}"
    );
    assert_eq!(
        field("failover_new_generations"),
        0.0,
        "the new leader made no generation: {figures}"
    );
    assert!(field("failover_ms") > 0.0 && field("pod_loss_recovery_ms") > 0.0);
    // Each pod watched the election again to find the new leader.
    let failover = &figures["etcd_requests_failover"];
    assert!(
        failover["Watch"].as_f64().unwrap_or(0.0) >= f64::from(n),
        "{figures}"
    );
    // The reset after the pod's loss: the leader's commits, no pod's reads.
    let loss = &figures["etcd_requests_pod_loss"];
    let reads = loss["Range"].as_f64().unwrap_or(0.0) + loss["Watch"].as_f64().unwrap_or(0.0);
    assert!(reads < 10.0, "{figures}");
}
