//! The job's driver, static and elastic alike: feeds the membership core
//! (discovery results, registrations, rejoins, exits, lost connections,
//! stalls, the clock) and carries out its commands (spawn, stop, reset,
//! assign, leave). All decisions are the core's; this file only moves
//! messages and processes, and words what happened the way each kind of job
//! says it (a static job names ranks, an elastic one workers and slots).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitStatus;
use std::time::Duration;
use std::time::SystemTime;

use control::{CoordinatorMsg, Knobs};
use elastic::membership::{Command, Membership, SlotId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::discovery::{HostFeed, Offer};
use super::links::{self, LinkEvent, LinkEventKind};
use super::recovery::Recovery;
use super::say::Say;
use super::waiting::{self, Waiting};
use crate::config::JobConfig;
use crate::job::{Ending, JobError, STOP_GRACE, Stops};
use crate::launch::address::{first_interface, interface_address};
use crate::launch::{EXIT_POLL, Launcher, Started, stop_all};
use crate::server::{Arrival, Arrivals};
use crate::stall::{Inspector, StallConfig, StallEvent};
use crate::store::{JobState, Revision, Store, StoreError};

/// How long a closed control connection waits for its process's exit status
/// (a better description of the failure) before counting as the failure.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long a worker that said it finished and closed its control
/// connection gets to exit before it counts as finished: a process still
/// tearing down (an interpreter unloading its libraries) may yet exit
/// non-zero, and that is a failure.
const FINISHED_EXIT_GRACE: Duration = Duration::from_secs(10);
/// How long a static job holds a worker's failed exit without a signal
/// before reporting it: the worker may have exited on losing a peer that was
/// killed, whose own exit (over ssh, later) names the cause.
const EXIT_SETTLE: Duration = Duration::from_millis(300);
/// How long a worker told to leave gets to exit on its own.
const LEAVE_GRACE: Duration = Duration::from_secs(10);
/// How long a commit to the store may take.
pub(super) const STORE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a self-started worker's registration waits for its slot to be
/// offered (its etcd key to be seen).
const EARLY_GRACE: Duration = Duration::from_secs(10);

/// What kind of job the driver runs: the core's policy decides what happens,
/// this only decides how the driver words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// `-np`, `-H`, `--hostfile`: workers are numbered by rank (a static job's
    /// spawn order is its rank order) and any failure ends the job.
    Static,
    /// `--host-discovery-script`.
    Elastic,
}

/// A started worker.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) id: usize,
    pub(super) process: Box<dyn Started>,
    pub(super) link: Option<mpsc::Sender<CoordinatorMsg>>,
    /// Told to leave: its exit is expected.
    pub(super) leaving: bool,
    /// When its control connection ended, and why.
    pub(super) link_ended: Option<(Instant, String)>,
    /// The process id it registered with: a registration from the same
    /// process is that worker reconnecting.
    pub(super) pid: Option<u32>,
    /// Number of its current control connection (events of an earlier one
    /// are dropped).
    pub(super) link_id: usize,
    /// Its exit, once seen, while it waits to be reported (see
    /// [`EXIT_SETTLE`]).
    pub(super) exited: Option<(Instant, ExitStatus)>,
    /// It said it ended its training cleanly: its connection closing is its
    /// exit 0.
    pub(super) finished: bool,
}

