//! Elastic scenarios on the in-process cluster (`integration_tests::cluster`):
//! the real job driver, membership core, store, control codec and handshake
//! and collectives, simulated worker processes, all in one process under
//! tokio's paused clock. Each test runs minutes of virtual time in
//! milliseconds; every wait has a deadline in virtual time and a message.
//!
//! The seeded chaos test takes its seed from `ELASTICRUN_TEST_SEED` (one run)
//! or runs a fixed list of seeds; each seed is printed before its run.

mod chaos;
mod said;

use std::sync::Arc;
use std::time::Duration;

use coordinator::config::JobConfig;
use coordinator::job::Ending;
use coordinator::store::{JobState, MemoryStore, Revision, Store, StoreError};
use elastic::SlotId;
use futures::FutureExt;
use futures::future::BoxFuture;
use integration_tests::cluster::checks::{
    Member, check_run, exits, first_step, generations, rollbacks, wait_generation, wait_step,
};
use integration_tests::cluster::{Cluster, Coordinator, Event, Exit, Training, elastic_job};

/// Bound on one job, in virtual time.
const JOB: Duration = Duration::from_secs(600);
/// Bound on one wait within a job, in virtual time.
const WAIT: Duration = Duration::from_secs(120);

fn slot(host: &str, n: u32) -> SlotId {
    SlotId::new(host, n)
}

fn slots(members: &[integration_tests::cluster::checks::Member]) -> Vec<SlotId> {
    members.iter().map(|m| m.slot.clone()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_killed_worker_is_replaced_on_its_slot_and_the_survivors_go_on_from_their_commit() {
    let training = Training::default();
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "2", "--max-np", "3"]);
    let coordinator = cluster.start_coordinator(&cfg, Box::new(MemoryStore::new()));
    coordinator.discover("h:3").await;
    let first = wait_generation(&cluster, 1, 3, WAIT).await;
    assert_eq!(slots(&first), [slot("h", 0), slot("h", 1), slot("h", 2)]);
    wait_step(&cluster, 1, 17, WAIT).await;
    let victim = first[1].pid;
    cluster.kill(victim);
    let second = wait_generation(&cluster, 2, 3, WAIT).await;
    // Survivors keep their ranks; the replacement, on the same slot, takes
    // the rank of the worker it replaces.
    assert_eq!(slots(&second), [slot("h", 0), slot("h", 1), slot("h", 2)]);
    assert_eq!((second[0].pid, second[2].pid), (first[0].pid, first[2].pid));
    assert!(second[1].pid != victim);
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success);
    let events = cluster.events();
    let finish = check_run(&events, &training);
    assert_eq!(finish.generation, 2);
    assert_eq!(exits(&events)[&victim], Exit::Signal(9));
    // Both survivors went back to the commit at step 15 and went on from it.
    let mut back = rollbacks(&events);
    back.sort_unstable();
    assert_eq!(back, [(first[0].pid, 15), (first[2].pid, 15)]);
    assert_eq!(first_step(&events, 2), Some(16));
}

/// Forty workers on five hosts: more than the 32 ranks whose assignments
/// carry every address, so each worker is given its partners' and its
/// host's, and its data plane (the in-memory fabric, a full mesh) looks the
/// others up through its control connection, answered by the coordinator's
/// link tasks, in both generations: every step's sum over exactly 40 ranks
/// says each mesh was whole.
#[tokio::test(start_paused = true)]
async fn forty_workers_look_up_the_addresses_their_assignments_left_out() {
    let training = Training {
        steps: 20,
        ..Training::default()
    };
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "40", "--max-np", "40"]);
    let coordinator = cluster.start_coordinator(&cfg, Box::new(MemoryStore::new()));
    coordinator.discover("h0:8,h1:8,h2:8,h3:8,h4:8").await;
    let first = wait_generation(&cluster, 1, 40, WAIT).await;
    wait_step(&cluster, 1, 7, WAIT).await;
    cluster.kill(first[17].pid);
    wait_generation(&cluster, 2, 40, WAIT).await;
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success);
    let finish = check_run(&cluster.events(), &training);
    assert_eq!((finish.generation, finish.members.len()), (2, 40));
}

