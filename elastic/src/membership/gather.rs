//! Gathering the next generation: starting it, losing workers, assigning ranks, and
//! finishing.
//!
//! ```text
//!            Reset / HostsUpdated                all rejoined, spawns registered
//!  Stable ───────────────────────► Gathering ───────────────────────────────► Stable
//!    │  (failure, early rejoin,     │  ▲ failures shrink it;                  (Assign g+1)
//!    │   registration, host gone)   │  └ too few live: wait ≤ elastic timeout ─► Fail
//!    └─ a member exits 0 ─► Finishing ─ all members exited 0 ─► Finish
//! ```

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use super::machine::{Cause, Gathering, Membership, Phase, SettleLater, Worker, WorkerState};
use super::{Command, Generation, JobFailure, SlotId};

impl Membership {
    /// Announces generation `g+1` to the members, or fails the job when that would
    /// pass the reset limit.
    pub(super) fn begin_gathering(&mut self, now: Duration, cause: Cause, out: &mut Vec<Command>) {
        if self.reset_limit_reached(out) {
            return;
        }
        self.gather(now, cause, true, out);
    }

    /// Announces generation `g+1` to place replacements that registered after
    /// the generation they were started for went on without them: members
    /// rejoin at their next commit, and it does not count as a reset.
    pub(super) fn begin_late_join(&mut self, now: Duration, out: &mut Vec<Command>) {
        self.gather(now, Cause::HostsChanged, false, out);
    }

    /// Ends the job when the reset limit is reached; whether it did.
    fn reset_limit_reached(&mut self, out: &mut Vec<Command>) -> bool {
        match self.policy.reset_limit {
            Some(limit) if self.resets >= limit => {
                self.end(Command::Fail(JobFailure::ResetLimit { limit }), out);
                true
            }
            _ => false,
        }
    }

    fn gather(&mut self, now: Duration, cause: Cause, counts: bool, out: &mut Vec<Command>) {
        let next = self.generation.next();
        out.push(match cause {
            Cause::Failure => Command::Reset { generation: next },
            Cause::HostsChanged => Command::HostsUpdated { generation: next },
        });
        let tried = self.pending_spawns().map(|(s, _)| s.clone()).collect();
        self.phase = Phase::Gathering(Gathering {
            next,
            cause,
            started: now,
            rejoined: BTreeSet::new(),
            tried,
            short_since: None,
            overdue: false,
            counts,
        });
    }

    /// A member failed: the others must drop the generation now. From `Stable` that
    /// starts a gathering; a gathering begun by `HostsUpdated` (members still train
    /// towards their next commit, which they can no longer reach) becomes a `Reset`
    /// for the same generation; a `Reset` gathering just shrinks.
    pub(super) fn member_lost(&mut self, now: Duration, out: &mut Vec<Command>) {
        match &mut self.phase {
            Phase::Stable => self.begin_gathering(now, Cause::Failure, out),
            Phase::Gathering(g) if g.cause == Cause::HostsChanged && g.next > Generation(1) => {
                g.cause = Cause::Failure;
                let counted = std::mem::replace(&mut g.counts, true);
                let next = g.next;
                if !counted && self.reset_limit_reached(out) {
                    return;
                }
                out.push(Command::Reset { generation: next });
            }
            _ => {}
        }
    }

    /// Forgets the failed worker on `slot` (`stop`: why the driver must stop it) and
    /// counts the failure against its host, which may blacklist the host and stop its
    /// other workers (`ban`: blacklists it at once). Returns whether a member was lost.
    pub(super) fn lose(
        &mut self,
        now: Duration,
        slot: &SlotId,
        (stop, ban): (Option<String>, bool),
        out: &mut Vec<Command>,
    ) -> bool {
        let Some(worker) = self.forget(slot) else {
            return false;
        };
        if let Some(why) = stop {
            out.push(Command::Stop {
                slot: slot.clone(),
                why,
            });
        }
        let mut lost_member = worker.state == WorkerState::Member;
        let host = &slot.host;
        // Blacklisting the host the job cannot do without (a single machine)
        // would only end the job later: its workers are replaced instead.
        let elsewhere = self.usable_count_without(host);
        let may_ban = elsewhere >= self.policy.min_np;
        let banned = if ban {
            self.blacklist.ban(now, host).filter(|_| may_ban)
        } else {
            self.blacklist.record_failure(now, host, may_ban)
        };
        if let Some(until) = banned {
            out.push(Command::Blacklisted {
                host: host.clone(),
                until,
            });
            let why = format!("host {host} is blacklisted");
            let on_host: Vec<SlotId> = self
                .workers
                .keys()
                .filter(|s| &s.host == host)
                .cloned()
                .collect();
            for other in on_host {
                if let Some(w) = self.forget(&other) {
                    lost_member |= w.state == WorkerState::Member;
                    let why = why.clone();
                    out.push(Command::Stop { slot: other, why });
                }
            }
        }
        lost_member
    }