/// The driver's state.
#[derive(Debug)]
pub(super) struct Driver {
    pub(super) mode: Mode,
    pub(super) knobs: Knobs,
    /// A worker silent (no heartbeat) this long has failed (`--heartbeat-timeout`).
    pub(super) silence: Duration,
    pub(super) data_token: u64,
    /// The job's certificate authority (QUIC workers' leaves).
    pub(super) ca: std::sync::Arc<control::pki::JobCa>,
    /// Starts the workers (processes, or an in-process cluster's tasks).
    pub(super) launcher: Box<dyn Launcher>,
    pub(super) core: Membership,
    /// Where the job's durable state is committed, and the revision last
    /// read or written there.
    pub(super) store: Box<dyn Store>,
    pub(super) revision: Option<Revision>,
    /// When the job started; the core's clock is the time since.
    pub(super) epoch: SystemTime,
    /// The job's age when this process took it over (zero for a new job).
    pub(super) age_at_start: Duration,
    pub(super) started: Instant,
    pub(super) workers: HashMap<SlotId, Live>,
    pub(super) next_id: usize,
    /// Control connections numbered in arrival order.
    pub(super) next_link: usize,
    pub(super) addrs: HashMap<SlotId, control::PeerAddress>,
    /// Each member's assignment of the current generation, and the last
    /// `Reset`/`HostsUpdated` sent since: what a reconnecting worker is told
    /// again.
    pub(super) assigned: HashMap<SlotId, control::Assignment>,
    pub(super) announced: Option<CoordinatorMsg>,
    pub(super) stopping: Vec<JoinHandle<()>>,
    pub(super) events: mpsc::Sender<LinkEvent>,
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
    /// Registrations of self-started workers on slots not offered yet (their
    /// etcd key is on its way), with when they came.
    pub(super) early: Vec<(Instant, Arrival)>,
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
        self.age_at_start.saturating_add(self.started.elapsed())
    }

    /// Commits the core's durable facts before they are acted on. An error
    /// (the store is gone, or another coordinator has taken the job over)
    /// ends the job: acting on a decision that is not recorded could make
    /// two coordinators tell workers different things.
    pub(super) async fn persist(&mut self) -> Result<(), StoreError> {
        let state = JobState {
            epoch: self.epoch,
            membership: self.core.snapshot(),
        };
        let commit = self.store.commit(self.revision, &state);
        let revision = match tokio::time::timeout(STORE_TIMEOUT, commit).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(StoreError::Unavailable {
                    at: format!("{:?}", self.store),
                    why: format!("no answer within {STORE_TIMEOUT:?}"),
                });
            }
        };
        self.revision = Some(revision);
        Ok(())
    }

    /// Runs until the core finishes or fails the job, or a signal comes.
    pub(super) async fn run(
        &mut self,
        arrivals: &mut Arrivals,
        discovered: &mut HostFeed,
        mut events: mpsc::Receiver<LinkEvent>,
        mut stops: Stops,
    ) -> Ending {
        self.adopt_self_started();
        loop {
            // Asleep until something happens or the next thing is due.
            let due = self.next_wake();
            let cmds = tokio::select! {
                () = sleep_until(due) => Vec::new(),
                () = self.launcher.exit_news() => Vec::new(),
                ending = stops.next(&self.say) => return ending,
                Some(offer) = discovered.next() => {
                    let now = self.now();
                    self.discovered = true;
                    match offer {
                        Offer::Hosts(hosts) => {
                            self.launcher.hosts_discovered(&hosts);
                            self.core.discovered(now, &hosts)
                        }
                        Offer::Slots(slots) => self.core.offered(now, &slots),
                    }
                }
                Some(a) = arrivals.next() => self.arrive(a),
                Some(e) = events.recv() => self.link_event(e),
            };
            self.carry_out(cmds).await;
            let early = self.retry_early();
            self.carry_out(early).await;
            let mut more = self.poll_exits();
            more.extend(self.core.tick(self.now()));
            more.extend(self.poll_stalls());
            self.carry_out(more).await;
            if let Some(ending) = self.ending {
                return ending;
            }
            self.say_waiting();
        }
    }

    /// When the driver next has something to do with no news: the core's
    /// next timer, a stall's warning, an early registration's grace, the
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
        let early = self.early.iter().map(|(at, _)| *at + EARLY_GRACE);
        let self_started = self.launcher.self_started();
        let workers = self.workers.values().flat_map(|live| {
            let held = live.exited.map(|(at, _)| at + EXIT_SETTLE);
            let grace = exit_grace(self_started, live.finished);
            let closed = live.link_ended.as_ref().map(|(at, _)| *at + grace);
            [held, closed, live.process.check_by()]
        });
        [core, waiting, stalls]
            .into_iter()
            .chain(early.map(Some))
            .chain(workers)
            .flatten()
            .min()
    }

    /// Says what an elastic job that cannot form its next generation waits
    /// for (once discovery has spoken: until then it has its own lines).
    fn say_waiting(&mut self) {
        if self.mode != Mode::Elastic || !self.discovered {
            return;
        }
        let short = self.core.shortfall();
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
        let Arrival {
            registration: r,
            link,
        } = a;
        let slot = SlotId {
            host: r.host.clone(),
            slot: r.slot,
        };
        if !self.workers.contains_key(&slot) {
            self.adopt(&slot, r.pid);
        }
        if !self.workers.contains_key(&slot) && self.launcher.self_started() {
            // Its key in etcd may not have reached the pod watch yet.
            self.early.push((
                Instant::now(),
                Arrival {
                    registration: r,
                    link,
                },
            ));
            return Vec::new();
        }
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
        self.next_link += 1;
        live.link_id = self.next_link;
        live.pid = Some(r.pid);
        live.link_ended = None;
        live.link = Some(links::spawn(
            link,
            slot.clone(),
            live.link_id,
            self.silence,
            self.events.clone(),
        ));
        self.addrs.insert(slot.clone(), r.data_addr);
        let now = self.now();
        if reconnecting {
            tracing::info!(%slot, generation = %r.generation, "worker reconnected");
            self.catch_up(&slot, r.generation);
            return self.core.reattached(now, &slot, r.generation);
        }
        self.core.registered(now, &slot)
    }

    /// Early registrations whose slot is offered now, taken; those that
    /// waited [`EARLY_GRACE`] in vain, refused.
    fn retry_early(&mut self) -> Vec<Command> {
        if self.early.is_empty() {
            return Vec::new();
        }
        let mut cmds = Vec::new();
        for (at, a) in std::mem::take(&mut self.early) {
            let slot = SlotId::new(a.registration.host.clone(), a.registration.slot);
            if self.workers.contains_key(&slot) {
                cmds.extend(self.arrive(a));
            } else if at.elapsed() < EARLY_GRACE {
                self.early.push((at, a));
            } else {
                tracing::warn!(%slot, "registration refused: no worker key for it in etcd");
                let why = format!("{slot} is not a slot of this job (no worker key in etcd)");
                tokio::spawn(refuse(a.link, why));
            }
        }
        cmds
    }

    /// Re-sends what a reconnected worker in `generation` may have missed
    /// while it was away: its assignment of a newer generation, and the
    /// announcement of the generation being gathered.
    fn catch_up(&self, slot: &SlotId, generation: control::Generation) {
        if let Some(a) = self
            .assigned
            .get(slot)
            .filter(|a| a.generation > generation)
        {
            self.tell(slot, CoordinatorMsg::Assign(a.clone()));
        }
        let pending = match &self.announced {
            Some(m @ CoordinatorMsg::Reset { generation: g }) if *g > generation => Some(m),
            Some(m @ CoordinatorMsg::HostsUpdated { generation: g }) if *g > generation => Some(m),
            _ => None,
        };
        if let Some(m) = pending {
            self.tell(slot, m.clone());
        }
    }

    fn link_event(&mut self, e: LinkEvent) -> Vec<Command> {
        let Some(live) = self.workers.get_mut(&e.slot).filter(|l| l.link_id == e.id) else {
            return Vec::new();
        };
        match e.kind {
            LinkEventKind::Beat(pending) => {
                let rank = self.core.members().iter().position(|s| *s == e.slot);
                if let (Some(i), Some(rank)) = (self.inspector.as_mut(), rank) {
                    i.handle_report(Instant::now().into_std(), rank, e.slot.clone(), &pending);
                }
                Vec::new()
            }
            LinkEventKind::Rejoin {
                generation,
                data_addr,
            } => {
                self.addrs.insert(e.slot.clone(), data_addr);
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
                Vec::new()
            }
        }
    }

    /// Exits of workers, and control connections that ended without one
    /// within [`EXIT_GRACE`].
    fn poll_exits(&mut self) -> Vec<Command> {
        let now = self.now();
        let mut cmds = Vec::new();
        for (slot, st) in self.exits() {
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
                let why = match self.mode {
                    Mode::Static => {
                        format!("rank {} on {} {}", live.id, slot.host, live.process.how(st))
                    }
                    Mode::Elastic => {
                        let why = format!("worker {} on {slot} {}", live.id, live.process.how(st));
                        self.say.line(&why);
                        why
                    }
                };
                cmds.extend(self.core.failed(now, &slot, &why));
            }
        }
        let self_started = self.launcher.self_started();
        let overdue: Vec<(SlotId, usize, bool, String)> = self
            .workers
            .iter()
            .filter_map(|(slot, live)| {
                let (at, why) = live.link_ended.as_ref()?;
                let (id, leaving) = (live.id, live.leaving || live.finished);
                let grace = exit_grace(self_started, live.finished);
                (at.elapsed() >= grace).then(|| (slot.clone(), id, leaving, why.clone()))
            })
            .collect();
        for (slot, id, leaving, why) in overdue {
            if self.workers.get(&slot).is_some_and(|l| l.finished) {
                self.workers.remove(&slot);
                cmds.extend(self.core.finished(now, &slot));
                continue;
            }
            self.retire(&slot);
            if !leaving {
                let why = match self.mode {
                    Mode::Static => format!("rank {id} ({slot}) failed: {why}"),
                    Mode::Elastic => {
                        let why = format!("worker on {slot}: {why}");
                        self.say.line(&why);
                        why
                    }
                };
                cmds.extend(self.core.failed(now, &slot, &why));
            }
        }
        cmds
    }

    /// Workers that have exited, those killed by a signal first: when several
    /// ended since the last look, a kill is more likely the cause than peers
    /// that exited on losing it. In a static job a failure without a signal
    /// waits up to [`EXIT_SETTLE`] for such a kill to show.
    fn exits(&mut self) -> Vec<(SlotId, ExitStatus)> {
        let now = Instant::now();
        for (slot, live) in &mut self.workers {
            if live.exited.is_some() {
                continue;
            }
            match live.process.poll() {
                Ok(Some(st)) => live.exited = Some((now, st)),
                Ok(None) => {}
                Err(e) => tracing::warn!(%slot, %e, "cannot wait for a worker"),
            }
        }
        // (slot, id, seen at, status, killed by a signal)
        let seen: Vec<(SlotId, usize, Instant, ExitStatus, bool)> = self
            .workers
            .iter()
            .filter_map(|(slot, live)| {
                let (at, st) = live.exited?;
                Some((slot.clone(), live.id, at, st, live.process.killed(st)))
            })
            .collect();
        let any_killed = seen.iter().any(|s| s.4);
        let hold = |at: Instant, st: ExitStatus, killed: bool| {
            self.mode == Mode::Static
                && !any_killed
                && !killed
                && !st.success()
                && now.saturating_duration_since(at) < EXIT_SETTLE
        };
        let mut out: Vec<(SlotId, usize, ExitStatus, bool)> = seen
            .into_iter()
            .filter(|&(_, _, at, st, killed)| !hold(at, st, killed))
            .map(|(slot, id, _, st, killed)| (slot, id, st, killed))
            .collect();
        out.sort_by_key(|&(_, id, _, killed)| (!killed, id));
        out.into_iter().map(|(slot, _, st, _)| (slot, st)).collect()
    }

    /// Stalls past the shutdown time: the ranks they wait on have failed.
    fn poll_stalls(&mut self) -> Vec<Command> {
        let Some(inspector) = self.inspector.as_mut() else {
            return Vec::new();
        };
        let mut stalled = Vec::new();
        // Tokio's clock, which an in-process cluster test pauses.
        for event in inspector.poll(Instant::now().into_std()) {
            match event {
                StallEvent::Warn(stall) => tracing::warn!("{stall}"),
                StallEvent::Shutdown(stall) => {
                    let why = match self.mode {
                        Mode::Static => {
                            let limit = self.stall.and_then(|c| c.shutdown).unwrap_or_default();
                            let limit = limit.as_secs_f64();
                            format!("{stall}, past the stall shutdown time of {limit} s")
                        }
                        Mode::Elastic => {
                            self.say.line(format_args!(
                                "{stall}, past the stall shutdown time; replacing the stalled ranks"
                            ));
                            "stalled".to_owned()
                        }
                    };
                    stalled.extend(stall.missing.iter().map(|r| (r.slot.clone(), why.clone())));
                }
            }
        }
        let now = self.now();
        let mut cmds = Vec::new();
        for (slot, why) in stalled {
            self.retire(&slot);
            cmds.extend(self.core.failed(now, &slot, &why));
        }
        cmds
    }

    /// Stops the worker on `slot` (if any) in the background.
    pub(super) fn retire(&mut self, slot: &SlotId) {
        if let Some(mut live) = self.workers.remove(slot) {
            // Dropping the link's channel closes the connection.
            live.link = None;
            self.stopping.push(tokio::spawn(async move {
                stop_all(std::slice::from_mut(&mut live.process), STOP_GRACE).await;
            }));
        }
    }

    /// Starts a worker on `slot`.
    pub(super) async fn spawn(&mut self, slot: &SlotId) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let process = self
            .launcher
            .start(id, slot)
            .await
            .map_err(|e| e.to_string())?;
        let live = Live {
            id,
            process,
            link: None,
            leaving: false,
            link_ended: None,
            pid: None,
            link_id: 0,
            exited: None,
            finished: false,
        };
        if let Some(old) = self.workers.insert(slot.clone(), live) {
            // A worker told to leave that has not exited yet: it gets its
            // time to leave cleanly, then is stopped.
            self.stopping.push(tokio::spawn(let_leave(old)));
        }
        Ok(())
    }

    /// Stops every worker still running and waits for the stopping ones; a
    /// static job that did not succeed first tells its workers why.
    pub(super) async fn wind_down(&mut self, ending: Ending) {
        if self.launcher.self_started() {
            // Pods stop when told; a coordinator that steps down or is
            // stopped tells them nothing: the next leader takes them over.
            if ending == Ending::Failed {
                self.tell_all(&CoordinatorMsg::Stop {
                    reason: "the job failed".to_owned(),
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            for t in self.stopping.drain(..) {
                t.abort();
            }
            return;
        }
        if self.mode == Mode::Static && ending != Ending::Success {
            let reason = "the job is stopping".to_owned();
            self.tell_all(&CoordinatorMsg::Stop { reason });
        }
        let mut rest: Vec<Box<dyn Started>> =
            self.workers.drain().map(|(_, l)| l.process).collect();
        stop_all(&mut rest, STOP_GRACE).await;
        for t in self.stopping.drain(..) {
            let _ = t.await;
        }
        self.launcher.finish().await;
    }

    /// Takes over, at once, the detached members of a resumed job whose
    /// workers started by themselves and are still registered (their pods'
    /// keys): so that one that finished, or died, while no coordinator led
    /// is seen as such without waiting for it to reconnect.
    fn adopt_self_started(&mut self) {
        if !self.launcher.self_started() {
            return;
        }
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
        let Some(process) = self.launcher.adopt(self.next_id, slot, pid) else {
            tracing::warn!(%slot, pid, "a member reconnected but its launcher cannot supervise it");
            return;
        };
        let live = Live {
            id: self.next_id,
            process,
            link: None,
            leaving: false,
            link_ended: None,
            pid: Some(pid),
            link_id: 0,
            exited: None,
            finished: false,
        };
        self.next_id += 1;
        self.workers.insert(slot.clone(), live);
    }
}

/// How long a worker whose control connection closed is given for its exit
/// status to come before the closing counts as its end.
fn exit_grace(self_started: bool, finished: bool) -> Duration {
    match (self_started, finished) {
        // A pod's exit status is its key vanishing (a lease later): no use
        // waiting for it.
        (true, _) => Duration::ZERO,
        // It said it finished: its exit status, when it comes, says whether
        // its end went well too.
        (false, true) => FINISHED_EXIT_GRACE,
        (false, false) => EXIT_GRACE,
    }
}

/// Sleeps until `due`, or for ever.
async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits up to [`LEAVE_GRACE`] for a leaving worker to exit, then stops it.
async fn let_leave(mut old: Live) {
    let deadline = Instant::now() + LEAVE_GRACE;
    while Instant::now() < deadline && matches!(old.process.poll(), Ok(None)) {
        tokio::time::sleep(EXIT_POLL).await;
    }
    stop_all(std::slice::from_mut(&mut old.process), STOP_GRACE).await;
}

async fn refuse(mut link: crate::server::Link, reason: String) {
    use futures::SinkExt;
    let stop = CoordinatorMsg::Stop { reason };
    let _ = tokio::time::timeout(crate::server::HANDSHAKE_TIMEOUT, link.send(stop)).await;
}
