//! The pending board: which tensors were submitted on this rank and have not
//! finished, and since when. The engine enters a tensor when it is submitted
//! (an [`Entry`] travels with the submission and leaves the board when the
//! submission is finished, failed or dropped); the heartbeat reads a
//! [`PendingReport`] for the coordinator's stall inspector.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use control::PendingReport;

/// Tensors in flight on this rank, shared between the engine and the heartbeat.
#[derive(Clone, Debug, Default)]
pub struct PendingBoard {
    inner: Arc<Mutex<Board>>,
}

/// Slots reused as entries come and go (a step enters and leaves the same
/// number of tensors every time, so the board stops allocating); entry
/// numbers grow with time and order the report.
#[derive(Debug, Default)]
struct Board {
    next: u64,
    slots: Vec<Option<(u64, String, Instant)>>,
    free: Vec<usize>,
    live: usize,
}

/// A tensor's place on the board; leaving the board when dropped.
#[derive(Debug)]
pub(crate) struct Entry {
    board: PendingBoard,
    slot: usize,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut b = self.board.lock();
        if let Some(s) = b.slots.get_mut(self.slot)
            && s.take().is_some()
        {
            b.live -= 1;
            b.free.push(self.slot);
        }
    }
}

impl PendingBoard {
    fn lock(&self) -> MutexGuard<'_, Board> {
        // The board holds plain data that every writer leaves whole, so a
        // panic elsewhere while it was held does not make it wrong.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `name`, submitted at `at`, on the board until the entry is dropped.
    pub(crate) fn enter(&self, name: &str, at: Instant) -> Entry {
        let mut b = self.lock();
        let id = b.next;
        b.next += 1;
        let entry = Some((id, name.to_owned(), at));
        let slot = match b.free.pop() {
            Some(slot) => {
                b.slots[slot] = entry;
                slot
            }
            None => {
                b.slots.push(entry);
                b.slots.len() - 1
            }
        };
        b.live += 1;
        Entry {
            board: self.clone(),
            slot,
        }
    }

    /// How many tensors are on the board.
    pub fn len(&self) -> usize {
        self.lock().live
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every pending tensor, oldest first, with its age at `now` (a name
    /// submitted twice is listed once, at its older age), bounded for a
    /// heartbeat.
    pub fn report(&self, now: Instant) -> PendingReport {
        let b = self.lock();
        let mut oldest_first: Vec<&(u64, String, Instant)> = b.slots.iter().flatten().collect();
        oldest_first.sort_unstable_by_key(|(id, _, _)| *id);
        let mut seen = HashSet::with_capacity(oldest_first.len());
        PendingReport::bounded(
            oldest_first
                .into_iter()
                .filter(|(_, name, _)| seen.insert(name.as_str()))
                .map(|(_, name, at)| (name.as_str(), now.saturating_duration_since(*at))),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use control::{MAX_PENDING_REPORTED, PendingTensor};

    use super::*;

    /// `ago` milliseconds before `now`.
    fn before(now: Instant, ago: u64) -> Instant {
        now.checked_sub(Duration::from_millis(ago)).unwrap()
    }

    fn listed(r: &PendingReport) -> Vec<(&str, u64)> {
        r.tensors
            .iter()
            .map(|PendingTensor { name, age_ms }| (name.as_str(), *age_ms))
            .collect()
    }

    #[test]
    fn entries_leave_when_dropped_and_the_report_is_oldest_first() {
        let board = PendingBoard::default();
        let now = Instant::now();
        let a = board.enter("grad.a", before(now, 3000));
        let b = board.enter("grad.b", before(now, 2000));
        let c = board.enter("grad.c", before(now, 1000));
        assert_eq!(
            listed(&board.report(now)),
            [("grad.a", 3000), ("grad.b", 2000), ("grad.c", 1000)]
        );
        drop(b);
        assert_eq!(
            listed(&board.report(now)),
            [("grad.a", 3000), ("grad.c", 1000)]
        );
        drop((a, c));
        assert!(board.is_empty());
        assert_eq!(board.report(now), PendingReport::default());
    }

    #[test]
    fn a_slot_left_is_reused_and_the_report_stays_in_submission_order() {
        let board = PendingBoard::default();
        let now = Instant::now();
        let a = board.enter("a", before(now, 30));
        let b = board.enter("b", before(now, 20));
        drop(a);
        // Same age as b, submitted after it, in a's old slot.
        let c = board.enter("c", before(now, 20));
        assert_eq!(listed(&board.report(now)), [("b", 20), ("c", 20)]);
        assert_eq!(board.len(), 2);
        assert_eq!(board.lock().slots.len(), 2, "a's slot was not reused");
        drop((b, c));
        assert!(board.is_empty());
    }

    #[test]
    fn a_name_in_flight_twice_is_listed_once_and_stays_while_either_is_held() {
        let board = PendingBoard::default();
        let now = Instant::now();
        let first = board.enter("w", before(now, 500));
        let second = board.enter("w", before(now, 100));
        assert_eq!(listed(&board.report(now)), [("w", 500)]);
        drop(first);
        assert_eq!(listed(&board.report(now)), [("w", 100)]);
        drop(second);
        assert!(board.is_empty());
    }

    #[test]
    fn a_crowded_board_reports_its_oldest_and_counts_the_rest() {
        let board = PendingBoard::default();
        let now = Instant::now();
        let held: Vec<Entry> = (0..MAX_PENDING_REPORTED + 5)
            .map(|i| board.enter(&format!("t{i}"), now))
            .collect();
        let r = board.report(now);
        assert_eq!(r.tensors.len(), MAX_PENDING_REPORTED);
        assert_eq!(r.left_out, 5);
        assert_eq!(r.tensors[0].name, "t0");
        drop(held);
        assert!(board.is_empty());
    }
}
