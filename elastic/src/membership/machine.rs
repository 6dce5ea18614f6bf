//! [`Membership`]: the state, the events the driver feeds it, and its accessors.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::backoff::StartBackoff;
use super::blacklist::Blacklist;
use super::policy::{OnFailure, Policy};
use super::{Command, Generation, JobFailure, SlotId};
use crate::hosts::HostSlots;

/// The membership state machine of one elastic job; see the [module
/// docs](super) for the policy it follows.
#[derive(Debug)]
pub struct Membership {
    pub(super) policy: Policy,
    /// The last discovered hosts, in discovery order.
    pub(super) hosts: Vec<HostSlots>,
    /// The same, by name: how many slots each offers.
    pub(super) host_slots: BTreeMap<String, usize>,
    /// Which slots each host offers when they are not `0..n` (workers that
    /// registered by themselves, [`Membership::offered`]).
    pub(super) slot_sets: Option<BTreeMap<String, BTreeSet<u32>>>,
    pub(super) blacklist: Blacklist,
    /// Every live worker, by slot.
    pub(super) workers: BTreeMap<SlotId, Worker>,
    /// Live members of the current generation, in rank order.
    pub(super) members: Vec<SlotId>,
    /// The current generation's ranks as assigned, lost workers included:
    /// where survivors and replacements sit in the next ([`super::seats`]).
    pub(super) seats: Vec<SlotId>,
    pub(super) phase: Phase,
    /// Generation of the last `Assign` (0 before the first).
    pub(super) generation: Generation,
    pub(super) resets: u32,
    /// Spawn counter: newcomers are ranked in spawn order.
    pub(super) next_order: u64,
    /// Members of a resumed job whose workers have not reconnected yet.
    pub(super) detached: Detached,
    /// Some worker has registered (the program links the runtime).
    pub(super) runtime_seen: bool,
    /// A static job whose start timeout passed with no worker registered:
    /// its program does not use the runtime, and its processes are
    /// supervised until they exit, with no start timeout.
    pub(super) without_runtime: bool,
    /// Slots whose workers could not be started, waiting to be tried again.
    pub(super) start_backoff: StartBackoff,
    /// While settling is deferred ([`Membership::defer_settling`]): what
    /// the deferred settling is to do.
    pub(super) settle_later: Option<SettleLater>,
    /// While finishing: how many members, from rank 0, have finished. Each
    /// finish looks on from there, so the job's end at n ranks costs O(n)
    /// lookups, not O(n^2) (ranks tend to finish in rank order).
    pub(super) finished_prefix: usize,
}

/// A settling deferred: whether an event asked for it, and the slots
/// vacated meanwhile (preferred for replacements).
#[derive(Clone, Debug, Default)]
pub(super) struct SettleLater {
    pub(super) asked: bool,
    pub(super) prefer: Vec<SlotId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Worker {
    pub(super) state: WorkerState,
    /// Position in spawn order.
    pub(super) order: u64,
    /// A replacement for a failed worker that the next generation went on
    /// without ([`super::Policy::replacement_wait`]): placing it is the end
    /// of that recovery, not a reset of its own.
    pub(super) late: bool,
    /// Said to be a hot spare ([`Command::Spare`]), once.
    pub(super) spare: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WorkerState {
    /// `Spawn` was emitted at `since`; not registered yet.
    Spawned { since: Duration },
    /// Registered; waits to be placed in a generation.
    Registered,
    /// In the current generation.
    Member,
    /// A member that exited 0.
    Finished,
}

/// How many workers are in each state ([`Membership::worker_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerCounts {
    pub starting: usize,
    pub waiting: usize,
    pub members: usize,
}

#[derive(Debug)]
pub(super) enum Phase {
    /// Forming generation `next` (the first one too).
    Gathering(Gathering),
    /// The current generation runs.
    Stable,
    /// A member finished: no new generation; waiting for the others to finish.
    Finishing,
    /// `Finish` or `Fail` was emitted; every event is ignored.
    Done,
}

#[derive(Debug)]
pub(super) struct Gathering {
    /// The generation being formed.
    pub(super) next: Generation,
    /// What members were told: `HostsUpdated` until a member is lost.
    pub(super) cause: Cause,
    /// When `Reset`/`HostsUpdated` was sent: the rejoin timeout counts from here.
    pub(super) started: Duration,
    /// Members that have rejoined for `next`.
    pub(super) rejoined: BTreeSet<SlotId>,
    /// Slots spawned during this gathering (or pending when it began).
    pub(super) tried: BTreeSet<SlotId>,
    /// Since when fewer than `min_np` workers are live (job start for the first).
    pub(super) short_since: Option<Duration>,
    /// The elastic timeout has passed since `short_since`.
    pub(super) overdue: bool,
    /// Its `Assign` counts against the reset limit: not when it only places
    /// replacements the previous generation went on without.
    pub(super) counts: bool,
}

/// Why a new generation is gathered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cause {
    /// Workers failed: members drop the generation now (`Reset`).
    Failure,
    /// Hosts came or went: members rejoin at their next commit (`HostsUpdated`).
    HostsChanged,
}