#[tokio::test(start_paused = true)]
async fn new_slots_grow_the_world_at_the_next_commit_without_rollback() {
    let training = Training::default();
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "2", "--max-np", "4"]);
    let coordinator = cluster.start_coordinator(&cfg, Box::new(MemoryStore::new()));
    coordinator.discover("a:2").await;
    let first = wait_generation(&cluster, 1, 2, WAIT).await;
    wait_step(&cluster, 1, 12, WAIT).await;
    // Six slots offered, four places.
    coordinator.discover("a:2,b:4").await;
    let second = wait_generation(&cluster, 2, 4, WAIT).await;
    let expected = [slot("a", 0), slot("a", 1), slot("b", 0), slot("b", 1)];
    assert_eq!(slots(&second), expected);
    assert_eq!((second[0].pid, second[1].pid), (first[0].pid, first[1].pid));
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success);
    let events = cluster.events();
    let finish = check_run(&events, &training);
    assert_eq!((finish.generation, finish.members.len()), (2, 4));
    assert!(
        rollbacks(&events).is_empty(),
        "a host update rolls nothing back"
    );
    // The members moved at their commit at step 15.
    assert_eq!(first_step(&events, 2), Some(16));
    let started: Vec<&SlotId> = events
        .iter()
        .filter_map(|e| match e {
            Event::Started { slot, .. } => Some(slot),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 4, "max-np caps what is started: {started:?}");
}

#[tokio::test(start_paused = true)]
async fn a_removed_host_leaves_and_the_rest_go_on_without_rollback() {
    let training = Training::default();
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "2", "--max-np", "3"]);
    let coordinator = cluster.start_coordinator(&cfg, Box::new(MemoryStore::new()));
    coordinator.discover("a:2,b:1").await;
    let first = wait_generation(&cluster, 1, 3, WAIT).await;
    assert_eq!(first[2].slot, slot("b", 0));
    wait_step(&cluster, 1, 12, WAIT).await;
    coordinator.discover("a:2").await;
    let second = wait_generation(&cluster, 2, 2, WAIT).await;
    assert_eq!(slots(&second), [slot("a", 0), slot("a", 1)]);
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success);
    let events = cluster.events();
    let finish = check_run(&events, &training);
    assert_eq!((finish.generation, finish.members.len()), (2, 2));
    assert!(rollbacks(&events).is_empty());
    assert_eq!(first_step(&events, 2), Some(16));
    let left = &exits(&events)[&first[2].pid];
    assert!(
        matches!(left, Exit::Left { reason } if reason.contains("b slot 0")),
        "{left:?}"
    );
}

/// A job of three workers on `h` whose coordinator keeps its state in a
/// store that outlives it (a restarted one resumes from it).
struct Job {
    training: Training,
    cluster: Cluster,
    cfg: JobConfig,
    store: Arc<MemoryStore>,
    coordinator: Coordinator,
    /// Generation 1's members.
    first: Vec<Member>,
}

/// [`Job`] once rank 0 of generation 1 has trained to step 17.
async fn three_workers_at_step_17() -> Job {
    let training = Training::default();
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "2", "--max-np", "3"]);
    let store = Arc::new(MemoryStore::new());
    let coordinator = cluster.start_coordinator(&cfg, Box::new(store.clone()));
    coordinator.discover("h:3").await;
    let first = wait_generation(&cluster, 1, 3, WAIT).await;
    wait_step(&cluster, 1, 17, WAIT).await;
    Job {
        training,
        cluster,
        cfg,
        store,
        coordinator,
        first,
    }
}

#[tokio::test(start_paused = true)]
async fn a_restarted_coordinator_resumes_from_the_store_and_its_workers_reattach() {
    let Job {
        training,
        cluster,
        cfg,
        store,
        coordinator,
        first,
    } = three_workers_at_step_17().await;
    let (revision, _) = store.load().await.unwrap().expect("a committed state");
    coordinator.crash();
    let coordinator = cluster.start_coordinator(&cfg, Box::new(store.clone()));
    coordinator.discover("h:3").await;
    let pids: Vec<u32> = first.iter().map(|m| m.pid).collect();
    cluster
        .wait_for("every worker reconnected", WAIT, |events| {
            let back: Vec<u32> = events
                .iter()
                .filter_map(|e| match e {
                    Event::Reconnected { pid, generation: 1 } => Some(*pid),
                    _ => None,
                })
                .collect();
            pids.iter().all(|p| back.contains(p)).then_some(())
        })
        .await;
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success);
    let events = cluster.events();
    let finish = check_run(&events, &training);
    // Same generation, same processes: nothing was started or rolled back.
    assert_eq!(finish.generation, 1);
    assert_eq!(finish.members, first);
    let started = events
        .iter()
        .filter(|e| matches!(e, Event::Started { .. }))
        .count();
    assert_eq!(started, 3);
    assert!(rollbacks(&events).is_empty());
    // Nothing to record: the job state is where the first coordinator left it.
    let (now, state) = store.load().await.unwrap().unwrap();
    assert_eq!((now, state.membership.generation.0), (revision, 1));
}

