//! The seeded chaos run: a job on the in-process cluster goes through
//! [`ACTIONS`] changes chosen by a seed (kill a member, add a host, remove a
//! host, restart the coordinator from its store), one at a time, each once
//! the generation before it runs. What the membership core must make of each
//! is known in advance: a kill is a reset whose replacement takes the same
//! slot, a host added or removed is a host update, a restart changes
//! nothing; so the test predicts every generation's slots and the last
//! generation's number, and checks the run against them.
//!
//! The seed is `ELASTICRUN_TEST_SEED` when set (that run only), else each of
//! [`DEFAULT_SEEDS`]; it is printed before its run, with every choice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use coordinator::config::JobConfig;
use coordinator::job::Ending;
use coordinator::store::MemoryStore;
use elastic::SlotId;
use integration_tests::cluster::checks::{
    Member, check_run, first_step, wait_generation, wait_step,
};
use integration_tests::cluster::{Cluster, Coordinator, Event, Training, elastic_job};
use integration_tests::elastic::{Chaos, SEED_VAR};

use super::{JOB, WAIT};

/// Seeds run when none is given.
const DEFAULT_SEEDS: [u64; 8] = [1, 2, 3, 5, 8, 13, 21, 34];
/// Changes per run.
const ACTIONS: usize = 6;
const MIN_NP: usize = 2;
const MAX_NP: usize = 5;
/// A host with this many failures gets no further kill: one more within
/// the blacklist window (60 s) would blacklist it, which this test does not
/// predict.
const KILLS_PER_HOST: u32 = 2;

/// The seeds to run.
pub(crate) fn seeds() -> Vec<u64> {
    match std::env::var(SEED_VAR) {
        Ok(text) => vec![
            text.trim()
                .parse()
                .unwrap_or_else(|e| panic!("{SEED_VAR}={text:?} is not a u64 seed: {e}")),
        ],
        Err(_) => DEFAULT_SEEDS.to_vec(),
    }
}

#[derive(Clone, Debug)]
enum Action {
    Kill { pid: u32, slot: SlotId },
    Grow { host: String, slots: usize },
    Shrink { host: String },
    Restart,
}

/// The hosts the test offers, and what the core must make of them.
#[derive(Debug)]
struct Plan {
    /// In discovery order; never more slots in all than `MAX_NP`, so that
    /// every slot runs a member.
    hosts: Vec<(String, usize)>,
    kills: BTreeMap<String, u32>,
    /// The generation the job must be in.
    generation: u64,
    added: usize,
}

impl Plan {
    fn list(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(|(h, n)| format!("{h}:{n}")).collect();
        hosts.join(",")
    }

    fn total(&self) -> usize {
        self.hosts.iter().map(|(_, n)| n).sum()
    }

    fn slots(&self) -> BTreeSet<SlotId> {
        let mut out = BTreeSet::new();
        for (h, n) in &self.hosts {
            for s in 0..*n {
                out.insert(SlotId::new(h.as_str(), u32::try_from(s).unwrap()));
            }
        }
        out
    }

    /// What may happen next, given the members now.
    fn choices(&mut self, members: &[Member]) -> Vec<Action> {
        let mut out = Vec::new();
        for m in members {
            if self.kills.get(&m.slot.host).copied().unwrap_or(0) < KILLS_PER_HOST {
                let (pid, slot) = (m.pid, m.slot.clone());
                out.push(Action::Kill { pid, slot });
            }
        }
        if self.total() < MAX_NP {
            let host = format!("c{}", self.added);
            let slots = (MAX_NP - self.total()).min(2);
            out.push(Action::Grow { host, slots });
        }
        for (host, n) in &self.hosts {
            if self.hosts.len() > 1 && self.total() - n >= MIN_NP {
                let host = host.clone();
                out.push(Action::Shrink { host });
            }
        }
        out.push(Action::Restart);
        out
    }
}

/// A job under chaos.
struct Job {
    cluster: Cluster,
    cfg: JobConfig,
    store: Arc<MemoryStore>,
    coordinator: Coordinator,
    plan: Plan,
}

