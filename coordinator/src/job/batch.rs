//! How the driver takes its events: as many as are waiting, in one batch.
//!
//! A coordinator of n workers gets n heartbeats a second and, at each
//! reset, n rejoins within a few milliseconds. What it does after an event
//! (polling exits, timers and stalls, settling the membership core) looks
//! at every worker: done after each event, that is n^2 work a second at
//! rest and n^2 per reset. So the driver takes every event already waiting
//! (up to [`BATCH`]) before it settles the core once and sweeps once; and a
//! batch of nothing but heartbeats that asked for nothing changes nothing
//! the sweep looks at but the stall inspector's reports: it is swept at
//! most every [`BEAT_SWEEP`] while some rank lists a pending tensor (the
//! inspector sees it that soon), and not at all while none does (the
//! sweep's timers wake the driver by themselves).
//!
//! ```text
//!  select! ─► Woke ─► handle ─┬─ drain waiting arrivals and link events (≤ BATCH)
//!                             └─ core.settle_deferred ─► commands ─► sweep (unless only beats)
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

/// Whether an event is a heartbeat: it changes nothing the sweep looks at
/// unless it asks for something.
pub(super) fn is_beat(e: &LinkEvent) -> bool {
    matches!(e.kind, LinkEventKind::Beat { .. })
}

/// When the driver last swept, and whether heartbeats came since.
#[derive(Debug)]
pub(super) struct Sweeps {
    last: Instant,
    beats_unswept: bool,
}

impl Sweeps {
    pub(super) fn new() -> Self {
        Self {
            last: Instant::now(),
            beats_unswept: false,
        }
    }

    /// Whether a batch is swept now: one that was `quiet` (heartbeats only,
    /// asking nothing) not until [`BEAT_SWEEP`] after the last sweep while
    /// the stall inspector is `listing` pending tensors, and not at all
    /// while it is not.
    pub(super) fn sweep_now(&mut self, quiet: bool, listing: bool, now: Instant) -> bool {
        if quiet && !listing {
            return false;
        }
        if quiet && now < self.last + BEAT_SWEEP {
            self.beats_unswept = true;
            return false;
        }
        self.last = now;
        self.beats_unswept = false;
        true
    }

    /// `due`, brought forward to when unswept heartbeats are swept.
    pub(super) fn wake_by(&self, due: Option<Instant>) -> Option<Instant> {
        if !self.beats_unswept {
            return due;
        }
        let beats = self.last + BEAT_SWEEP;
        Some(due.map_or(beats, |d| d.min(beats)))
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
            !s.sweep_now(true, true, t0),
            "a heartbeat right after a sweep waits"
        );
        assert_eq!(s.wake_by(None), Some(t0 + BEAT_SWEEP));
        let far = t0 + Duration::from_secs(9);
        assert_eq!(s.wake_by(Some(far)), Some(t0 + BEAT_SWEEP));
        assert!(
            s.sweep_now(true, true, t0 + BEAT_SWEEP),
            "due once the sweep interval passed"
        );
        assert_eq!(
            s.wake_by(Some(far)),
            Some(far),
            "nothing unswept: the wake stands"
        );
        assert!(
            s.sweep_now(false, true, t0 + BEAT_SWEEP),
            "anything else is swept at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_batches_are_not_swept_while_no_tensor_is_pending() {
        let mut s = Sweeps::new();
        let t0 = Instant::now();
        let later = t0 + BEAT_SWEEP * 10;
        assert!(!s.sweep_now(true, false, later), "nothing to inspect");
        assert_eq!(s.wake_by(None), None, "and no wake for it");
        assert!(s.sweep_now(false, false, later), "anything else is swept");
        assert!(
            s.sweep_now(true, true, later + BEAT_SWEEP),
            "heartbeats listing tensors are swept again"
        );
    }
}
