//! The driver's workers: the processes it started (or took over from
//! another coordinator), each with its control link once it registered,
//! and the ones it is stopping.

use std::collections::HashMap;
use std::process::ExitStatus;
use std::time::Duration;

use control::CoordinatorMsg;
use elastic::membership::SlotId;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::job::STOP_GRACE;
use crate::job::links::Outbox;
use crate::launch::{EXIT_POLL, Launcher, Started, stop_all};

/// How long a worker told to leave gets to exit on its own.
const LEAVE_GRACE: Duration = Duration::from_secs(10);
/// How long a job that ends on any failure holds a worker's failed exit
/// without a signal before reporting it: the worker may have exited on
/// losing a peer that was killed, whose own exit (over ssh, later) names
/// the cause.
pub(super) const EXIT_SETTLE: Duration = Duration::from_millis(300);

/// A started worker.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) id: usize,
    pub(super) process: Box<dyn Started>,
    pub(super) link: Option<Outbox>,
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

impl Live {
    fn new(id: usize, process: Box<dyn Started>, pid: Option<u32>) -> Self {
        Live {
            id,
            process,
            link: None,
            leaving: false,
            link_ended: None,
            pid,
            link_id: 0,
            exited: None,
            finished: false,
        }
    }
}

/// Every worker of the job, by slot, and those being stopped.
#[derive(Debug, Default)]
pub(super) struct Workers {
    live: HashMap<SlotId, Live>,
    /// The next worker's number (its rank in a static job's output).
    next_id: usize,
    stopping: Vec<JoinHandle<()>>,
    /// When [`Workers::exits`] last looked at every process.
    looked: Option<Instant>,
    /// A worker's control connection closed since: its exit is to be
    /// looked for at once.
    look_now: bool,
}

impl Workers {
    pub(super) fn get(&self, slot: &SlotId) -> Option<&Live> {
        self.live.get(slot)
    }

    pub(super) fn get_mut(&mut self, slot: &SlotId) -> Option<&mut Live> {
        self.live.get_mut(slot)
    }

    pub(super) fn contains(&self, slot: &SlotId) -> bool {
        self.live.contains_key(slot)
    }

    pub(super) fn remove(&mut self, slot: &SlotId) -> Option<Live> {
        self.live.remove(slot)
    }

