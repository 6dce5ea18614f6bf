//! How the driver takes its events: as many as are waiting, in one batch.
//!
//! A coordinator of n workers gets n heartbeats a second and, at each
//! reset, n rejoins within a few milliseconds. What it does after an event
//! (polling exits, timers and stalls, settling the membership core) looks
//! at every worker: done after each event, that is n^2 work a second at
//! rest and n^2 per reset. So the driver takes every event already waiting
//! (up to [`BATCH`]) before it settles the core once and sweeps once; and
//! not every batch is swept at once ([`Batch`]). A batch of nothing but
//! heartbeats that asked for nothing changes nothing the sweep looks at but
//! the stall inspector's reports: it is swept at most every [`BEAT_SWEEP`]
//! while some rank lists a pending tensor (the inspector sees it that
//! soon), and not at all while none does (the sweep's timers wake the
//! driver by themselves). A batch of rejoins and reports of a generation
//! running, which gave no command, waits until ten times the last sweep's
//! work has passed since it began (at most [`ROUTINE_WAIT_MAX`]; not at
//! all after a sweep of under a quarter of a millisecond): a reset
//! at 10,000 workers brings them in a few hundred batches, and the sweeps
//! after them had been most of the driver's time in it.
//!
//! ```text
//!  select! ─► Woke ─► handle ─┬─ drain waiting arrivals and link events (≤ BATCH)
//!                             └─ commands ─► sweep (quiet, routine: maybe later) ─► core.settle_deferred
//! ```

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Outside;
use super::discovery::Offer;
use super::links::{LinkEvent, LinkEventKind};
use crate::server::{Arrival, Arrivals};

/// Most events taken in one batch besides the one that woke the driver.
pub(super) const BATCH: usize = 4096;

/// Longest a batch of heartbeats waits for the sweep.
pub(super) const BEAT_SWEEP: Duration = Duration::from_millis(50);

/// What woke the driver.
#[derive(Debug)]
pub(super) enum Woke {
    /// Something it waited for is due.
    Due,
    /// The launcher says a worker may have ended.
    ExitNews,
    Outside(Outside),
    Offer(Offer),
    Arrival(Box<Arrival>),
    Link(LinkEvent),
}

/// One event of a batch.
#[derive(Debug)]
pub(super) enum Taken {
    Arrival(Box<Arrival>),
    Link(LinkEvent),
}

/// Takes the arrivals and link events already waiting, up to [`BATCH`].
pub(super) fn drain(arrivals: &mut Arrivals, events: &mut mpsc::Receiver<LinkEvent>) -> Vec<Taken> {
    let mut taken = Vec::new();
    while taken.len() < BATCH {
        if let Some(a) = arrivals.try_next() {
            taken.push(Taken::Arrival(Box::new(a)));
        } else if let Ok(e) = events.try_recv() {
            taken.push(Taken::Link(e));
        } else {
            break;
        }
    }
    taken
}

/// What a batch of events asks of the sweep after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Batch {
    /// Heartbeats that asked for nothing: they change nothing the sweep
    /// looks at but the stall inspector's reports.
    Quiet,
    /// Rejoins and reports of a generation running that gave no command
    /// at once: what a reset brings from every worker within milliseconds.
    /// The membership core settles on them at the sweep.
    Routine,
    /// Anything else: swept at once.
    Urgent,
}

impl Batch {
    /// The kind of a batch of this one event.
    pub(super) fn of(e: &LinkEvent) -> Batch {
        match e.kind {
            LinkEventKind::Beat { .. } => Batch::Quiet,
            LinkEventKind::Rejoin { .. } | LinkEventKind::Running { .. } => Batch::Routine,
            _ => Batch::Urgent,
        }
    }
}

/// A routine batch waits for the sweep until this many times the last
/// sweep's own work has passed since it began: while a reset's rejoins
/// flood in, sweeping takes at most a tenth of the driver's time (at
/// 10,000 workers a sweep's passes over every worker take about a
/// millisecond, and it had swept some 300 times a reset).
const ROUTINE_SHARE: u32 = 10;

