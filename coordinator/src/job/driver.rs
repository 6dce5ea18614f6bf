//! The job's driver, static and elastic alike: feeds the membership core
//! (discovery results, registrations, rejoins, exits, lost connections,
//! stalls, the clock) and carries out its commands (spawn, stop, reset,
//! assign, leave). All decisions are the core's and its policy's; this file
//! only moves messages and processes, and words what happened the way each
//! kind of job says it (one that ends on any failure, a static job, names
//! ranks; one that replaces failed workers names workers and slots). Its
//! state is in named parts: its workers (`workers.rs`), their control links
//! (`links.rs`) and its journal (`journal.rs`).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use control::Knobs;
use elastic::hosts::HostSlots;
use elastic::membership::{Command, Membership, OnFailure, SlotId};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Outside;
use super::batch::{self, Batch, Sweeps, Taken, Woke};
use super::discovery::{HostFeed, Offer};
use super::journal::Journal;
use super::links::{LinkEvent, LinkEventKind, Links};
use super::recovery::Recovery;
use super::say::Say;
use super::waiting::{self, Waiting};
use super::workers::{EXIT_SETTLE, Workers};
use crate::config::JobConfig;
use crate::job::{Ending, JobError, Stops};
use crate::launch::Launcher;
use crate::launch::address::{first_interface, interface_address};
use crate::metrics::{JobMetrics, ResetCause};
use crate::server::{Arrival, Arrivals};
use crate::stall::{Inspector, StallConfig, StallEvent};
use crate::straggler::{Detector, StragglerPolicy};

/// What every assignment carries besides the ranks: the engine settings,
/// the data-plane token, and the job's certificate authority (QUIC
/// workers' leaves).
#[derive(Debug)]
pub(super) struct Terms {
    pub(super) knobs: Knobs,
    pub(super) data_token: u64,
    pub(super) ca: std::sync::Arc<control::pki::JobCa>,
}

/// The driver's state: the membership core that decides, the launcher
/// that starts workers, and its named parts.
#[derive(Debug)]
pub(super) struct Driver {
    pub(super) core: Membership,
    /// Starts the workers (processes, an in-process cluster's tasks), or
    /// watches pods that start by themselves.
    pub(super) launcher: Box<dyn Launcher>,
    /// Its workers, as processes.
    pub(super) workers: Workers,
    /// Its workers' control connections, and what it keeps of them.
    pub(super) links: Links,
    /// The job's clock and its record in the store.
    pub(super) journal: Journal,
    pub(super) terms: Terms,
    pub(super) stall: Option<StallConfig>,
    pub(super) inspector: Option<Inspector>,
    pub(super) ending: Option<Ending>,
    /// Where the driver's status lines go.
    pub(super) say: Say,
    /// When the job last said what it waits for.
    pub(super) waiting: Waiting,
    /// The recovery under way since the last reset.
    pub(super) recovery: Recovery,
    /// Whether a host set has come from discovery yet.
    pub(super) discovered: bool,
    /// What the job shows at `/metrics`.
    pub(super) metrics: JobMetrics,
    /// How workers are watched: silence, stragglers.
    pub(super) watch: Watch,
    /// The current generation's straggler detector.
    pub(super) detector: Detector,
    /// What the next reset by failure is counted as (a stall, a
    /// straggler), when not a plain failure.
    pub(super) reset_cause: Option<ResetCause>,
    /// What the last change of hosts was.
    pub(super) host_change: ResetCause,
}

/// How the driver watches its workers.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    /// A worker silent (no heartbeat) this long has failed.
    pub silence: Duration,
    pub stragglers: StragglerPolicy,
}