impl Job {
    /// Carries `action` out on the job whose generation has `members`.
    async fn act(&mut self, action: Action, members: &[Member]) {
        let plan = &mut self.plan;
        match action {
            Action::Kill { pid, slot } => {
                self.cluster.kill(pid);
                *plan.kills.entry(slot.host).or_default() += 1;
                plan.generation += 1;
            }
            Action::Grow { host, slots } => {
                plan.hosts.push((host, slots));
                plan.added += 1;
                self.coordinator.discover(&plan.list()).await;
                plan.generation += 1;
            }
            Action::Shrink { host } => {
                plan.hosts.retain(|(h, _)| *h != host);
                self.coordinator.discover(&plan.list()).await;
                plan.generation += 1;
            }
            Action::Restart => {
                let mark = self.cluster.events().len();
                self.coordinator.crash();
                let store = Box::new(self.store.clone());
                self.coordinator = self.cluster.start_coordinator(&self.cfg, store);
                self.coordinator.discover(&plan.list()).await;
                wait_reconnected(&self.cluster, members, mark).await;
            }
        }
    }
}

/// One seeded run.
pub(crate) async fn run(seed: u64) {
    eprintln!("chaos seed: {seed} ({SEED_VAR}={seed} to replay)");
    let mut chaos = Chaos::with_seed(seed);
    let training = Training {
        steps: 150,
        ..Training::default()
    };
    let cluster = Cluster::new(training);
    let max_np = MAX_NP.to_string();
    let cfg = elastic_job(&["--min-np", "2", "--max-np", &max_np]);
    let store = Arc::new(MemoryStore::new());
    let coordinator = cluster.start_coordinator(&cfg, Box::new(store.clone()));
    let plan = Plan {
        hosts: vec![("a".into(), 2), ("b".into(), 1)],
        kills: BTreeMap::new(),
        generation: 1,
        added: 0,
    };
    coordinator.discover(&plan.list()).await;
    let mut job = Job {
        cluster,
        cfg,
        store,
        coordinator,
        plan,
    };
    let cluster = job.cluster.clone();
    let mut members = wait_generation(&cluster, 1, job.plan.total(), WAIT).await;
    for _ in 0..ACTIONS {
        let g = job.plan.generation;
        let what = format!("a step in generation {g}");
        let from = cluster.wait_for(&what, WAIT, |e| first_step(e, g)).await;
        wait_step(&cluster, g, from + 2 + chaos.below(6), WAIT).await;
        let choices = job.plan.choices(&members);
        let pick = usize::try_from(chaos.below(choices.len() as u64)).unwrap();
        let action = choices[pick].clone();
        eprintln!("seed {seed}, generation {g}: {action:?}");
        job.act(action, &members).await;
        let (g, size) = (job.plan.generation, job.plan.total());
        members = wait_generation(&cluster, g, size, WAIT).await;
        let got: BTreeSet<SlotId> = members.iter().map(|m| m.slot.clone()).collect();
        assert_eq!(got, job.plan.slots(), "seed {seed}: generation {g}");
    }
    let ending = job.coordinator.ending(&cluster, JOB).await;
    assert_eq!(ending, Ending::Success, "seed {seed}");
    let finish = check_run(&cluster.events(), &training);
    assert_eq!(finish.generation, job.plan.generation, "seed {seed}");
    let last: BTreeSet<SlotId> = finish.members.iter().map(|m| m.slot.clone()).collect();
    assert_eq!(last, job.plan.slots(), "seed {seed}");
}

/// Waits until every one of `members` has reconnected since event `mark`.
async fn wait_reconnected(cluster: &Cluster, members: &[Member], mark: usize) {
    cluster
        .wait_for("every member reconnected", WAIT, |events| {
            let back: BTreeSet<u32> = events[mark..]
                .iter()
                .filter_map(|e| match e {
                    Event::Reconnected { pid, .. } => Some(*pid),
                    _ => None,
                })
                .collect();
            members.iter().all(|m| back.contains(&m.pid)).then_some(())
        })
        .await;
}
