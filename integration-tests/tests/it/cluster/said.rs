//! What the coordinator says on the in-process cluster: what a job that
//! cannot start or is paused waits for (at once, then every 30 s of virtual
//! time, and nothing once it runs), how long each recovery took and how many
//! steps it rolled back, counts in the singular, and time stamps.

use std::time::Duration;

use coordinator::job::Ending;
use coordinator::store::MemoryStore;
use integration_tests::cluster::checks::{wait_generation, wait_step};
use integration_tests::cluster::{Cluster, Event, Training, elastic_job, said};

use super::{JOB, WAIT};

/// Waiting lines said so far.
fn waiting(cluster: &Cluster) -> Vec<String> {
    waiting_in(&cluster.events())
}

/// Waiting lines among `events`.
fn waiting_in(events: &[Event]) -> Vec<String> {
    said(events)
        .into_iter()
        .filter(|l| l.contains(": waiting for "))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_job_offered_too_few_slots_says_what_it_waits_for_every_thirty_seconds_until_it_starts() {
    // 600 steps of 100 ms: a minute of training, two periods of the wait line.
    let training = Training {
        steps: 600,
        ..Training::default()
    };
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "2", "--max-np", "2"]);
    let coordinator = cluster.start_coordinator(&cfg, Box::new(MemoryStore::new()));
    coordinator.discover("localhost:1").await;
    let first = cluster
        .wait_said("the first waiting line", Duration::from_secs(1), |l| {
            l.contains("waiting for")
        })
        .await;
    let started = tokio::time::Instant::now();
    assert_eq!(
        first,
        "elasticrun: the job cannot start: waiting for 2 slots (--min-np 2); discovery offers 1 \
         (localhost:1); giving up in 600 s, at 2027-01-15T08:10:00Z"
    );
    let second = cluster
        .wait_for(
            "the second waiting line",
            Duration::from_secs(40),
            |events| waiting_in(events).get(1).cloned(),
        )
        .await;
    assert!(
        started.elapsed() >= Duration::from_secs(30),
        "said again after {:?}",
        started.elapsed()
    );
    assert!(
        second.ends_with("giving up in 570 s, at 2027-01-15T08:10:00Z"),
        "{second}"
    );
    coordinator.discover("localhost:1,other:1").await;
    wait_generation(&cluster, 1, 2, WAIT).await;
    let said = waiting(&cluster).len();
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success);
    assert_eq!(
        waiting(&cluster).len(),
        said,
        "said it waits while it ran: {:#?}",
        cluster.said()
    );
}

#[tokio::test(start_paused = true)]
async fn a_paused_job_says_so_and_the_host_change_that_resumes_it_is_timed_without_rollback() {
    let training = Training::default();
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "2", "--max-np", "2"]);
    let coordinator = cluster.start_coordinator(&cfg, Box::new(MemoryStore::new()));
    coordinator.discover("a:1,b:1").await;
    let first = wait_generation(&cluster, 1, 2, WAIT).await;
    wait_step(&cluster, 1, 12, WAIT).await;
    coordinator.discover("a:1").await;
    let paused = cluster
        .wait_said("the pause", WAIT, |l| l.contains("waiting for"))
        .await;
    assert!(
        paused.starts_with(
            "elasticrun: the job is paused: waiting for 2 slots (--min-np 2); discovery offers 1 \
             (a:1); giving up in 600 s, at "
        ),
        "{paused}"
    );
    coordinator.discover("a:1,c:1").await;
    wait_generation(&cluster, 2, 2, WAIT).await;
    let running = cluster
        .wait_said("the recovery", WAIT, |l| l.contains("running"))
        .await;
    assert!(
        running.starts_with("elasticrun: generation 2 running 2 workers ")
            && running.ends_with(" after the host change; nothing rolled back (step 15)"),
        "{running}"
    );
    assert_eq!(coordinator.ending(&cluster, JOB).await, Ending::Success);
    let said = cluster.said();
    assert_eq!(waiting(&cluster).len(), 1, "{said:#?}");
    // b's worker was told to leave: said as news, not as a failure.
    assert_eq!(first[1].slot, elastic::SlotId::new("b", 0));
    let left = said.iter().find(|l| l.contains("b slot 0")).unwrap();
    assert!(
        left.starts_with("elasticrun: left the job as told: worker ")
            && left.ends_with(" on b slot 0 (no place in the new generation)"),
        "{said:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_recovery_from_a_kill_says_how_long_it_took_and_what_it_rolled_back() {
    let training = Training::default();
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "2", "--max-np", "3"]);
    let coordinator = cluster.start_coordinator(&cfg, Box::new(MemoryStore::new()));
    coordinator.discover("h:3").await;
    let first = wait_generation(&cluster, 1, 3, WAIT).await;
    wait_step(&cluster, 1, 17, WAIT).await;
    cluster.kill(first[1].pid);
    let line = cluster
        .wait_said("the recovery", WAIT, |l| l.contains("running"))
        .await;
    let rest = line
        .strip_prefix("elasticrun: generation 2 running 3 workers ")
        .unwrap_or_else(|| panic!("{line}"));
    let (took, rollback) = rest
        .split_once(" after the failure; ")
        .unwrap_or_else(|| panic!("{line}"));
    assert!(took.ends_with(" ms") || took.ends_with(" s"), "{line}");
    // Killed at step 17 or later: back to the commit at step 15.
    let (count, steps) = rollback
        .strip_suffix(" -> 15)")
        .and_then(|r| r.split_once(" rolled back (step "))
        .unwrap_or_else(|| panic!("{line}"));
    let reached: u64 = steps.parse().unwrap();
    assert!(reached >= 17, "{line}");
    let n = reached - 15;
    assert_eq!(count, format!("{n} steps"), "{line}");
    assert_eq!(coordinator.ending(&cluster, JOB).await, Ending::Success);
    let recoveries = cluster
        .said()
        .iter()
        .filter(|l| l.contains(" running "))
        .count();
    assert_eq!(recoveries, 1, "{:#?}", cluster.said());
}

#[tokio::test(start_paused = true)]
async fn one_worker_is_one_worker_and_status_lines_carry_the_time_when_asked() {
    let training = Training {
        steps: 10,
        ..Training::default()
    };
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "1", "--prefix-output-with-timestamp"]);
    let coordinator = cluster.start_coordinator(&cfg, Box::new(MemoryStore::new()));
    coordinator.discover("h:1").await;
    let line = cluster
        .wait_said("the first generation", WAIT, |l| l.contains("generation 1"))
        .await;
    let (time, text) = line.split_once(' ').unwrap_or_else(|| panic!("{line}"));
    assert_eq!(text, "elasticrun: generation 1: 1 worker (h:1)");
    assert!(
        time.starts_with("2027-01-15T08:00:") && time.ends_with('Z') && time.len() == 24,
        "{line}"
    );
    assert_eq!(coordinator.ending(&cluster, JOB).await, Ending::Success);
}