/// The detached members, by slot, with when they were detached.
pub(super) type Detached = BTreeMap<SlotId, Duration>;

impl Membership {
    /// A job with no hosts yet: feed it [`Membership::discovered`] first (a static
    /// `-H` list or hostfile is discovered once, at time zero).
    pub fn new(policy: Policy) -> Self {
        let policy = policy.normalized();
        Self {
            blacklist: Blacklist::new(policy.blacklist.clone()),
            policy,
            hosts: Vec::new(),
            host_slots: BTreeMap::new(),
            slot_sets: None,
            workers: BTreeMap::new(),
            members: Vec::new(),
            seats: Vec::new(),
            phase: Phase::Gathering(Gathering {
                next: Generation(1),
                cause: Cause::HostsChanged,
                started: Duration::ZERO,
                rejoined: BTreeSet::new(),
                tried: BTreeSet::new(),
                short_since: Some(Duration::ZERO),
                overdue: false,
                counts: true,
            }),
            generation: Generation(0),
            resets: 0,
            next_order: 0,
            detached: Detached::new(),
            runtime_seen: false,
            without_runtime: false,
            start_backoff: StartBackoff::default(),
            settle_later: None,
            finished_prefix: 0,
        }
    }

    /// The current host set from discovery (replaces the previous set; a host listed
    /// twice counts once).
    pub fn discovered(&mut self, now: Duration, hosts: &[HostSlots]) -> Vec<Command> {
        let mut out = Vec::new();
        if matches!(self.phase, Phase::Done) {
            return out;
        }
        self.hosts.clear();
        self.host_slots.clear();
        self.slot_sets = None;
        for h in hosts {
            if !self.host_slots.contains_key(&h.host) {
                self.host_slots.insert(h.host.clone(), h.slots);
                self.hosts.push(h.clone());
            }
        }
        self.hosts_changed(now, &mut out);
        out
    }

    /// The hosts the job may use, as discovery (or the offered slots) last
    /// gave them, less a host lost since.
    pub fn hosts(&self) -> &[HostSlots] {
        &self.hosts
    }

    /// The slots offered now, when workers register by themselves (pods,
    /// each on a slot it claimed): the job's slots are exactly these, hosts
    /// in the order they first appear. Replaces the previous set; otherwise
    /// as [`Membership::discovered`].
    pub fn offered(&mut self, now: Duration, slots: &[SlotId]) -> Vec<Command> {
        let mut out = Vec::new();
        if matches!(self.phase, Phase::Done) {
            return out;
        }
        let mut sets: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        self.hosts.clear();
        for s in slots {
            if !sets.contains_key(&s.host) {
                self.hosts.push(HostSlots {
                    host: s.host.clone(),
                    slots: 0,
                });
            }
            sets.entry(s.host.clone()).or_default().insert(s.slot);
        }
        for h in &mut self.hosts {
            h.slots = sets.get(&h.host).map_or(0, BTreeSet::len);
        }
        self.host_slots = self
            .hosts
            .iter()
            .map(|h| (h.host.clone(), h.slots))
            .collect();
        self.slot_sets = Some(sets);
        self.hosts_changed(now, &mut out);
        out
    }

