//! The durable facts of a job's membership, and resuming from them.
//!
//! A coordinator that restarts (or a standby that takes over) has lost its
//! processes and connections but must not lose what the job has decided:
//! the generation and its rank order, how many resets were spent, and each
//! host's failure history and blacklisting. [`Membership::snapshot`] takes
//! those facts; [`Membership::resume`] builds a core from them in which the
//! last generation's members are *detached*: they keep their ranks, and each
//! must [`Membership::reattached`] within the rejoin timeout (its worker
//! reconnected and said which generation it is in) or it has failed, as if
//! its connection had been lost. Times are durations since the job's epoch,
//! which is part of the durable state kept beside the snapshot, so a resumed
//! core's timers go on where they were.
//!
//! ```text
//!  Membership ──snapshot()──► Snapshot ──(store: commit / load)──► Snapshot
//!                                                                    │ resume(policy, now)
//!  members detached ◄───────────────────────────────────────────────┘
//!   ├─ reattached(slot, generation)      ─► member again, nothing to tell
//!   └─ not back within the rejoin timeout ─► failed: Reset, replaced
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::blacklist::HostRecord;
use super::machine::{Cause, Gathering, Membership, Phase, Worker, WorkerState};
use super::policy::Policy;
use super::{Command, Generation, SlotId};

/// What a job's membership must not forget.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Generation of the last `Assign` (0 before the first).
    pub generation: Generation,
    /// `Assign`s after the first.
    pub resets: u32,
    /// The last generation's members still live, in rank order.
    pub members: Vec<SlotId>,
    /// Spawn counter: newcomers rank after every worker spawned before.
    pub next_order: u64,
    /// Failure history and bans, per host that has had a failure.
    pub hosts: Vec<HostHistory>,
}

/// One host's failures and bans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostHistory {
    pub host: String,
    /// Times of recent failures (since the job's epoch), oldest first.
    pub failures: Vec<Duration>,
    /// How many times the host has been blacklisted.
    pub bans: u32,
    pub ban: Ban,
}

/// Whether a host is blacklisted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ban {
    None,
    Until(Duration),
    Forever,
}

impl Membership {
    /// The durable facts of this job now.
    pub fn snapshot(&self) -> Snapshot {
        let hosts = self
            .blacklist
            .records()
            .map(|(host, r)| HostHistory {
                host: host.clone(),
                failures: r.failures.clone(),
                bans: r.bans,
                ban: match r.banned {
                    None => Ban::None,
                    Some(Some(t)) => Ban::Until(t),
                    Some(None) => Ban::Forever,
                },
            })
            .collect();
        Snapshot {
            generation: self.generation,
            resets: self.resets,
            members: self.members.clone(),
            next_order: self.next_order,
            hosts,
        }
    }

    /// A core that goes on from `snapshot` at `now`: the members are detached
    /// until they reattach; with no members it gathers the next generation
    /// (the first, for a job that never had one). Feed it
    /// [`Membership::discovered`] next, as a new core.
    pub fn resume(policy: Policy, snapshot: &Snapshot, now: Duration) -> Self {
        let mut m = Membership::new(policy);
        for h in &snapshot.hosts {
            let record = HostRecord {
                failures: h.failures.clone(),
                bans: h.bans,
                banned: match h.ban {
                    Ban::None => None,
                    Ban::Until(t) => Some(Some(t)),
                    Ban::Forever => Some(None),
                },
            };
            m.blacklist.restore(h.host.clone(), record);
        }
        m.generation = snapshot.generation;
        m.resets = snapshot.resets;
        let mut seen = BTreeSet::new();
        m.members = snapshot
            .members
            .iter()
            .filter(|s| seen.insert((*s).clone()))
            .cloned()
            .collect();
        // The ranks as they were at the last commit (lost workers recorded
        // since are not: a replacement then takes its rank by host or at the
        // end, [`super::seats`]).
        m.seats = m.members.clone();
        for (order, slot) in m.members.iter().enumerate() {
            let worker = Worker {
                state: WorkerState::Member,
                order: order as u64,
                late: false,
                spare: false,
            };
            m.workers.insert(slot.clone(), worker);
            m.detached.insert(slot.clone(), now);
        }
        m.next_order = snapshot.next_order.max(m.members.len() as u64);
        m.phase = if m.members.is_empty() {
            Phase::Gathering(Gathering {
                next: m.generation.next(),
                cause: Cause::Failure,
                started: now,
                rejoined: BTreeSet::new(),
                tried: BTreeSet::new(),
                short_since: Some(now),
                overdue: false,
                counts: true,
            })
        } else {
            Phase::Stable
        };
        m
    }

    /// A detached member's worker is back (it reconnected) and says it is in
    /// `generation`. The current generation: it is a member again, nothing
    /// changes for the others. An older one (it had dropped out of a
    /// generation the coordinator never assigned): it has failed.
    pub fn reattached(
        &mut self,
        now: Duration,
        slot: &SlotId,
        generation: Generation,
    ) -> Vec<Command> {
        if !self.detached.contains_key(slot) {
            return Vec::new();
        }
        if generation == self.generation {
            self.detached.remove(slot);
            return Vec::new();
        }
        let why = format!(
            "reconnected in generation {generation}, not {}",
            self.generation
        );
        self.failed(now, slot, &why)
    }

    /// Detached members, with when each was detached.
    pub fn detached(&self) -> impl Iterator<Item = &SlotId> + '_ {
        self.detached.keys()
    }

    /// Detached members that have not reattached within the rejoin timeout.
    pub(super) fn reattach_timeouts(&self, now: Duration) -> Vec<(SlotId, String)> {
        let limit = self.policy.rejoin_timeout;
        let why = format!("did not reconnect within {}", super::fmt_secs(limit));
        self.detached
            .iter()
            .filter(|&(_, since)| now >= since.saturating_add(limit))
            .map(|(s, _)| (s.clone(), why.clone()))
            .collect()
    }

    /// When the first detached member runs out of time.
    pub(super) fn next_reattach_deadline(&self) -> Option<Duration> {
        let limit = self.policy.rejoin_timeout;
        self.detached
            .values()
            .map(|s| s.saturating_add(limit))
            .min()
    }
}
