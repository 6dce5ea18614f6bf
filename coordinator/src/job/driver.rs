//! The elastic job's driver: feeds the membership core (discovery results,
//! registrations, rejoins, exits, lost connections, stalls, the clock) and
//! carries out its commands (spawn, stop, reset, assign, leave). All
//! decisions are the core's; this file only moves messages and processes.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use control::{CoordinatorMsg, Knobs, Secret};
use elastic::membership::{Command, Membership, SlotId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::links::{self, LinkEvent, LinkEventKind};
use crate::config::JobConfig;
use crate::job::{Ending, JobError, SILENCE, STOP_GRACE, Stops};
use crate::launch::address::{control_addresses, first_interface, interface_address};
use crate::launch::process::{self, WorkerProcess};
use crate::launch::start::{One, start_one};
use crate::server::{Arrival, Server};
use crate::stall::{Inspector, StallConfig, StallEvent};

/// How long a closed control connection waits for its process's exit status
/// (a better description of the failure) before counting as the failure.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long a worker told to leave gets to exit on its own.
const LEAVE_GRACE: Duration = Duration::from_secs(10);
/// How often the driver polls exits and ticks the core.
const TICK: Duration = Duration::from_millis(20);

/// A started worker.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) id: usize,
    pub(super) process: WorkerProcess,
    pub(super) link: Option<mpsc::Sender<CoordinatorMsg>>,
    /// Told to leave: its exit is expected.
    pub(super) leaving: bool,
    /// When its control connection ended, and why.
    pub(super) link_ended: Option<(Instant, String)>,
}

/// The driver's state.
#[derive(Debug)]
pub(super) struct Driver {
    pub(super) cfg: JobConfig,
    pub(super) secret: Secret,
    pub(super) knobs: Knobs,
    pub(super) data_token: u64,
    pub(super) port: u16,
    pub(super) core: Membership,
    pub(super) started: Instant,
    pub(super) workers: HashMap<SlotId, Live>,
    pub(super) next_id: usize,
    pub(super) addrs: HashMap<SlotId, control::PeerAddress>,
    pub(super) forwarders: Vec<JoinHandle<std::io::Result<()>>>,
    pub(super) stopping: Vec<JoinHandle<()>>,
    pub(super) events: mpsc::Sender<LinkEvent>,
    pub(super) stall: Option<StallConfig>,
    pub(super) inspector: Option<Inspector>,
    pub(super) ending: Option<Ending>,
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
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Runs until the core finishes or fails the job, or a signal comes.
    pub(super) async fn run(
        &mut self,
        server: &mut Server,
        mut discovered: mpsc::Receiver<Vec<elastic::hosts::HostSlots>>,
        mut events: mpsc::Receiver<LinkEvent>,
    ) -> Ending {
        let Some(mut stops) = Stops::install() else {
            return Ending::Failed;
        };
        let mut tick = tokio::time::interval(TICK);
        loop {
            let cmds = tokio::select! {
                _ = tick.tick() => Vec::new(),
                ending = stops.next() => return ending,
                Some(hosts) = discovered.recv() => {
                    let now = self.now();
                    self.core.discovered(now, &hosts)
                }
                Some(a) = server.next_arrival() => self.arrive(a),
                Some(e) = events.recv() => self.link_event(e),
            };
            self.carry_out(cmds).await;
            let mut more = self.poll_exits();
            more.extend(self.core.tick(self.now()));
            more.extend(self.poll_stalls());
            self.carry_out(more).await;
            if let Some(ending) = self.ending {
                return ending;
            }
        }
    }

    /// A registered worker: placed if it is the one started on its slot.
    fn arrive(&mut self, a: Arrival) -> Vec<Command> {
        let Arrival {
            registration: r,
            link,
        } = a;
        let slot = SlotId {
            host: r.host.clone(),
            slot: r.slot,
        };
        let Some(live) = self.workers.get_mut(&slot).filter(|l| l.link.is_none()) else {
            tracing::warn!(%slot, "registration refused: no worker was started there");
            tokio::spawn(refuse(link, format!("{slot} is not a slot of this job")));
            return Vec::new();
        };
        live.link = Some(links::spawn(
            link,
            slot.clone(),
            live.id,
            SILENCE,
            self.events.clone(),
        ));
        self.addrs.insert(slot.clone(), r.data_addr);
        let now = self.now();
        self.core.registered(now, &slot)
    }

