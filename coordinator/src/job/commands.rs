//! Carrying out the membership core's commands.

use std::collections::HashMap;
use std::net::IpAddr;

use control::{CoordinatorMsg, Generation, PeerAddress};
use elastic::membership::{Command, SlotId};
use tokio::time::Instant;

use super::assign::{AssignmentBase, assignments};
use super::driver::Driver;
use super::say::count;
use crate::job::Ending;
use crate::launch::address::{is_this_machine, source_address_towards};
use crate::metrics::{JobState, ResetCause};
use crate::stall::Inspector;
use crate::straggler::Detector;

impl Driver {
    /// Carries out `cmds`, and whatever the core answers to what happens
    /// while doing so (a spawn that fails is a failure of that slot).
    pub(super) async fn carry_out(&mut self, cmds: Vec<Command>) {
        let mut queue: std::collections::VecDeque<Command> = cmds.into();
        while let Some(cmd) = queue.pop_front() {
            queue.extend(self.one(cmd).await);
        }
    }

    async fn one(&mut self, cmd: Command) -> Vec<Command> {
        let durable = matches!(
            cmd,
            Command::Assign { .. }
                | Command::Reset { .. }
                | Command::HostsUpdated { .. }
                | Command::Blacklisted { .. }
        );
        if durable
            && self.ending.is_none()
            && let Err(e) = self.journal.record(self.core.snapshot()).await
        {
            self.not_recorded(&e);
        }
        if self.ending.is_some() && !matches!(cmd, Command::Finish | Command::Fail(_)) {
            return Vec::new();
        }
        match cmd {
            Command::Spawn(slot) => return self.spawn(&slot).await,
            Command::Stop { slot, why } => {
                // The job goes on without it: say which worker and why (a
                // member that did not reconnect to a new leader, a host gone).
                self.say
                    .line(format_args!("stopping the worker on {slot}: {why}"));
                self.workers
                    .tell(&slot, CoordinatorMsg::Stop { reason: why });
                self.workers.retire(&slot);
            }
            Command::Reset { generation } => self.announce(CoordinatorMsg::Reset { generation }),
            Command::HostsUpdated { generation } => {
                self.say.line(format_args!(
                    "hosts changed; workers move to generation {generation} at their next commit"
                ));
                self.announce(CoordinatorMsg::HostsUpdated { generation });
            }
            Command::Assign { generation, ranks } => return self.assign(generation, &ranks),
            Command::Leave { slot } => {
                if let Some(live) = self.workers.get_mut(&slot) {
                    live.leaving = true;
                }
                let reason = format!("{slot} has no place in the new generation");
                self.workers.tell(&slot, CoordinatorMsg::Leave { reason });
            }
            Command::Blacklisted { host, until } => {
                self.metrics.blacklisted(true);
                self.say_blacklisted(&host, until);
            }
            Command::Spare { slot } => {
                self.say.line(format_args!(
                    "worker on {slot} waits as a hot spare (--hot-spares)"
                ));
            }
            Command::Readmitted { host } => {
                self.host_change = ResetCause::HostsAdded;
                self.metrics.blacklisted(false);
                self.say
                    .line(format_args!("host {host} is back from the blacklist"));
            }
            Command::WithoutRuntime { after } => self.say.line(format_args!(
                "no worker registered within {} (--start-timeout): the program does not use \
                 elasticrun's runtime; supervising its processes until they exit",
                elastic::membership::fmt_secs(after)
            )),
            Command::Finish => {
                self.metrics.set_state(JobState::Succeeded);
                self.ending = Some(Ending::Success);
            }
            Command::Fail(f) => {
                self.metrics.set_state(JobState::Failed);
                self.launcher.job_failing();
                self.say.line(format_args!("{f}; stopping every worker"));
                self.ending = Some(Ending::Failed);
            }
        }
        Vec::new()
    }

    /// Starts a worker on `slot`; a start that failed is a failure of the
    /// slot, said once and then every tenth time in a row.
    async fn spawn(&mut self, slot: &SlotId) -> Vec<Command> {
        let Err(why) = self.workers.spawn(self.launcher.as_mut(), slot).await else {
            self.metrics.worker_started();
            return Vec::new();
        };
        let now = self.now();
        let (cmds, in_a_row) = self.core.start_failed(now, slot, &why);
        // Said once, then again every tenth time: the core retries the slot
        // later and later, not at once.
        if self.replaces_failed() && (in_a_row == 1 || in_a_row % 10 == 0) {
            let again = match in_a_row {
                1 => String::new(),
                n => format!(" ({n} tries in a row)"),
            };
            self.say.line(format_args!(
                "cannot start a worker on {slot}{again}: {why}; trying again later"
            ));
        }
        cmds
    }

    /// A reset (`Reset`: a failure) or a host change (`HostsUpdated`): the
    /// recovery starts, every worker is told, and so is any that reconnects.
    fn announce(&mut self, m: CoordinatorMsg) {
        let failure = matches!(m, CoordinatorMsg::Reset { .. });
        self.recovery.begin(Instant::now(), failure);
        self.metrics.reset(if failure {
            self.reset_cause.take().unwrap_or(ResetCause::Failure)
        } else {
            self.host_change
        });
        self.workers.tell_all(&m);
        self.links.announced = Some(m);
    }