    fn forget(&mut self, slot: &SlotId) -> Option<Worker> {
        let worker = self.workers.remove(slot)?;
        self.members.retain(|s| s != slot);
        self.detached.remove(slot);
        if let Phase::Gathering(g) = &mut self.phase {
            g.rejoined.remove(slot);
        }
        Some(worker)
    }

    /// Stops workers that are not members and whose slot is no longer usable.
    pub(super) fn stop_unusable_newcomers(&mut self, out: &mut Vec<Command>) {
        let gone: Vec<SlotId> = self
            .workers
            .iter()
            .filter(|(s, w)| w.state != WorkerState::Member && !self.usable(s))
            .map(|(s, _)| s.clone())
            .collect();
        for slot in gone {
            let why = match self.host_slots.get(&slot.host) {
                Some(n) => format!("host {} now offers {n} slots", slot.host),
                None => format!("host {} left discovery", slot.host),
            };
            self.forget(&slot);
            out.push(Command::Stop { slot, why });
        }
    }

    /// A member exited 0: no new generation from now on. Pending spawns and
    /// newcomers are stopped; a member already waiting for the next generation
    /// cannot finish any more, which fails the job.
    pub(super) fn begin_finishing(&mut self, out: &mut Vec<Command>) {
        let waiting = match &self.phase {
            Phase::Gathering(g) => self
                .members
                .iter()
                .find(|s| g.rejoined.contains(*s) && self.is_member(s))
                .map(|s| (s.clone(), g.next)),
            _ => None,
        };
        self.phase = Phase::Finishing;
        self.finished_prefix = 0;
        let newcomers: Vec<SlotId> = self
            .workers
            .iter()
            .filter(|(_, w)| {
                matches!(
                    w.state,
                    WorkerState::Spawned { .. } | WorkerState::Registered
                )
            })
            .map(|(s, _)| s.clone())
            .collect();
        for slot in newcomers {
            self.forget(&slot);
            let why = "training finished".to_owned();
            out.push(Command::Stop { slot, why });
        }
        if let Some((slot, next)) = waiting {
            let why = format!("it was waiting for generation {next}");
            self.end(
                Command::Fail(JobFailure::FailedAfterFinish { slot, why }),
                out,
            );
        }
    }

    /// After every event: spawn what is missing, note when too few are live, and
    /// assign (or fail) when the gathering is over.
    pub(super) fn settle(&mut self, now: Duration, prefer: &[SlotId], out: &mut Vec<Command>) {
        if let Some(later) = &mut self.settle_later {
            later.asked = true;
            later.prefer.extend_from_slice(prefer);
            return;
        }
        let filled = self.fill(now, prefer, out);
        let unmarked = matches!(&self.phase, Phase::Gathering(g) if g.short_since.is_none());
        if unmarked
            && filled.unwrap_or_else(|| self.placeable_live()) < self.policy.min_np
            && let Phase::Gathering(g) = &mut self.phase
        {
            g.short_since = Some(now);
        }
        self.try_assign(now, out);
    }

    /// Defers what follows each event (spawning what is missing, assigning a
    /// gathered generation) until [`Membership::settle_deferred`]: a driver
    /// that takes a batch of events settles once for the batch, not once an
    /// event, which looks at every worker each time.
    pub fn defer_settling(&mut self) {
        self.settle_later.get_or_insert_with(SettleLater::default);
    }

    /// Settles what was deferred since [`Membership::defer_settling`], the
    /// slots vacated meanwhile preferred for replacements; settling is no
    /// longer deferred.
    pub fn settle_deferred(&mut self, now: Duration) -> Vec<Command> {
        let mut out = Vec::new();
        if let Some(later) = self.settle_later.take()
            && later.asked
        {
            self.settle(now, &later.prefer, &mut out);
        }
        out
    }

    fn try_assign(&mut self, now: Duration, out: &mut Vec<Command>) {
        let Phase::Gathering(g) = &self.phase else {
            return;
        };
        // Whether any member is still to rejoin: found after a few members
        // while most are, where counting them all is a pass over every
        // member at every settling.
        let pending = self.not_rejoined(g).next().is_some();
        if pending && !g.overdue {
            // Members still to rejoin: nothing to assign or fail yet (and
            // no need to order the ready, thousands of them at scale, at
            // every settling while they come in).
            return;
        }
        let pending_members = if pending {
            self.not_rejoined(g).count()
        } else {
            0
        };
        let ready = self.ready(g);
        // After a failure, replacements still starting are left to join
        // later once the survivors have waited `replacement_wait` for them.
        // A generation already as large as it may be (a hot spare took the
        // failed member's place) waits for no spawn: those are spares.
        let no_spawns = self.pending_spawns().next().is_none()
            || self.replacement_deadline(g).is_some_and(|d| now >= d)
            || (g.next > Generation(1) && ready.len() >= self.train_cap());
        let min_np = self.policy.min_np;
        let enough = ready.len() >= self.threshold(g.next);
        if pending_members == 0 && ((no_spawns && enough) || (g.overdue && ready.len() >= min_np)) {
            let (next, counts) = (g.next, g.counts);
            // Replacements still starting after a failure join later.
            let left_behind: Vec<SlotId> = match g.cause {
                Cause::Failure => self.pending_spawns().map(|(s, _)| s.clone()).collect(),
                Cause::HostsChanged => Vec::new(),
            };
            self.assign(now, next, counts, ready, out);
            for slot in &left_behind {
                if let Some(w) = self.workers.get_mut(slot) {
                    w.late = true;
                }
            }
        } else if g.overdue && ready.len() + pending_members < min_np {
            let waited = now.saturating_sub(g.short_since.unwrap_or_default());
            let have = ready.len();
            let failure = JobFailure::TooFewWorkers {
                have,
                min_np,
                waited,
            };
            self.end(Command::Fail(failure), out);
        }
    }

