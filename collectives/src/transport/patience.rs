//! How long a link that found nothing to read looks again before it sleeps.
//!
//! A message that is due soon costs less to wait for by looking again than
//! by sleeping: on these virtual machines a sleeping thread's wake-up (a
//! pipe's or a socket's readiness through epoll, the CPU halted meanwhile)
//! takes 20 to 50 µs, a look a fraction of a microsecond. Shared memory
//! ([`crate::transport::shm`]) and TCP ([`crate::transport::tcp`]) links both
//! look for a while, yielding to the runtime between looks, then sleep.

use std::time::{Duration, Instant};

/// How a side that found nothing to do waits: by yielding to the runtime
/// (whose other tasks, a send of this very rank among them, run meanwhile)
/// and looking again, for up to `budget`; then by sleeping until woken.
///
/// The budget adapts to how soon messages come: a wait that found work while
/// looking doubles it (up to `max`); one that had to sleep but ended within
/// `max` sets it to twice that wait, so that the next such wait looks
/// instead; one that lasted longer than `max` halves it (down to [`FLOOR`]):
/// looking only pays while the peer runs beside this rank, and where
/// something else holds the other core every look ran out its whole budget
/// before the wake-up (4 KiB allreduces at 210 µs instead of 15). Halving
/// alone was not enough: once two ranks' budgets had fallen to the floor,
/// each slept through every wait and so was late with its own messages,
/// whose waits then outlasted the floor in turn (4 KiB allreduces stuck at
/// 20 µs instead of 1.5 for hundreds of calls).
#[derive(Debug)]
pub(crate) struct Patience {
    max: Duration,
    budget: Duration,
    since: Option<Instant>,
    looks: u32,
    slept: bool,
}

/// The smallest budget an adapting link keeps: enough to catch a reply that
/// comes at once, so that the budget can grow again.
const FLOOR: Duration = Duration::from_micros(10);

/// Looks between two readings of the clock: a look is a few hundred
/// nanoseconds, and reading the clock was a quarter of a looking rank's CPU.
const LOOKS_PER_CLOCK: u32 = 4;

impl Patience {
    pub(crate) fn new(max: Duration) -> Self {
        Self {
            max,
            budget: max,
            since: None,
            looks: 0,
            slept: false,
        }
    }

    /// Found work: the wait (if there was one) is over; the next one starts
    /// a fresh budget, adapted to how this one went.
    pub(crate) fn reset(&mut self) {
        if let Some(t) = self.since.take() {
            let floor = FLOOR.min(self.max);
            self.budget = if !self.slept {
                (self.budget * 2).min(self.max)
            } else {
                match t.elapsed() {
                    took if took <= self.max => (took * 2).clamp(floor, self.max),
                    _ => (self.budget / 2).max(floor),
                }
            };
        }
        self.looks = 0;
        self.slept = false;
    }

    /// Whether to yield and look again rather than sleep.
    pub(crate) fn again(&mut self) -> bool {
        self.looks = self.looks.wrapping_add(1);
        if self.looks % LOOKS_PER_CLOCK != 1 && self.since.is_some() {
            return true;
        }
        let t = *self.since.get_or_insert_with(Instant::now);
        if t.elapsed() < self.budget {
            return true;
        }
        self.slept = true;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ends a wait that went to sleep, woken `took` after it began, or (with
    /// `None`) found work while looking.
    fn wait(p: &mut Patience, took: Option<Duration>) {
        match took {
            Some(took) => {
                assert!(p.budget.is_zero() || p.again(), "the first look looks");
                p.since = Some(Instant::now() - p.budget - Duration::from_micros(1));
                while p.again() {}
                assert!(p.slept);
                p.since = Some(Instant::now() - took);
            }
            None => assert!(p.again()),
        }
        p.reset();
    }

    #[test]
    fn the_budget_halves_after_sleeps_and_grows_back_after_quick_finds() {
        let max = Duration::from_micros(100);
        let long = Some(Duration::from_millis(5));
        let mut p = Patience::new(max);
        p.reset();
        assert_eq!(p.budget, max, "no wait, no change");
        wait(&mut p, long);
        assert_eq!(p.budget, Duration::from_micros(50));
        for _ in 0..10 {
            wait(&mut p, long);
        }
        assert_eq!(p.budget, FLOOR);
        for _ in 0..4 {
            wait(&mut p, None);
        }
        assert_eq!(p.budget, max);
        let mut never = Patience::new(Duration::ZERO);
        assert!(!never.again(), "a link told not to look never does");
        never.reset();
        assert_eq!(never.budget, Duration::ZERO);
    }

    #[test]
    fn a_wait_that_slept_but_ended_within_the_most_looks_next_time() {
        let max = Duration::from_micros(100);
        let mut p = Patience::new(max);
        for _ in 0..10 {
            wait(&mut p, Some(Duration::from_millis(5)));
        }
        assert_eq!(p.budget, FLOOR, "long waits: sleep soon");
        // Woken 25 µs in: the message came when a longer look would have
        // found it, and the next wait looks for twice as long.
        wait(&mut p, Some(Duration::from_micros(25)));
        assert!(p.budget >= Duration::from_micros(50), "{:?}", p.budget);
        assert!(p.budget <= max);
        wait(&mut p, Some(Duration::from_micros(90)));
        assert_eq!(p.budget, max, "never past the most");
    }

    #[test]
    fn the_clock_is_read_every_few_looks_and_decides_at_once_past_the_budget() {
        let mut p = Patience::new(Duration::from_micros(100));
        assert!(p.again());
        p.since = Some(Instant::now() - Duration::from_millis(1));
        let looks = (0..LOOKS_PER_CLOCK).take_while(|_| p.again()).count();
        assert_eq!(looks as u32, LOOKS_PER_CLOCK - 1, "within a round of looks");
        assert!(p.slept);
    }
}