    /// What follows a new host or slot set.
    fn hosts_changed(&mut self, now: Duration, out: &mut Vec<Command>) {
        if matches!(self.phase, Phase::Finishing) {
            return;
        }
        self.stop_unusable_newcomers(out);
        if matches!(self.phase, Phase::Stable) && self.members.iter().any(|s| !self.usable(s)) {
            self.begin_gathering(now, Cause::HostsChanged, out);
        }
        self.settle(now, &[], out);
    }

    /// A spawned worker on `slot` connected and is ready to be placed.
    pub fn registered(&mut self, now: Duration, slot: &SlotId) -> Vec<Command> {
        let mut out = Vec::new();
        if matches!(self.phase, Phase::Done) {
            return out;
        }
        let Some(w) = self.workers.get_mut(slot) else {
            return out;
        };
        if !matches!(w.state, WorkerState::Spawned { .. }) {
            return out;
        }
        w.state = WorkerState::Registered;
        let late = std::mem::take(&mut w.late);
        self.start_backoff.started(slot);
        self.runtime_seen = true;
        if matches!(self.phase, Phase::Stable) {
            if self.is_spare() {
                // The generation is as large as it may be: a hot spare.
                self.mark_spare(slot, &mut out);
            } else if late {
                self.begin_late_join(now, &mut out);
            } else {
                self.begin_gathering(now, Cause::HostsChanged, &mut out);
            }
        }
        self.settle(now, &[], &mut out);
        out
    }

    /// Says, once, that the worker on `slot` is a hot spare.
    pub(super) fn mark_spare(&mut self, slot: &SlotId, out: &mut Vec<Command>) {
        if let Some(w) = self.workers.get_mut(slot)
            && !std::mem::replace(&mut w.spare, true)
        {
            out.push(Command::Spare { slot: slot.clone() });
        }
    }

    /// Whether a worker that registered while the generation runs is a hot
    /// spare: the generation is as large as it may be and the spares are not
    /// all there yet (itself counted among the registered).
    fn is_spare(&self) -> bool {
        let registered = self
            .workers
            .values()
            .filter(|w| w.state == WorkerState::Registered)
            .count();
        self.policy.hot_spares > 0
            && self.members.len() >= self.train_cap()
            && registered <= self.policy.hot_spares
    }

    /// A member of the current generation asks to join generation `generation` (it
    /// saw a peer fail, was told to `Reset`, or reached a commit after
    /// `HostsUpdated`).
    pub fn rejoined(
        &mut self,
        now: Duration,
        slot: &SlotId,
        generation: Generation,
    ) -> Vec<Command> {
        let mut out = Vec::new();
        if !self.is_member(slot) || generation != self.generation.next() {
            return out;
        }
        match self.phase {
            Phase::Done => return out,
            Phase::Gathering(_) => {}
            Phase::Stable => self.begin_gathering(now, Cause::Failure, &mut out),
            Phase::Finishing => {
                let why = format!("it asked to rejoin for generation {generation}");
                self.fail_after_finish(slot, why, &mut out);
            }
        }
        if let Phase::Gathering(g) = &mut self.phase {
            g.rejoined.insert(slot.clone());
        }
        self.settle(now, &[], &mut out);
        out
    }

    /// The worker on `slot` failed (exited non-zero, lost its control connection,
    /// went silent, stalled).
    pub fn failed(&mut self, now: Duration, slot: &SlotId, why: &str) -> Vec<Command> {
        let mut out = Vec::new();
        let ends_job = self.policy.on_failure == OnFailure::EndJob;
        match self.phase {
            Phase::Done => {}
            _ if ends_job => {
                let (slot, why) = (slot.clone(), why.to_owned());
                self.end(
                    Command::Fail(JobFailure::WorkerFailed { slot, why }),
                    &mut out,
                );
            }
            Phase::Finishing if self.is_member(slot) => {
                self.fail_after_finish(slot, why.to_owned(), &mut out);
            }
            Phase::Finishing => {}
            Phase::Stable | Phase::Gathering(_) => {
                if self.lose(now, slot, (None, false), &mut out) {
                    self.member_lost(now, &mut out);
                }
                self.settle(now, std::slice::from_ref(slot), &mut out);
            }
        }
        out
    }