    fn say_blacklisted(&self, host: &str, until: Option<std::time::Duration>) {
        match until {
            Some(t) => self.say.line(format_args!(
                "host {host} is blacklisted for {:.0} s (its workers keep failing)",
                t.saturating_sub(self.now()).as_secs_f64()
            )),
            None => self.say.line(format_args!(
                "host {host} is blacklisted for the rest of the job (its workers keep failing)"
            )),
        }
    }

    fn assign(&mut self, generation: Generation, ranks: &[SlotId]) -> Vec<Command> {
        let g = AssignmentBase {
            generation,
            knobs: &self.terms.knobs,
            data_token: self.terms.data_token,
            loopback_as: self.loopback_as(ranks),
            ca: &self.terms.ca,
        };
        let assigned = match assignments(&g, ranks, &self.links.addrs) {
            Ok(a) => a,
            Err(slot) => {
                // Cannot happen for a worker that registered or rejoined.
                let why = "no data-plane address is known for it";
                self.say.line(format_args!("worker on {slot}: {why}"));
                self.workers.retire(&slot);
                let now = self.now();
                return self.core.failed(now, &slot, why);
            }
        };
        let summary = summary(ranks);
        if self.replaces_failed() {
            self.say.line(format_args!(
                "generation {generation}: {} ({summary})",
                count(ranks.len(), "worker")
            ));
        } else {
            tracing::debug!(workers = ranks.len(), %summary, "every worker registered");
        }
        if !self.recovery.is_open() {
            self.metrics.set_state(JobState::Training);
        }
        self.metrics.generation(generation.0, ranks);
        self.detector = Detector::new(&self.watch.stragglers, ranks.len());
        self.recovery.assigned(generation, ranks);
        self.links.announced = None;
        self.links.assigned.clear();
        self.links.directory.set(generation, assigned.table);
        for (slot, a) in ranks.iter().zip(assigned.each) {
            self.workers.tell(slot, CoordinatorMsg::Assign(a.clone()));
            self.links.assigned.insert(slot.clone(), a);
        }
        self.inspector = self.stall.map(Inspector::new);
        Vec::new()
    }

    /// This machine's address towards the other hosts of `ranks`, when they
    /// span this machine and others and a worker here published a loopback
    /// data-plane address (see [`AssignmentBase::loopback_as`]).
    fn loopback_as(&self, ranks: &[SlotId]) -> Option<IpAddr> {
        // Self-started workers (pods) publish the address they listen on,
        // and their "hosts" are node names, not addresses.
        if self.launcher.self_started() {
            return None;
        }
        let remote = ranks.iter().find(|s| !is_this_machine(&s.host))?;
        let on_loopback = ranks.iter().any(|s| {
            self.links
                .addrs
                .get(s)
                .and_then(PeerAddress::tcp_addr)
                .is_some_and(|a| a.ip().is_loopback())
        });
        if !on_loopback {
            return None;
        }
        match source_address_towards(&remote.host) {
            Ok(ip) => Some(ip),
            Err(e) => {
                tracing::warn!(%e, "workers on this machine cannot be given a routable address");
                None
            }
        }
    }

    /// A decision that could not be committed is not carried out: a job
    /// whose workers the launcher started ends; a leader of self-started
    /// workers steps down (fenced: another leads; unreachable: a leader that
    /// can record it, this one again or another, decides anew from the
    /// stored state).
    fn not_recorded(&mut self, e: &crate::store::StoreError) {
        if self.launcher.self_started() {
            self.say.line(format_args!(
                "cannot record the job's state: {e}; stepping down, the workers keep training"
            ));
            self.ending = Some(Ending::SteppedDown);
        } else {
            self.say.line(format_args!(
                "cannot record the job's state: {e}; stopping every worker"
            ));
            self.ending = Some(Ending::Failed);
        }
    }
}

/// "a:3, b:1": workers per host, in rank order of the hosts.
fn summary(ranks: &[SlotId]) -> String {
    let mut per_host: Vec<(&str, usize)> = Vec::new();
    // Each host's place in the list (thousands of hosts at scale).
    let mut place: HashMap<&str, usize> = HashMap::new();
    for s in ranks {
        let i = *place.entry(s.host.as_str()).or_insert_with(|| {
            per_host.push((&s.host, 0));
            per_host.len() - 1
        });
        per_host[i].1 += 1;
    }
    per_host
        .iter()
        .map(|(h, n)| format!("{h}:{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(host: &str, slot: u32) -> SlotId {
        SlotId::new(host, slot)
    }

    #[test]
    fn the_summary_counts_each_hosts_workers_in_the_order_the_hosts_first_come() {
        let ranks = [
            slot("b", 0),
            slot("a", 0),
            slot("b", 1),
            slot("c", 0),
            slot("a", 1),
            slot("b", 2),
        ];
        assert_eq!(summary(&ranks), "b:3, a:2, c:1");
        assert_eq!(summary(&[]), "");
    }
}