/// Longest a routine batch waits for the sweep.
pub(super) const ROUTINE_WAIT_MAX: Duration = Duration::from_millis(20);

/// A sweep whose work took less than this is no cost to save: a routine
/// batch after it is swept at once (a job of tens of workers, whose
/// recovery is tens of milliseconds, waits for nothing).
const ROUTINE_CHEAP: Duration = Duration::from_micros(250);

/// When the driver last swept, what its passes took, and what came since.
#[derive(Debug)]
pub(super) struct Sweeps {
    last: Instant,
    cost: Duration,
    beats_unswept: bool,
    routine_unswept: bool,
}

impl Sweeps {
    pub(super) fn new() -> Self {
        Self {
            last: Instant::now(),
            cost: Duration::ZERO,
            beats_unswept: false,
            routine_unswept: false,
        }
    }

    /// Whether a batch is swept now: an urgent one at once; a routine one
    /// once [`ROUTINE_SHARE`] times the last sweep's work has passed since
    /// it began (at most [`ROUTINE_WAIT_MAX`]; at once after a sweep
    /// cheaper than [`ROUTINE_CHEAP`]); a quiet one not until
    /// [`BEAT_SWEEP`] after the last sweep while the stall inspector is
    /// `listing` pending tensors, and not at all while it is not. A batch
    /// not swept is swept with the next one that is, or at
    /// [`Sweeps::wake_by`].
    pub(super) fn sweep_now(&mut self, batch: Batch, listing: bool, now: Instant) -> bool {
        let routine_due = now >= self.last + self.routine_wait();
        let sweep = match batch {
            Batch::Urgent => true,
            _ if self.routine_unswept && routine_due => true,
            Batch::Routine if routine_due => true,
            Batch::Routine => {
                self.routine_unswept = true;
                false
            }
            Batch::Quiet if !listing => false,
            Batch::Quiet if now < self.last + BEAT_SWEEP => {
                self.beats_unswept = true;
                false
            }
            Batch::Quiet => true,
        };
        if sweep {
            self.last = now;
            self.beats_unswept = false;
            self.routine_unswept = false;
        }
        sweep
    }

    /// Whether a routine batch waits for the sweep (the core's settling
    /// with it).
    pub(super) fn holding_routine(&self) -> bool {
        self.routine_unswept
    }

    /// The sweep begun at the last [`Sweeps::sweep_now`] spent `cost` in
    /// its passes over the workers (what it carried out not counted).
    pub(super) fn swept(&mut self, cost: Duration) {
        self.cost = cost;
    }

    fn routine_wait(&self) -> Duration {
        if self.cost < ROUTINE_CHEAP {
            return Duration::ZERO;
        }
        (self.cost * ROUTINE_SHARE).min(ROUTINE_WAIT_MAX)
    }