    /// The member on `slot` is a straggler to take out (`--straggler-action
    /// replace`): its host is blacklisted at once (for the cooldown; unless
    /// the other hosts could not run the job, when only the worker is
    /// replaced), the worker is stopped and the job goes on without it, as
    /// after a failure. Only a member of an elastic job that trains.
    pub fn straggler(&mut self, now: Duration, slot: &SlotId, why: &str) -> Vec<Command> {
        let mut out = Vec::new();
        let replaces = self.policy.on_failure == OnFailure::Replace;
        if !replaces || !matches!(self.phase, Phase::Stable) || !self.is_member(slot) {
            return out;
        }
        if self.lose(now, slot, (Some(why.to_owned()), true), &mut out) {
            self.member_lost(now, &mut out);
        }
        self.settle(now, std::slice::from_ref(slot), &mut out);
        out
    }

    /// The worker on `slot` failed because its host is gone (a Slurm node
    /// failure): the host is left out at once, as if discovery had stopped
    /// listing it, so that no replacement is placed there; discovery's next
    /// host set decides again.
    pub fn host_lost(&mut self, now: Duration, slot: &SlotId, why: &str) -> Vec<Command> {
        if self.host_slots.remove(&slot.host).is_some() {
            self.hosts.retain(|h| h.host != slot.host);
            self.slot_sets = None;
        }
        let mut out = self.failed(now, slot, why);
        if !matches!(self.phase, Phase::Done) {
            self.hosts_changed(now, &mut out);
        }
        out
    }

    /// The worker on `slot` could not be started (the launcher failed):
    /// a failure of that worker, and its slot is not started again for a
    /// while, longer after each such failure in a row
    /// (`membership/backoff.rs`). Returns the commands and how many starts on
    /// the slot failed in a row.
    pub fn start_failed(&mut self, now: Duration, slot: &SlotId, why: &str) -> (Vec<Command>, u32) {
        let count = self.start_backoff.failed(now, slot);
        (self.failed(now, slot, why), count)
    }

    /// The worker on `slot` exited 0 (finished training). One that was not placed in
    /// a generation yet has failed.
    pub fn finished(&mut self, now: Duration, slot: &SlotId) -> Vec<Command> {
        if self.policy.on_failure == OnFailure::EndJob {
            return self.finished_in_static_job(slot);
        }
        match self.workers.get(slot).map(|w| w.state) {
            Some(WorkerState::Member) if !matches!(self.phase, Phase::Done) => {}
            Some(WorkerState::Spawned { .. } | WorkerState::Registered) => {
                return self.failed(now, slot, "exited 0 before it was placed in a generation");
            }
            _ => return Vec::new(),
        }
        let mut out = Vec::new();
        // A detached member that finished (while no coordinator led) is done.
        self.detached.remove(slot);
        if let Some(w) = self.workers.get_mut(slot) {
            w.state = WorkerState::Finished;
        }
        if !matches!(self.phase, Phase::Finishing) {
            self.begin_finishing(&mut out);
        }
        if all_finished(&self.members, &self.workers, &mut self.finished_prefix)
            && matches!(self.phase, Phase::Finishing)
        {
            self.end(Command::Finish, &mut out);
        }
        out
    }

    /// In a static job a worker that exits 0 has simply finished, placed or
    /// not (the program need not link the runtime: `elasticrun -np 2 hostname`),
    /// and the others go on; the job succeeds once every worker has finished.
    fn finished_in_static_job(&mut self, slot: &SlotId) -> Vec<Command> {
        let mut out = Vec::new();
        if matches!(self.phase, Phase::Done) {
            return out;
        }
        let Some(w) = self.workers.get_mut(slot) else {
            return out;
        };
        w.state = WorkerState::Finished;
        if self
            .workers
            .values()
            .all(|w| w.state == WorkerState::Finished)
        {
            self.end(Command::Finish, &mut out);
        }
        out
    }