    /// How many workers run.
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&SlotId, &Live)> {
        self.live.iter()
    }

    /// Every running worker's process.
    pub(super) fn processes(&mut self) -> impl Iterator<Item = &mut Box<dyn Started>> {
        self.live.values_mut().map(|l| &mut l.process)
    }

    /// Starts a worker on `slot` through `launcher`.
    pub(super) async fn spawn(
        &mut self,
        launcher: &mut dyn Launcher,
        slot: &SlotId,
    ) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let process = launcher.start(id, slot).await.map_err(|e| e.to_string())?;
        if let Some(old) = self.live.insert(slot.clone(), Live::new(id, process, None)) {
            // A worker told to leave that has not exited yet: it gets its
            // time to leave cleanly, then is stopped.
            self.stopping.retain(|t| !t.is_finished());
            self.stopping.push(tokio::spawn(let_leave(old)));
        }
        Ok(())
    }

    /// Takes over, through `launcher`, the worker that registered on `slot`
    /// from process `pid`, which another coordinator started; false when
    /// the launcher cannot supervise it.
    pub(super) fn adopt(&mut self, launcher: &mut dyn Launcher, slot: &SlotId, pid: u32) -> bool {
        let Some(process) = launcher.adopt(self.next_id, slot, pid) else {
            return false;
        };
        let live = Live::new(self.next_id, process, Some(pid));
        self.next_id += 1;
        self.live.insert(slot.clone(), live);
        true
    }

    /// Stops the worker on `slot` (if any) in the background.
    pub(super) fn retire(&mut self, slot: &SlotId) {
        if let Some(mut live) = self.live.remove(slot) {
            // Dropping the link's channel closes the connection.
            live.link = None;
            self.stopping.retain(|t| !t.is_finished());
            self.stopping.push(tokio::spawn(async move {
                stop_all(std::slice::from_mut(&mut live.process), STOP_GRACE).await;
            }));
        }
    }

    /// Sends `msg` to the worker on `slot`, if it is connected. A full channel
    /// means a stuck connection, which its task reports.
    pub(super) fn tell(&self, slot: &SlotId, msg: CoordinatorMsg) {
        if let Some(link) = self.live.get(slot).and_then(|l| l.link.as_ref()) {
            let _ = link.try_send(Box::new(msg));
        }
    }

    /// Sends `msg` to every connected worker not leaving.
    pub(super) fn tell_all(&self, msg: &CoordinatorMsg) {
        for live in self.live.values().filter(|l| !l.leaving) {
            if let Some(link) = &live.link {
                let _ = link.try_send(Box::new(msg.clone()));
            }
        }
    }

    /// Whether the driver should look at its workers' exits after this
    /// batch of events: on the launcher's news of an exit or a deadline's
    /// wake (`woke_for`: an exit held for [`EXIT_SETTLE`], a closed
    /// connection's grace), once a control connection has closed, and at
    /// least every `sweep` whatever else comes (the launcher's
    /// [`Launcher::exit_sweep`]: news lost, or a launcher that cannot
    /// tell). A look is a pass over every worker: at 10,000 workers, done
    /// after every batch of a reset's rejoins, it had taken a sixth to two
    /// fifths of the driver's time in the reset.
    pub(super) fn exits_due(&self, woke_for: bool, now: Instant, sweep: Duration) -> bool {
        woke_for
            || self.look_now
            || self
                .looked
                .is_none_or(|at| now.saturating_duration_since(at) >= sweep)
    }

    /// A worker's control connection closed: its exit is to be looked for.
    pub(super) fn watch(&mut self) {
        self.look_now = true;
    }

    /// Workers that have exited, those killed by a signal first: when several
    /// ended since the last look, a kill is more likely the cause than peers
    /// that exited on losing it. With `settle` (a job that ends on any
    /// failure) a failure without a signal waits up to [`EXIT_SETTLE`] for
    /// such a kill to show.
    pub(super) fn exits(&mut self, settle: bool) -> Vec<(SlotId, ExitStatus)> {
        let now = Instant::now();
        self.looked = Some(now);
        self.look_now = false;
        for (slot, live) in &mut self.live {
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
            .live
            .iter()
            .filter_map(|(slot, live)| {
                let (at, st) = live.exited?;
                Some((slot.clone(), live.id, at, st, live.process.killed(st)))
            })
            .collect();
        let any_killed = seen.iter().any(|s| s.4);
        let hold = |at: Instant, st: ExitStatus, killed: bool| {
            settle
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

    /// Stops every worker still running and waits for them and for those
    /// being stopped.
    pub(super) async fn stop(&mut self) {
        let mut rest: Vec<Box<dyn Started>> = self.live.drain().map(|(_, l)| l.process).collect();
        stop_all(&mut rest, STOP_GRACE).await;
        for t in self.stopping.drain(..) {
            let _ = t.await;
        }
    }

    /// Leaves every worker running (they outlive this coordinator) and
    /// stops stopping those it was stopping.
    pub(super) fn abandon(&mut self) {
        for t in self.stopping.drain(..) {
            t.abort();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::EXIT_SWEEP;

    #[test]
    fn exits_are_looked_at_on_news_a_closed_connection_and_at_least_every_sweep() {
        for sweep in [EXIT_POLL, EXIT_SWEEP] {
            let mut w = Workers::default();
            let t0 = Instant::now();
            assert!(w.exits_due(false, t0, sweep), "never looked yet");
            assert!(w.exits(false).is_empty());
            let looked = w.looked.expect("looked");
            assert!(
                !w.exits_due(false, looked, sweep),
                "just looked, nothing to watch"
            );
            assert!(w.exits_due(true, looked, sweep), "the launcher's news");
            let almost = looked + sweep - Duration::from_millis(1);
            assert!(!w.exits_due(false, almost, sweep));
            assert!(
                w.exits_due(false, looked + sweep, sweep),
                "the sweep's period"
            );
            w.watch();
            assert!(w.exits_due(false, looked, sweep), "a closed connection");
            assert!(w.exits(false).is_empty());
            let now = w.looked.expect("looked");
            assert!(!w.exits_due(false, now, sweep), "nothing left");
        }
    }
}