    /// `due`, brought forward to when unswept batches are swept.
    pub(super) fn wake_by(&self, due: Option<Instant>) -> Option<Instant> {
        let beats = self.beats_unswept.then(|| self.last + BEAT_SWEEP);
        let routine = self
            .routine_unswept
            .then(|| self.last + self.routine_wait());
        [due, beats, routine].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn quiet_batches_wait_for_the_sweep_and_bring_the_wake_forward() {
        let mut s = Sweeps::new();
        let t0 = Instant::now();
        assert!(
            !s.sweep_now(Batch::Quiet, true, t0),
            "a heartbeat right after a sweep waits"
        );
        assert_eq!(s.wake_by(None), Some(t0 + BEAT_SWEEP));
        let far = t0 + Duration::from_secs(9);
        assert_eq!(s.wake_by(Some(far)), Some(t0 + BEAT_SWEEP));
        assert!(
            s.sweep_now(Batch::Quiet, true, t0 + BEAT_SWEEP),
            "due once the sweep interval passed"
        );
        assert_eq!(
            s.wake_by(Some(far)),
            Some(far),
            "nothing unswept: the wake stands"
        );
        assert!(
            s.sweep_now(Batch::Urgent, true, t0 + BEAT_SWEEP),
            "anything else is swept at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_batches_are_not_swept_while_no_tensor_is_pending() {
        let mut s = Sweeps::new();
        let t0 = Instant::now();
        let later = t0 + BEAT_SWEEP * 10;
        assert!(
            !s.sweep_now(Batch::Quiet, false, later),
            "nothing to inspect"
        );
        assert_eq!(s.wake_by(None), None, "and no wake for it");
        assert!(
            s.sweep_now(Batch::Urgent, false, later),
            "anything else is swept"
        );
        assert!(
            s.sweep_now(Batch::Quiet, true, later + BEAT_SWEEP),
            "heartbeats listing tensors are swept again"
        );
    }

    /// Routine batches wait ten times the last sweep's work after it
    /// began (never more than the cap, nothing after a cheap sweep), are
    /// swept with any batch swept meanwhile, and bring the wake forward to
    /// their turn.
    #[tokio::test(start_paused = true)]
    async fn routine_batches_wait_for_a_tenth_of_the_time_to_be_sweeping() {
        let mut s = Sweeps::new();
        let t0 = Instant::now();
        assert!(
            s.sweep_now(Batch::Routine, false, t0),
            "no sweep had work yet"
        );
        s.swept(ROUTINE_CHEAP - Duration::from_micros(1));
        assert!(
            s.sweep_now(Batch::Routine, false, t0),
            "a cheap sweep is done at once"
        );
        s.swept(Duration::from_millis(1));
        let turn = t0 + Duration::from_millis(10);
        let soon = t0 + Duration::from_millis(3);
        assert!(!s.sweep_now(Batch::Routine, false, soon));
        assert!(s.holding_routine());
        let far = t0 + Duration::from_secs(9);
        assert_eq!(s.wake_by(Some(far)), Some(turn));
        assert!(
            !s.sweep_now(Batch::Quiet, false, soon),
            "heartbeats do not sweep early"
        );
        assert!(
            s.sweep_now(Batch::Quiet, false, turn),
            "at its turn, whatever batch comes"
        );
        assert!(!s.holding_routine());
        assert_eq!(s.wake_by(Some(far)), Some(far));
        s.swept(Duration::from_secs(1));
        let capped = turn + ROUTINE_WAIT_MAX;
        assert!(!s.sweep_now(Batch::Routine, false, capped - Duration::from_millis(1)));
        assert_eq!(s.wake_by(None), Some(capped), "the wait's cap");
        assert!(
            s.sweep_now(Batch::Urgent, false, turn),
            "an urgent batch is swept at once, the routine one with it"
        );
        assert!(!s.holding_routine());
    }

    /// Rejoins and reports of a running generation are routine, heartbeats
    /// quiet, and anything else urgent; a batch is what its most urgent
    /// event is.
    #[test]
    fn events_are_quiet_routine_or_urgent() {
        let e = |kind| LinkEvent {
            slot: elastic::membership::SlotId::new("h", 0),
            id: 1,
            kind,
        };
        let beat = e(LinkEventKind::Beat {
            progress: crate::metrics::Progress::default(),
            pending: control::PendingReport::default(),
        });
        let running = e(LinkEventKind::Running {
            generation: control::Generation(2),
            step: 5,
            reached: Some(6),
        });
        let ended = e(LinkEventKind::Ended("closed".into()));
        assert_eq!(Batch::of(&beat), Batch::Quiet);
        assert_eq!(Batch::of(&running), Batch::Routine);
        assert_eq!(Batch::of(&ended), Batch::Urgent);
        assert_eq!(Batch::Quiet.max(Batch::Routine), Batch::Routine);
        assert_eq!(Batch::Routine.max(Batch::Urgent), Batch::Urgent);
    }
}