    /// Generation of the last `Assign` (0 before the first).
    /// The policy it follows.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// `Assign`s after the first.
    pub fn resets(&self) -> u32 {
        self.resets
    }

    /// Members of the current generation, in rank order, less those lost since (a
    /// member that finished stays).
    pub fn members(&self) -> &[SlotId] {
        &self.members
    }

    /// The job's workers by state: started and not registered yet,
    /// registered and waiting for a place (hot spares, joiners), in the
    /// current generation (finished ones included).
    pub fn worker_counts(&self) -> WorkerCounts {
        let mut c = WorkerCounts::default();
        for w in self.workers.values() {
            match w.state {
                WorkerState::Spawned { .. } => c.starting += 1,
                WorkerState::Registered => c.waiting += 1,
                WorkerState::Member | WorkerState::Finished => c.members += 1,
            }
        }
        c
    }

    /// `Finish` or `Fail` was emitted: the job is over.
    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    pub(super) fn is_member(&self, slot: &SlotId) -> bool {
        self.workers
            .get(slot)
            .is_some_and(|w| w.state == WorkerState::Member)
    }

    /// Emits `Finish` or `Fail` and ignores everything after.
    pub(super) fn end(&mut self, last: Command, out: &mut Vec<Command>) {
        out.push(last);
        self.phase = Phase::Done;
    }

    fn fail_after_finish(&mut self, slot: &SlotId, why: String, out: &mut Vec<Command>) {
        let slot = slot.clone();
        self.end(
            Command::Fail(JobFailure::FailedAfterFinish { slot, why }),
            out,
        );
    }
}

/// Whether every member has finished, looking on from the `prefix` of
/// members known to have (which it advances; it starts again from rank 0
/// if the members changed under it).
fn all_finished(
    members: &[SlotId],
    workers: &BTreeMap<SlotId, Worker>,
    prefix: &mut usize,
) -> bool {
    let done = |s: &SlotId| {
        workers
            .get(s)
            .is_some_and(|w| w.state == WorkerState::Finished)
    };
    let valid =
        *prefix <= members.len() && (*prefix == 0 || members.get(*prefix - 1).is_some_and(done));
    let mut i = if valid { *prefix } else { 0 };
    while members.get(i).is_some_and(done) {
        i += 1;
    }
    *prefix = i;
    i == members.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(state: WorkerState) -> Worker {
        Worker {
            state,
            order: 0,
            late: false,
            spare: false,
        }
    }

    #[test]
    fn the_finished_prefix_moves_on_and_starts_again_when_members_change() {
        let members: Vec<SlotId> = (0..4).map(|i| SlotId::new("h", i)).collect();
        let mut workers: BTreeMap<SlotId, Worker> = (members.iter())
            .map(|s| (s.clone(), worker(WorkerState::Member)))
            .collect();
        let mut prefix = 0;
        let finish = |workers: &mut BTreeMap<SlotId, Worker>, i: usize| {
            if let Some(w) = workers.get_mut(&members[i]) {
                w.state = WorkerState::Finished;
            }
        };
        // Out of rank order: the prefix waits for rank 0.
        finish(&mut workers, 2);
        assert!(!all_finished(&members, &workers, &mut prefix));
        assert_eq!(prefix, 0);
        finish(&mut workers, 0);
        finish(&mut workers, 1);
        assert!(!all_finished(&members, &workers, &mut prefix));
        assert_eq!(prefix, 3, "ranks 0 to 2 have finished");
        finish(&mut workers, 3);
        assert!(all_finished(&members, &workers, &mut prefix));
        assert_eq!(prefix, 4);
        // Members that are not what the prefix counted: looked at afresh.
        let others = vec![SlotId::new("g", 0), members[0].clone()];
        workers.insert(others[0].clone(), worker(WorkerState::Member));
        let mut stale = 1;
        assert!(!all_finished(&others, &workers, &mut stale));
        assert_eq!(stale, 0);
    }
}
