//! Slots whose worker could not be started (the launcher failed: no process
//! could be made, ssh could not run it): not started again before their
//! time, the wait doubling with each failure in a row, from
//! [`FIRST_WAIT`] up to [`MAX_WAIT`], so that a host out of processes or
//! memory costs a start now and then instead of a loop of them. A worker
//! that registers ends its slot's run of failures.

use std::collections::BTreeMap;
use std::time::Duration;

use super::SlotId;

/// The wait after a slot's first failed start.
pub(super) const FIRST_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between two starts on a slot.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Failures {
    /// Failed starts in a row.
    count: u32,
    /// No start before then (`None` once it has passed).
    until: Option<Duration>,
}

/// Every slot's run of failed starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct StartBackoff {
    slots: BTreeMap<SlotId, Failures>,
}

impl StartBackoff {
    /// A start on `slot` failed at `now`; returns how many in a row.
    pub(super) fn failed(&mut self, now: Duration, slot: &SlotId) -> u32 {
        let f = self.slots.entry(slot.clone()).or_insert(Failures {
            count: 0,
            until: None,
        });
        f.count = f.count.saturating_add(1);
        let doublings = f.count.saturating_sub(1).min(16);
        let wait = FIRST_WAIT.saturating_mul(1 << doublings).min(MAX_WAIT);
        f.until = Some(now.saturating_add(wait));
        f.count
    }

    /// The worker on `slot` registered: its starts work.
    pub(super) fn started(&mut self, slot: &SlotId) {
        self.slots.remove(slot);
    }

    /// Whether `slot` may not be started yet.
    pub(super) fn waiting(&self, slot: &SlotId) -> bool {
        self.slots.get(slot).is_some_and(|f| f.until.is_some())
    }

    /// Ends the waits that are over at `now`; whether any was.
    pub(super) fn expire(&mut self, now: Duration) -> bool {
        let mut any = false;
        for f in self.slots.values_mut() {
            if f.until.is_some_and(|u| now >= u) {
                f.until = None;
                any = true;
            }
        }
        any
    }

    /// When the next wait ends.
    pub(super) fn next_expiry(&self) -> Option<Duration> {
        self.slots.values().filter_map(|f| f.until).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_up_to_its_cap_and_a_registration_ends_it() {
        let s = SlotId::new("a", 0);
        let mut b = StartBackoff::default();
        let mut now = Duration::ZERO;
        let mut waits = Vec::new();
        for _ in 0..10 {
            b.failed(now, &s);
            assert!(b.waiting(&s));
            let until = b.next_expiry().unwrap_or_default();
            waits.push(until - now);
            assert!(!b.expire(until - Duration::from_millis(1)));
            assert!(b.expire(until));
            assert!(!b.waiting(&s));
            now = until;
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(
            ms,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
        b.started(&s);
        assert_eq!(b.failed(now, &s), 1, "a registration ends the run");
    }
}
