//! The coordinator holding a thousand workers: `swarm` runs elasticrun's
//! coordinator in a process of its own with 1,000 simulated workers' real
//! control connections over loopback (register, heartbeats, assignments
//! answered, an address looked up, resets rejoined), kills one, and ends
//! the job. Every phase has
//! the swarm's deadline; the figures it prints are checked for what they
//! say happened, never for speed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::binary;

/// The swarm's own deadline for each phase, and the test's for the whole.
const PHASE_S: u64 = 120;
const WHOLE: Duration = Duration::from_secs(400);

#[test]
fn a_thousand_workers_register_train_lose_one_and_all_take_the_new_generation() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs());
    eprintln!("swarm seed {seed}");
    let n = 1000;
    let mut child = Command::new(binary("swarm"))
        .args(["--workers", &n.to_string(), "--steady", "2"])
        .args([
            "--seed",
            &seed.to_string(),
            "--within",
            &PHASE_S.to_string(),
        ])
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
    let figures: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON line");
    let field = |name: &str| {
        figures[name]
            .as_f64()
            .unwrap_or_else(|| panic!("no {name} in {figures}"))
    };
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
    // A thousand ranks get partial address tables: each worker looked one
    // peer up at each assignment, and the coordinator answered.
    assert!(field("lookups") >= f64::from(n), "{figures}");
    assert!(field("lookups_answered") >= f64::from(n), "{figures}");
}