#[tokio::test(start_paused = true)]
async fn a_worker_killed_while_the_coordinator_is_down_fails_after_the_rejoin_timeout() {
    let Job {
        training,
        cluster,
        cfg,
        store,
        coordinator,
        first,
    } = three_workers_at_step_17().await;
    coordinator.crash();
    let victim = first[1].pid;
    cluster.kill(victim);
    let restarted = tokio::time::Instant::now();
    let coordinator = cluster.start_coordinator(&cfg, Box::new(store.clone()));
    coordinator.discover("h:3").await;
    // The victim's slot waits for it to reattach for the rejoin timeout
    // (10 s), then is replaced.
    cluster
        .wait_for("a replacement on h slot 1", WAIT, |events| {
            events.iter().find_map(|e| match e {
                Event::Started { pid, slot } if *slot == SlotId::new("h", 1) && *pid != victim => {
                    Some(())
                }
                _ => None,
            })
        })
        .await;
    let waited = restarted.elapsed();
    assert!(
        waited >= Duration::from_secs(10),
        "replaced after {waited:?}"
    );
    let second = wait_generation(&cluster, 2, 3, WAIT).await;
    assert_eq!(slots(&second), [slot("h", 0), slot("h", 1), slot("h", 2)]);
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success);
    let events = cluster.events();
    assert_eq!(check_run(&events, &training).generation, 2);
    let mut back = rollbacks(&events);
    back.sort_unstable();
    assert_eq!(back, [(first[0].pid, 15), (first[2].pid, 15)]);
}

#[tokio::test(start_paused = true)]
async fn a_rejoin_its_coordinator_took_with_it_is_asked_again_of_the_next_one() {
    let Job {
        training,
        cluster,
        cfg,
        store,
        coordinator,
        first,
    } = three_workers_at_step_17().await;
    // The replacement will take 2 s to register: the next generation waits
    // for it, with the survivors' rejoins in hand, when the coordinator dies.
    cluster.slow_start(slot("h", 1), Duration::from_secs(2));
    cluster.kill(first[1].pid);
    let survivors = [first[0].pid, first[2].pid];
    cluster
        .wait_for(
            "the survivors rolled back and were told to reset",
            WAIT,
            |events| {
                let told = |pid: u32| {
                    let reset = |e: &Event| matches!(e, Event::Reset { pid: p, .. } if *p == pid);
                    let back =
                        |e: &Event| matches!(e, Event::RolledBack { pid: p, .. } if *p == pid);
                    events.iter().any(reset) && events.iter().any(back)
                };
                survivors.iter().all(|&p| told(p)).then_some(())
            },
        )
        .await;
    let slow = cluster
        .running()
        .into_iter()
        .find(|(pid, s)| *s == slot("h", 1) && !first.iter().any(|m| m.pid == *pid));
    let (slow, _) = slow.expect("the slow replacement runs");
    coordinator.crash();
    let coordinator = cluster.start_coordinator(&cfg, Box::new(store.clone()));
    coordinator.discover("h:3").await;
    // The survivors reattach and ask again to rejoin; the new coordinator
    // starts its own replacement. It knows the ranks of the live members
    // only (the job's record), so the replacement comes after them.
    let second = wait_generation(&cluster, 2, 3, WAIT).await;
    assert_eq!(slots(&second), [slot("h", 0), slot("h", 2), slot("h", 1)]);
    assert_eq!((second[0].pid, second[1].pid), (survivors[0], survivors[1]));
    assert!(second[2].pid != slow);
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success);
    let events = cluster.events();
    assert_eq!(check_run(&events, &training).generation, 2);
    // The old coordinator's replacement came up to find its slot taken.
    let refused = cluster
        .wait_for("the end of the old replacement", WAIT, |e| {
            exits(e).remove(&slow)
        })
        .await;
    let why = "stopped by the coordinator: h slot 1 is not a slot of this job";
    assert_eq!(refused, Exit::Failed { why: why.into() });
}