/// Where the coordinator listens: the `--network-interface` address, or
/// every interface (hosts may come from anywhere later).
pub(super) fn bind_address(cfg: &JobConfig) -> Result<IpAddr, JobError> {
    match first_interface(cfg.network_interface.as_deref()) {
        Some(name) => Ok(interface_address(name)?),
        None => Ok(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
    }
}

impl Driver {
    /// Time since the job's epoch: the core's clock, which goes on across a
    /// coordinator restart.
    pub(super) fn now(&self) -> Duration {
        self.journal.now()
    }

    /// Whether the job replaces failed workers (an elastic job), rather
    /// than ending on the first failure (a static one): how it words what
    /// happens.
    pub(super) fn replaces_failed(&self) -> bool {
        self.core.policy().on_failure == OnFailure::Replace
    }

    /// Runs until the core finishes or fails the job, or a signal comes.
    pub(super) async fn run(
        &mut self,
        arrivals: &mut Arrivals,
        discovered: &mut HostFeed,
        mut events: mpsc::Receiver<LinkEvent>,
        mut stops: Stops,
    ) -> Ending {
        self.adopt_detached();
        let mut sweeps = Sweeps::new();
        let mut due = self.next_wake();
        loop {
            // Asleep until something happens or the next thing is due.
            let woke = tokio::select! {
                () = sleep_until(sweeps.wake_by(due)) => Woke::Due,
                () = self.launcher.exit_news() => Woke::ExitNews,
                outside = stops.next(&self.say) => Woke::Outside(outside),
                Some(offer) = discovered.next() => Woke::Offer(offer),
                Some(a) = arrivals.next() => Woke::Arrival(Box::new(a)),
                Some(e) = events.recv() => Woke::Link(e),
            };
            // The core settles once, after the batch and the sweep.
            self.core.defer_settling();
            // A wake only to sweep what waited is no deadline of a worker's.
            let exit_wake = matches!(woke, Woke::ExitNews)
                || (matches!(woke, Woke::Due) && due.is_some_and(|d| d <= Instant::now()));
            let (cmds, batch) = match self.take(woke, arrivals, &mut events) {
                Ok(taken) => taken,
                Err(ending) => return ending,
            };
            let listing = self.inspector.as_ref().is_some_and(Inspector::listing);
            if !sweeps.sweep_now(batch, listing, Instant::now()) {
                // Routine events settle with their sweep; heartbeats at once.
                let settled = if sweeps.holding_routine() {
                    Vec::new()
                } else {
                    self.core.settle_deferred(self.now())
                };
                if !settled.is_empty() {
                    // A heartbeat asked for something after all.
                    self.carry_out(settled).await;
                    due = self.next_wake();
                }
                continue;
            }
            self.carry_out(cmds).await;
            let early = self.retry_early();
            self.carry_out(early).await;
            let started = Instant::now();
            let more = self.sweep(exit_wake);
            let mut cost = started.elapsed();
            self.carry_out(more).await;
            self.reset_cause = None;
            let started = Instant::now();
            let by_state = self.core.worker_counts();
            self.metrics.set_workers(self.workers.len(), by_state);
            if let Some(ending) = self.ending {
                return ending;
            }
            self.say_waiting();
            due = self.next_wake();
            cost += started.elapsed();
            sweeps.swept(cost);
        }
    }

    /// The sweep after a batch: the workers' exits (when due), the core's
    /// timers, the stall inspector, and the core's settling deferred over
    /// the batch.
    fn sweep(&mut self, exit_wake: bool) -> Vec<Command> {
        let period = self.launcher.exit_sweep();
        let mut more = if self.workers.exits_due(exit_wake, Instant::now(), period) {
            self.poll_exits()
        } else {
            Vec::new()
        };
        more.extend(self.core.tick(self.now()));
        more.extend(self.poll_stalls());
        more.extend(self.core.settle_deferred(self.now()));
        more
    }

    /// Handles what woke the driver and the arrivals and link events waiting
    /// behind it (see `batch.rs`), the core's settling deferred: their
    /// commands, and what the batch asks of the sweep (`Batch`: only
    /// heartbeats that asked for nothing, routine events that gave no
    /// command, or anything else). `Err`: the job ends so.
    fn take(
        &mut self,
        woke: Woke,
        arrivals: &mut Arrivals,
        events: &mut mpsc::Receiver<LinkEvent>,
    ) -> Result<(Vec<Command>, Batch), Ending> {
        let mut batch = match &woke {
            Woke::Link(e) => Batch::of(e),
            _ => Batch::Urgent,
        };
        let mut cmds = match woke {
            Woke::Due | Woke::ExitNews => Vec::new(),
            Woke::Outside(Outside::End(ending)) => {
                // Nothing is started or assigned any more.
                let _ = self.core.settle_deferred(self.now());
                return Err(ending);
            }
            Woke::Outside(Outside::PassOn(sig)) => self.pass_on(sig),
            Woke::Offer(offer) => self.offer(offer),
            Woke::Arrival(a) => self.arrive(*a),
            Woke::Link(e) => self.link_event(e),
        };
        for taken in batch::drain(arrivals, events) {
            match taken {
                Taken::Arrival(a) => {
                    batch = Batch::Urgent;
                    cmds.extend(self.arrive(*a));
                }
                Taken::Link(e) => {
                    batch = batch.max(Batch::of(&e));
                    cmds.extend(self.link_event(e));
                }
            }
        }
        if !cmds.is_empty() {
            batch = Batch::Urgent;
        }
        Ok((cmds, batch))
    }

    /// Passes `sig` (SIGUSR1, SIGUSR2) on to every worker, and says to how
    /// many.
    fn pass_on(&mut self, sig: nix::sys::signal::Signal) -> Vec<Command> {
        let (mut passed, mut not) = (0, 0);
        for live in self.workers.processes() {
            if live.pass_on(sig) {
                passed += 1;
            } else {
                not += 1;
            }
        }
        let unreachable = if not > 0 {
            format!(
                " ({not} cannot be signalled from here: over ssh, or not started by elasticrun)"
            )
        } else {
            String::new()
        };
        self.say.line(format_args!(
            "{sig} passed on to {passed} workers{unreachable}"
        ));
        Vec::new()
    }

    /// Hosts or slots from discovery, for the core.
    fn offer(&mut self, offer: Offer) -> Vec<Command> {
        let now = self.now();
        self.discovered = true;
        let before = self.core.hosts().to_vec();
        let cmds = match offer {
            Offer::Hosts(hosts) => {
                self.launcher.hosts_discovered(&hosts);
                self.core.discovered(now, &hosts)
            }
            Offer::Slots(slots) => self.core.offered(now, &slots),
        };
        self.host_change = host_change(&before, self.core.hosts());
        cmds
    }

    /// When the driver next has something to do with no news: the core's
    /// next timer, a stall's warning, an early registration's wait, the
    /// wait said again, a held exit or a closed connection's grace running
    /// out, a worker that counts as gone unless it shows up (`None`: not
    /// before news).
    fn next_wake(&self) -> Option<Instant> {
        let now = Instant::now();
        let on_job_clock = |d: Duration| now + d.saturating_sub(self.now());
        let core = self.core.next_deadline().map(on_job_clock);
        let waiting = self.waiting.next_due().map(on_job_clock);
        let stalls = self.inspector.as_ref().and_then(|i| {
            let due = i.next_due(now.into_std())?;
            Some(Instant::from_std(due))
        });
        let early_wait = self.launcher.early_registration_wait();
        let early = self
            .links
            .early
            .iter()
            .map(|(at, _)| Some(*at + early_wait?));
        let launcher = &self.launcher;
        let workers = self.workers.iter().flat_map(|(_, live)| {
            let held = live.exited.map(|(at, _)| at + EXIT_SETTLE);
            let grace = launcher.exit_grace(live.finished);
            let closed = live.link_ended.as_ref().map(|(at, _)| *at + grace);
            [held, closed, live.process.check_by()]
        });
        [core, waiting, stalls]
            .into_iter()
            .chain(early)
            .chain(workers)
            .flatten()
            .min()
    }

    /// Says what an elastic job that cannot form its next generation waits
    /// for (once discovery has spoken: until then it has its own lines).
    fn say_waiting(&mut self) {
        if !self.replaces_failed() || !self.discovered {
            return;
        }
        let short = self.core.shortfall();
        self.metrics.waiting(short.is_some());
        let now = self.now();
        if self.waiting.due(now, short.as_ref())
            && let Some(s) = &short
        {
            self.say.line(waiting::describe(s, now, self.say.clock()));
        }
    }

    /// A registered worker: placed if it is the one started on its slot, or
    /// taken back if it is that worker reconnecting (same process) after its
    /// control connection dropped.
    fn arrive(&mut self, a: Arrival) -> Vec<Command> {
        let slot = SlotId {
            host: a.registration.host.clone(),
            slot: a.registration.slot,
        };
        if !self.workers.contains(&slot) {
            self.adopt(&slot, a.registration.pid);
        }
        if !self.workers.contains(&slot) && self.launcher.early_registration_wait().is_some() {
            // Its slot may not have been offered yet.
            self.links.early.push((Instant::now(), a));
            return Vec::new();
        }
        let Arrival {
            registration: r,
            link,
        } = a;
        let Some(live) = self.workers.get_mut(&slot) else {
            tracing::warn!(%slot, "registration refused: no worker was started there");
            tokio::spawn(refuse(link, format!("{slot} is not a slot of this job")));
            return Vec::new();
        };
        let reconnecting = match live.pid {
            None => false,
            Some(pid) if pid == r.pid => true,
            Some(_) => {
                tracing::warn!(%slot, pid = r.pid, "registration refused: the slot's worker is registered");
                tokio::spawn(refuse(link, format!("{slot} is not a slot of this job")));
                return Vec::new();
            }
        };
        live.pid = Some(r.pid);
        self.links.serve(live, &slot, link);
        self.links.addrs.insert(slot.clone(), r.data_addr);
        let now = self.now();
        if reconnecting {
            tracing::info!(%slot, generation = %r.generation, "worker reconnected");
            for m in self.links.missed(&slot, r.generation) {
                self.workers.tell(&slot, m);
            }
            return self.core.reattached(now, &slot, r.generation);
        }
        self.core.registered(now, &slot)
    }

    /// Early registrations whose slot is offered now, taken; those that
    /// waited in vain, refused.
    fn retry_early(&mut self) -> Vec<Command> {
        if self.links.early.is_empty() {
            return Vec::new();
        }
        let wait = self.launcher.early_registration_wait().unwrap_or_default();
        let mut cmds = Vec::new();
        for (at, a) in std::mem::take(&mut self.links.early) {
            let slot = SlotId::new(a.registration.host.clone(), a.registration.slot);
            if self.workers.contains(&slot) {
                cmds.extend(self.arrive(a));
            } else if at.elapsed() < wait {
                self.links.early.push((at, a));
            } else {
                tracing::warn!(%slot, "registration refused: no worker key for it in etcd");
                let why = format!("{slot} is not a slot of this job (no worker key in etcd)");
                tokio::spawn(refuse(a.link, why));
            }
        }
        cmds
    }

    fn link_event(&mut self, e: LinkEvent) -> Vec<Command> {
        let Some(live) = self.workers.get_mut(&e.slot).filter(|l| l.link_id == e.id) else {
            return Vec::new();
        };
        match e.kind {
            LinkEventKind::Beat { progress, pending } => {
                let (generation, members) = (self.core.generation(), self.core.members());
                let Some(rank) = self.links.ranks.rank(generation, members, &e.slot) else {
                    return Vec::new();
                };
                if let Some(i) = self.inspector.as_mut() {
                    i.handle_report(Instant::now().into_std(), rank, &e.slot, &pending);
                }
                match self.metrics.rank_progress(rank, progress, Instant::now()) {
                    Some(w) => self.straggling(rank, &e.slot, w),
                    None => Vec::new(),
                }
            }
            LinkEventKind::Rejoin {
                generation,
                data_addr,
            } => {
                self.links.addrs.insert(e.slot.clone(), data_addr);
                let now = self.now();
                self.core.rejoined(now, &e.slot, generation)
            }
            LinkEventKind::Running {
                generation,
                step,
                reached,
            } => {
                let at = Instant::now();
                if let Some(r) = self
                    .recovery
                    .running(at, &e.slot, generation, step, reached)
                {
                    let back = r
                        .reached
                        .map_or(0, |reached| reached.saturating_sub(r.step));
                    self.metrics.recovered(r.took, r.step, back);
                    self.say.line(r);
                }
                Vec::new()
            }
            LinkEventKind::Finished => {
                live.finished = true;
                Vec::new()
            }
            LinkEventKind::Ended(why) => {
                live.link_ended = Some((Instant::now(), why));
                self.workers.watch();
                Vec::new()
            }
        }
    }

    /// Exits of workers, and control connections that ended without one
    /// within the launcher's grace.
    fn poll_exits(&mut self) -> Vec<Command> {
        let now = self.now();
        let mut cmds = Vec::new();
        let settle = !self.replaces_failed();
        for (slot, st) in self.workers.exits(settle) {
            let Some(live) = self.workers.remove(&slot) else {
                continue;
            };
            if live.leaving {
                self.say.line(format_args!(
                    "left the job as told: worker {} on {slot} (no place in the new generation)",
                    live.id
                ));
            } else if st.success() {
                cmds.extend(self.core.finished(now, &slot));
            } else {
                let first_sign = [
                    live.exited.map(|(at, _)| at),
                    live.link_ended.as_ref().map(|(at, _)| *at),
                ]
                .into_iter()
                .flatten()
                .min();
                self.metrics
                    .worker_failed(first_sign.map(|at| at.elapsed()));
                let how = live.process.how(st);
                let why = if self.replaces_failed() {
                    let why = format!("worker {} on {slot} {how}", live.id);
                    self.say.line(&why);
                    why
                } else {
                    format!("rank {} on {} {how}", live.id, slot.host)
                };
                if live.process.host_lost() {
                    self.host_change = ResetCause::HostsRemoved;
                    cmds.extend(self.core.host_lost(now, &slot, &why));
                } else {
                    cmds.extend(self.core.failed(now, &slot, &why));
                }
            }
        }
        cmds.extend(self.poll_links_ended(now));
        cmds
    }

    /// Workers whose control connection ended and whose exit did not come
    /// within the launcher's grace: finished, or failed.
    fn poll_links_ended(&mut self, now: Duration) -> Vec<Command> {
        let launcher = &self.launcher;
        let overdue: Vec<(SlotId, usize, bool, String)> = self
            .workers
            .iter()
            .filter_map(|(slot, live)| {
                let (at, why) = live.link_ended.as_ref()?;
                let (id, leaving) = (live.id, live.leaving || live.finished);
                let grace = launcher.exit_grace(live.finished);
                (at.elapsed() >= grace).then(|| (slot.clone(), id, leaving, why.clone()))
            })
            .collect();
        let mut cmds = Vec::new();
        for (slot, id, leaving, why) in overdue {
            if self.workers.get(&slot).is_some_and(|l| l.finished) {
                self.workers.remove(&slot);
                cmds.extend(self.core.finished(now, &slot));
                continue;
            }
            let first_sign = self.workers.get(&slot).and_then(|l| l.link_ended.as_ref());
            let after = first_sign.map(|(at, _)| at.elapsed());
            self.workers.retire(&slot);
            if !leaving {
                self.metrics.worker_failed(after);
                let why = if self.replaces_failed() {
                    let why = format!("worker on {slot}: {why}");
                    self.say.line(&why);
                    why
                } else {
                    format!("rank {id} ({slot}) failed: {why}")
                };
                cmds.extend(self.core.failed(now, &slot, &why));
            }
        }
        cmds
    }

    /// Stalls past the shutdown time: the ranks they wait on have failed.
    fn poll_stalls(&mut self) -> Vec<Command> {
        let replaces = self.replaces_failed();
        let Some(inspector) = self.inspector.as_mut() else {
            return Vec::new();
        };
        let mut stalled = Vec::new();
        // Tokio's clock, which an in-process cluster test pauses.
        for event in inspector.poll(Instant::now().into_std()) {
            match event {
                StallEvent::Warn(stall) => tracing::warn!("{stall}"),
                StallEvent::Shutdown(stall) => {
                    let lasted = stall.tensors.iter().map(|(_, d)| *d).max();
                    self.metrics.stalled(lasted.unwrap_or_default());
                    self.reset_cause = Some(ResetCause::Stall);
                    let why = if replaces {
                        self.say.line(format_args!(
                            "{stall}, past the stall shutdown time; replacing the stalled ranks"
                        ));
                        "stalled".to_owned()
                    } else {
                        let limit = self.stall.and_then(|c| c.shutdown).unwrap_or_default();
                        let limit = limit.as_secs_f64();
                        format!("{stall}, past the stall shutdown time of {limit} s")
                    };
                    stalled.extend(stall.missing.iter().map(|r| (r.slot.clone(), why.clone())));
                }
            }
        }
        let now = self.now();
        let mut cmds = Vec::new();
        for (slot, why) in stalled {
            self.metrics.worker_failed(None);
            self.workers.retire(&slot);
            cmds.extend(self.core.failed(now, &slot, &why));
        }
        cmds
    }

    /// Stops every worker still running and waits for the stopping ones; a
    /// static job that did not succeed first tells its workers why.
    pub(super) async fn wind_down(&mut self, ending: Ending) {
        if self.launcher.self_started() {
            // Pods stop when told; a coordinator that steps down or is
            // stopped tells them nothing: the next leader takes them over.
            if ending == Ending::Failed {
                self.workers.tell_all(&control::CoordinatorMsg::Stop {
                    reason: "the job failed".to_owned(),
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            self.workers.abandon();
            return;
        }
        if !self.replaces_failed() && ending != Ending::Success {
            let reason = "the job is stopping".to_owned();
            self.workers
                .tell_all(&control::CoordinatorMsg::Stop { reason });
        }
        self.workers.stop().await;
        self.launcher.finish().await;
    }

    /// Takes over, at once, the detached members of a resumed job whose
    /// launcher knows their processes (pods' keys): so that one that
    /// finished, or died, while no coordinator led is seen as such without
    /// waiting for it to reconnect.
    fn adopt_detached(&mut self) {
        let detached: Vec<SlotId> = self.core.detached().cloned().collect();
        for slot in detached {
            if let Some(pid) = self.launcher.known_pid(&slot) {
                self.adopt(&slot, pid);
            }
        }
    }

    /// Takes over the worker that registered on `slot` from process `pid`
    /// when it is a member the resumed core waits for (this coordinator took
    /// the job over from another) and the launcher can supervise it.
    fn adopt(&mut self, slot: &SlotId, pid: u32) {
        if !self.core.detached().any(|s| s == slot) {
            return;
        }
        if !self.workers.adopt(self.launcher.as_mut(), slot, pid) {
            tracing::warn!(%slot, pid, "a member reconnected but its launcher cannot supervise it");
        }
    }
}

/// What going from hosts `before` to `after` is: a removal if any host of
/// `before` is gone or has fewer slots, else an addition.
fn host_change(before: &[HostSlots], after: &[HostSlots]) -> ResetCause {
    let kept = |b: &HostSlots| (after.iter()).any(|a| a.host == b.host && a.slots >= b.slots);
    if before.iter().all(kept) {
        ResetCause::HostsAdded
    } else {
        ResetCause::HostsRemoved
    }
}

/// Sleeps until `due`, or for ever.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn refuse(mut link: crate::server::Link, reason: String) {
    use futures::SinkExt;
    let stop = control::CoordinatorMsg::Stop { reason };
    let _ = tokio::time::timeout(crate::server::HANDSHAKE_TIMEOUT, link.send(stop)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[(&str, usize)]) -> Vec<HostSlots> {
        (list.iter())
            .map(|&(host, slots)| HostSlots {
                host: host.into(),
                slots,
            })
            .collect()
    }

    #[test]
    fn a_host_gone_or_with_fewer_slots_is_a_removal_anything_else_an_addition() {
        let before = hosts(&[("a", 2), ("b", 2)]);
        let cases = [
            (
                hosts(&[("a", 2), ("b", 2), ("c", 1)]),
                ResetCause::HostsAdded,
            ),
            (hosts(&[("a", 4), ("b", 2)]), ResetCause::HostsAdded),
            (hosts(&[("a", 2)]), ResetCause::HostsRemoved),
            (
                hosts(&[("a", 1), ("b", 2), ("c", 8)]),
                ResetCause::HostsRemoved,
            ),
        ];
        for (after, want) in cases {
            assert_eq!(host_change(&before, &after), want, "{after:?}");
        }
        assert_eq!(host_change(&[], &before), ResetCause::HostsAdded);
    }
}
