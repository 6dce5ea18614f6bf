//! Saying a repeated complaint without flooding the log. A peer that opens
//! connections in a loop with the wrong secret or garbage gets each one
//! refused; saying so every time let one local process write megabytes of
//! warnings a minute. A [`Throttle`] lets the first few of a window through
//! and counts the rest, which the next line said reports. Pure: the caller
//! passes the time.
//!
//! ```text
//!  window 1: said, said, said (burst), held, held, ...
//!  window 2: said ("and 2 more in the last 10s"), said, ...
//! ```

use std::time::{Duration, Instant};

/// A complaint's allowance per window.
#[derive(Clone, Debug)]
pub struct Throttle {
    window: Duration,
    burst: u32,
    /// The current window's start (`None` before the first complaint).
    since: Option<Instant>,
    /// Said in the current window.
    said: u32,
    /// Held back since the last line said.
    held: u64,
}

/// Whether to say one complaint now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Say {
    /// Say it, with how many like it were held back since the last said.
    Now { held: u64 },
    /// Count it, say nothing.
    Hold,
}

impl Throttle {
    /// At most `burst` complaints said per `window` (at least one).
    pub const fn new(window: Duration, burst: u32) -> Self {
        Self {
            window,
            burst: if burst == 0 { 1 } else { burst },
            since: None,
            said: 0,
            held: 0,
        }
    }

    /// The window this throttle counts in.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// One more complaint at `now`.
    pub fn note(&mut self, now: Instant) -> Say {
        let fresh = self
            .since
            .is_none_or(|s| now.saturating_duration_since(s) >= self.window);
        if fresh {
            self.since = Some(now);
            self.said = 0;
        }
        if self.said < self.burst {
            self.said += 1;
            let held = std::mem::take(&mut self.held);
            Say::Now { held }
        } else {
            self.held = self.held.saturating_add(1);
            Say::Hold
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_said_then_the_rest_counted_into_the_next_window() {
        let mut t = Throttle::new(Duration::from_secs(10), 3);
        let t0 = Instant::now();
        let first: Vec<Say> = (0..1000).map(|_| t.note(t0)).collect();
        assert_eq!(first[..3], [Say::Now { held: 0 }; 3]);
        assert!(first[3..].iter().all(|s| *s == Say::Hold));
        // Still the same window.
        assert_eq!(t.note(t0 + Duration::from_secs(9)), Say::Hold);
        // The next window's first line reports what was held back.
        let next = t0 + Duration::from_secs(10);
        assert_eq!(t.note(next), Say::Now { held: 998 });
        assert_eq!(t.note(next), Say::Now { held: 0 });
    }

    #[test]
    fn sparse_complaints_are_all_said() {
        let mut t = Throttle::new(Duration::from_secs(1), 1);
        let t0 = Instant::now();
        for i in 0..5 {
            assert_eq!(
                t.note(t0 + Duration::from_secs(2 * i)),
                Say::Now { held: 0 }
            );
        }
    }

    #[test]
    fn a_zero_burst_still_says_one_per_window() {
        let mut t = Throttle::new(Duration::from_secs(1), 0);
        let t0 = Instant::now();
        assert_eq!(t.note(t0), Say::Now { held: 0 });
        assert_eq!(t.note(t0), Say::Hold);
    }
}