/// How [`BadStore`] fails its commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failing {
    /// At once, with an error.
    Refuse,
    /// By never answering.
    Hang,
}

/// A store whose commits fail.
#[derive(Debug)]
struct BadStore {
    inner: MemoryStore,
    failing: Failing,
}

impl Store for BadStore {
    fn load(&self) -> BoxFuture<'_, Result<Option<(Revision, JobState)>, StoreError>> {
        self.inner.load()
    }

    fn commit<'a>(
        &'a self,
        _expected: Option<Revision>,
        _state: &'a JobState,
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        match self.failing {
            Failing::Refuse => {
                let e = StoreError::Unavailable {
                    at: "bad".into(),
                    why: "refused by the test".into(),
                };
                async move { Err(e) }.boxed()
            }
            Failing::Hang => futures::future::pending().boxed(),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_whose_state_cannot_be_recorded_ends_before_any_assignment() {
    for failing in [Failing::Refuse, Failing::Hang] {
        let cluster = Cluster::new(Training::default());
        let cfg = elastic_job(&["--min-np", "2", "--max-np", "3"]);
        let store = Arc::new(BadStore {
            inner: MemoryStore::new(),
            failing,
        });
        let started = tokio::time::Instant::now();
        let coordinator = cluster.start_coordinator(&cfg, Box::new(store.clone()));
        coordinator.discover("h:3").await;
        let ending = coordinator.ending(&cluster, JOB).await;
        assert_eq!(ending, Ending::Failed, "{failing:?}");
        let events = cluster.events();
        // A hanging store holds the driver for its store timeout (10 s):
        // time enough for the workers to act on an assignment, had one been
        // sent before the commit.
        if failing == Failing::Hang {
            let waited = started.elapsed();
            assert!(waited >= Duration::from_secs(10), "{waited:?}");
        }
        assert!(generations(&events).is_empty(), "{failing:?}: assigned");
        // The workers registered (the first generation was due), then were
        // stopped with the job.
        let ends: Vec<Exit> = exits(&events).into_values().collect();
        assert_eq!(ends, vec![Exit::Signal(15); 3], "{failing:?}");
        assert!(store.load().await.unwrap().is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn a_fenced_coordinator_ends_the_job_without_acting_on_a_failure() {
    let training = Training::default();
    let cluster = Cluster::new(training);
    let cfg = elastic_job(&["--min-np", "2", "--max-np", "3"]);
    let store = Arc::new(MemoryStore::new());
    let coordinator = cluster.start_coordinator(&cfg, Box::new(store.clone()));
    coordinator.discover("h:3").await;
    let first = wait_generation(&cluster, 1, 3, WAIT).await;
    wait_step(&cluster, 1, 12, WAIT).await;
    // Another coordinator takes the job over: it commits on top.
    let (revision, state) = store.load().await.unwrap().unwrap();
    let theirs = store.commit(Some(revision), &state).await.unwrap();
    cluster.kill(first[2].pid);
    let ending = coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Failed);
    let events = cluster.events();
    // The failure was never acted on: no reset, no replacement, no next
    // generation (the survivors saw the peer die on their own).
    assert_eq!(
        generations(&events).keys().copied().collect::<Vec<_>>(),
        [1]
    );
    assert!(!events.iter().any(|e| matches!(e, Event::Reset { .. })));
    let started = events
        .iter()
        .filter(|e| matches!(e, Event::Started { .. }))
        .count();
    assert_eq!(started, 3);
    assert_eq!(store.load().await.unwrap().unwrap(), (theirs, state));
    for m in &first[..2] {
        assert_eq!(exits(&events)[&m.pid], Exit::Signal(15), "rank {}", m.rank);
    }
}

#[tokio::test(start_paused = true)]
async fn seeded_chaos_ends_as_the_membership_core_predicts() {
    for seed in chaos::seeds() {
        chaos::run(seed).await;
    }
}