    /// When a gathering that waits only for replacements still starting will
    /// go on without them ([`Policy::replacement_wait`] after the last was
    /// started): after a failure, once every survivor has rejoined and they
    /// are enough.
    ///
    /// [`Policy::replacement_wait`]: super::Policy::replacement_wait
    pub(super) fn replacement_deadline(&self, g: &Gathering) -> Option<Duration> {
        let waits_for_spawns = g.cause == Cause::Failure
            && g.next > Generation(1)
            && self.pending_spawns().next().is_some();
        let all_rejoined = self.not_rejoined(g).next().is_none();
        if !(waits_for_spawns && all_rejoined && self.ready(g).len() >= self.threshold(g.next)) {
            return None;
        }
        // Each replacement gets the wait from when it was started.
        self.pending_spawns()
            .map(|(_, since)| since.saturating_add(self.policy.replacement_wait))
            .max()
    }

    /// Members on usable slots that have not rejoined for the gathering's
    /// generation yet.
    pub(super) fn not_rejoined<'a>(&'a self, g: &'a Gathering) -> impl Iterator<Item = &'a SlotId> {
        self.members
            .iter()
            .filter(move |s| self.usable(s) && !g.rejoined.contains(*s))
    }

    /// Rejoined members on usable slots and newcomers, in the next
    /// generation's rank order ([`super::seats`]: survivors keep their ranks,
    /// replacements take those of the workers they replace), newcomers past
    /// [`Membership::train_cap`] last (see [`Membership::assign`]).
    fn ready(&self, g: &Gathering) -> Vec<SlotId> {
        let survivors = self
            .members
            .iter()
            .filter(|s| self.usable(s) && g.rejoined.contains(*s))
            .cloned()
            .collect();
        let mut newcomers: Vec<(&SlotId, u64)> = self
            .workers
            .iter()
            .filter(|(_, w)| w.state == WorkerState::Registered)
            .map(|(s, w)| (s, w.order))
            .collect();
        newcomers.sort_by_key(|&(_, order)| order);
        let newcomers = newcomers.into_iter().map(|(s, _)| s.clone()).collect();
        super::seats::seat(&self.seats, survivors, newcomers, self.train_cap())
    }

    /// Starts generation `next` with the first [`Membership::train_cap`] of
    /// `ready`. Members not placed (their slot left discovery) get `Leave`;
    /// newcomers over the cap stay registered as hot spares, as many as
    /// the policy keeps, and the others (possible when a host comes back while
    /// its replacement was spawned) get `Leave`.
    fn assign(
        &mut self,
        now: Duration,
        next: Generation,
        counts: bool,
        mut ranks: Vec<SlotId>,
        out: &mut Vec<Command>,
    ) {
        let surplus = ranks.split_off(ranks.len().min(self.train_cap()));
        // Sets, not searches of the lists: thousands of members at scale.
        let placed: HashSet<&SlotId> = ranks.iter().collect();
        let mut leavers: Vec<SlotId> = self
            .members
            .iter()
            .filter(|s| !placed.contains(s))
            .cloned()
            .collect();
        let mut newcomers: Vec<SlotId> = if surplus.is_empty() {
            Vec::new()
        } else {
            let members: HashSet<&SlotId> = self.members.iter().collect();
            (surplus.into_iter())
                .filter(|s| !members.contains(s))
                .collect()
        };
        let spares: Vec<SlotId> = newcomers
            .drain(..newcomers.len().min(self.policy.hot_spares))
            .collect();
        leavers.extend(newcomers);
        for slot in &ranks {
            if let Some(w) = self.workers.get_mut(slot) {
                w.state = WorkerState::Member;
            }
        }
        if next > Generation(1) && counts {
            self.resets = self.resets.saturating_add(1);
        }
        self.generation = next;
        self.members = ranks.clone();
        self.seats = ranks.clone();
        self.phase = Phase::Stable;
        out.push(Command::Assign {
            generation: next,
            ranks,
        });
        for slot in leavers {
            self.workers.remove(&slot);
            out.push(Command::Leave { slot });
        }
        for slot in &spares {
            self.mark_spare(slot, out);
        }
        self.fill(now, &[], out);
    }
}
