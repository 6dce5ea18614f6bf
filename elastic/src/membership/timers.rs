//! Timers: start and rejoin timeouts (a `HostsUpdated` gathering's first one
//! turns it into a `Reset`), cooldown expiry and the elastic timeout. They fire
//! only in [`Membership::tick`]; [`Membership::next_deadline`] says when.

use std::time::Duration;

use super::machine::{Cause, Membership, Phase};
use super::policy::OnFailure;
use super::{Command, Generation, JobFailure, SlotId, fmt_secs};

impl Membership {
    /// Timers: start and rejoin timeouts, cooldown expiry, the elastic timeout.
    pub fn tick(&mut self, now: Duration) -> Vec<Command> {
        let mut out = Vec::new();
        if matches!(self.phase, Phase::Done) {
            return out;
        }
        let mut vacated = self.start_timeouts(now);
        if !vacated.is_empty() && self.policy.on_failure == OnFailure::EndJob && !self.runtime_seen
        {
            // Nobody registered: a program that does not use the runtime.
            self.without_runtime = true;
            out.push(Command::WithoutRuntime {
                after: self.policy.start_timeout,
            });
            vacated.clear();
        }
        if !vacated.is_empty() && self.policy.on_failure == OnFailure::EndJob {
            let failure = JobFailure::StartTimeout {
                after: self.policy.start_timeout,
                expected: self.workers.len(),
                missing: self.pending_spawns().map(|(s, _)| s.clone()).collect(),
            };
            self.end(Command::Fail(failure), &mut out);
            return out;
        }
        if !self.escalate_overdue_update(now, &mut out) {
            vacated.extend(self.rejoin_timeouts(now));
        }
        vacated.extend(self.reattach_timeouts(now));
        let mut lost_member = false;
        for (slot, why) in &vacated {
            lost_member |= self.lose(now, slot, (Some(why.clone()), false), &mut out);
        }
        if lost_member {
            self.member_lost(now, &mut out);
        }
        for host in self.blacklist.readmit_expired(now) {
            out.push(Command::Readmitted { host });
        }
        // A slot whose wait after a failed start is over is filled by the
        // settle below.
        self.start_backoff.expire(now);
        let elastic = self.policy.elastic_timeout;
        if let Phase::Gathering(g) = &mut self.phase
            && g.short_since
                .is_some_and(|s| now >= s.saturating_add(elastic))
        {
            g.overdue = true;
        }
        let vacated: Vec<SlotId> = vacated.into_iter().map(|(s, _)| s).collect();
        self.settle(now, &vacated, &mut out);
        out
    }

    fn start_timeouts(&self, now: Duration) -> Vec<(SlotId, String)> {
        if self.without_runtime {
            return Vec::new();
        }
        let limit = self.policy.start_timeout;
        let why = format!("did not register within {}", fmt_secs(limit));
        self.pending_spawns()
            .filter(|&(_, since)| now >= since.saturating_add(limit))
            .map(|(s, _)| (s.clone(), why.clone()))
            .collect()
    }

    /// Members told `HostsUpdated` that have not reached their commit within the
    /// rejoin timeout may be waiting in a collective on workers that will never
    /// get there (on a host that left discovery because it vanished from the
    /// network): they are told to `Reset` for the same generation, and the rejoin
    /// timeout starts again, instead of failing. Whether that happened.
    fn escalate_overdue_update(&mut self, now: Duration, out: &mut Vec<Command>) -> bool {
        let limit = self.policy.rejoin_timeout;
        let Phase::Gathering(g) = &self.phase else {
            return false;
        };
        let overdue = g.cause == Cause::HostsChanged
            && g.next > Generation(1)
            && now >= g.started.saturating_add(limit)
            && self.not_rejoined(g).next().is_some();
        if !overdue {
            return false;
        }
        if let Phase::Gathering(g) = &mut self.phase {
            g.cause = Cause::Failure;
            g.started = now;
            out.push(Command::Reset { generation: g.next });
        }
        true
    }

    fn rejoin_timeouts(&self, now: Duration) -> Vec<(SlotId, String)> {
        let limit = self.policy.rejoin_timeout;
        let Phase::Gathering(g) = &self.phase else {
            return Vec::new();
        };
        if now < g.started.saturating_add(limit) {
            return Vec::new();
        }
        let why = format!(
            "did not rejoin for generation {} within {}",
            g.next,
            fmt_secs(limit)
        );
        self.not_rejoined(g)
            .map(|s| (s.clone(), why.clone()))
            .collect()
    }

    /// When [`Membership::tick`] next has something to do (`None`: nothing timed).
    pub fn next_deadline(&self) -> Option<Duration> {
        if matches!(self.phase, Phase::Done) {
            return None;
        }
        let p = &self.policy;
        let spawns = self
            .pending_spawns()
            .filter(|_| !self.without_runtime)
            .map(|(_, since)| since.saturating_add(p.start_timeout));
        let mut gathering = Vec::new();
        if let Phase::Gathering(g) = &self.phase {
            if self.not_rejoined(g).next().is_some() {
                gathering.push(g.started.saturating_add(p.rejoin_timeout));
            }
            if let (Some(s), false) = (g.short_since, g.overdue) {
                gathering.push(s.saturating_add(p.elastic_timeout));
            }
            gathering.extend(self.replacement_deadline(g));
        }
        // A timeout of Duration::MAX (a static job's elastic timeout) never
        // comes.
        spawns
            .chain(gathering)
            .chain(self.next_reattach_deadline())
            .chain(self.blacklist.next_expiry())
            .chain(self.start_backoff.next_expiry())
            .filter(|&d| d != Duration::MAX)
            .min()
    }
}