    fn link_event(&mut self, e: LinkEvent) -> Vec<Command> {
        let Some(live) = self.workers.get_mut(&e.slot).filter(|l| l.id == e.id) else {
            return Vec::new();
        };
        match e.kind {
            LinkEventKind::Beat(pending) => {
                let rank = self.core.members().iter().position(|s| *s == e.slot);
                if let (Some(i), Some(rank)) = (self.inspector.as_mut(), rank) {
                    let key = crate::rendezvous::SlotKey {
                        host: e.slot.host.clone(),
                        slot: e.slot.slot,
                    };
                    i.handle_report(std::time::Instant::now(), rank, key, &pending);
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
        let slots: Vec<SlotId> = self.workers.keys().cloned().collect();
        for slot in slots {
            let Some(live) = self.workers.get_mut(&slot) else {
                continue;
            };
            let status = match live.process.poll() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(%slot, %e, "cannot wait for a worker");
                    None
                }
            };
            if let Some(st) = status {
                let Some(live) = self.workers.remove(&slot) else {
                    continue;
                };
                if live.leaving {
                    tracing::info!(%slot, "worker left");
                } else if st.success() {
                    cmds.extend(self.core.finished(now, &slot));
                } else {
                    let why = format!("worker {} on {slot} {}", live.id, live.process.how(st));
                    eprintln!("elasticrun: {why}");
                    cmds.extend(self.core.failed(now, &slot, &why));
                }
                continue;
            }
            let overdue = live
                .link_ended
                .as_ref()
                .filter(|(at, _)| at.elapsed() >= EXIT_GRACE)
                .map(|(_, why)| why.clone());
            if let Some(why) = overdue {
                let leaving = live.leaving;
                self.retire(&slot);
                if !leaving {
                    let why = format!("worker on {slot}: {why}");
                    eprintln!("elasticrun: {why}");
                    cmds.extend(self.core.failed(now, &slot, &why));
                }
            }
        }
        cmds
    }

    /// Stalls past the shutdown time: the ranks they wait on have failed.
    fn poll_stalls(&mut self) -> Vec<Command> {
        let Some(inspector) = self.inspector.as_mut() else {
            return Vec::new();
        };
        let mut stalled = Vec::new();
        for event in inspector.poll(std::time::Instant::now()) {
            match event {
                StallEvent::Warn(stall) => tracing::warn!("{stall}"),
                StallEvent::Shutdown(stall) => {
                    eprintln!(
                        "elasticrun: {stall}, past the stall shutdown time; replacing the stalled ranks"
                    );
                    stalled.extend(stall.missing.iter().map(|r| SlotId {
                        host: r.slot.host.clone(),
                        slot: r.slot.slot,
                    }));
                }
            }
        }
        let now = self.now();
        let mut cmds = Vec::new();
        for slot in stalled {
            self.retire(&slot);
            cmds.extend(self.core.failed(now, &slot, "stalled"));
        }
        cmds
    }

    /// Stops the worker on `slot` (if any) in the background.
    pub(super) fn retire(&mut self, slot: &SlotId) {
        if let Some(mut live) = self.workers.remove(slot) {
            // Dropping the link's channel closes the connection.
            live.link = None;
            self.stopping.push(tokio::spawn(async move {
                process::stop_all(std::slice::from_mut(&mut live.process), STOP_GRACE).await;
            }));
        }
    }

    /// Starts a worker on `slot`.
    pub(super) async fn spawn(&mut self, slot: &SlotId) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let iface = self.cfg.network_interface.as_deref();
        let addrs = control_addresses(&[slot.host.as_str()], iface).map_err(|e| e.to_string())?;
        let ip = addrs
            .advertised
            .first()
            .copied()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let one = One {
            label: id,
            host: &slot.host,
            slot: slot.slot,
            coordinator: SocketAddr::new(ip, self.port),
        };
        let (process, mut forwarders) = start_one(&self.cfg, &self.secret, &one)
            .await
            .map_err(|e| e.to_string())?;
        self.forwarders.append(&mut forwarders);
        let live = Live {
            id,
            process,
            link: None,
            leaving: false,
            link_ended: None,
        };
        if let Some(old) = self.workers.insert(slot.clone(), live) {
            // A worker told to leave that has not exited yet: it gets its
            // time to leave cleanly, then is stopped.
            self.stopping.push(tokio::spawn(let_leave(old)));
        }
        Ok(())
    }

    /// Stops every worker still running and waits for the stopping ones.
    pub(super) async fn wind_down(&mut self) {
        let mut rest: Vec<WorkerProcess> = self.workers.drain().map(|(_, l)| l.process).collect();
        process::stop_all(&mut rest, STOP_GRACE).await;
        for t in self.stopping.drain(..) {
            let _ = t.await;
        }
        for f in self.forwarders.drain(..) {
            let _ = f.await;
        }
    }
}

/// Waits up to [`LEAVE_GRACE`] for a leaving worker to exit, then stops it.
async fn let_leave(mut old: Live) {
    let deadline = Instant::now() + LEAVE_GRACE;
    while Instant::now() < deadline && matches!(old.process.poll(), Ok(None)) {
        tokio::time::sleep(TICK).await;
    }
    process::stop_all(std::slice::from_mut(&mut old.process), STOP_GRACE).await;
}

async fn refuse(mut link: crate::server::Link, reason: String) {
    use futures::SinkExt;
    let stop = CoordinatorMsg::Stop { reason };
    let _ = tokio::time::timeout(crate::server::HANDSHAKE_TIMEOUT, link.send(stop)).await;
}
