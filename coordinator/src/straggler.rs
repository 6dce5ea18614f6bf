//! Stragglers: ranks that hold the others back. In synchronous training
//! every rank steps at the same pace (the slowest one's), so a rank's pace
//! says nothing; what differs is where the time goes. A slow rank spends
//! its step computing and submits last; the others wait for it in the
//! collectives. A rank's *step time* here is the time of a step it did
//! not spend waiting in collectives (from its heartbeats: the time between
//! two of them less its collective wait, over the steps between them). A
//! rank whose step time stays above `factor` times the median of the other
//! ranks' for `steps` steps in a row is a straggler; it stops being one at
//! its first window back under. Pure: the driver feeds heartbeats' windows
//! and acts on what comes out.

use std::time::Duration;

/// `--straggler-factor`'s default.
pub const DEFAULT_FACTOR: f64 = 2.0;
/// `--straggler-steps`' default.
pub const DEFAULT_STEPS: u64 = 50;

/// When a rank is a straggler, and what the job does about it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StragglerPolicy {
    /// Above this multiple of the others' median step time...
    pub factor: f64,
    /// ...for this many steps in a row.
    pub steps: u64,
    pub action: StragglerAction,
}

impl Default for StragglerPolicy {
    fn default() -> Self {
        StragglerPolicy {
            factor: DEFAULT_FACTOR,
            steps: DEFAULT_STEPS,
            action: StragglerAction::Warn,
        }
    }
}

/// `--straggler-action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StragglerAction {
    /// Named in the log, on `/metrics` and on the page.
    #[default]
    Warn,
    /// Named, and taken out of an elastic job (its host blacklisted for the
    /// cooldown) as after a failure.
    Replace,
}

/// A rank's heartbeat window: steps it took and the time it spent outside
/// collectives between two heartbeats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub steps: u64,
    pub busy: Duration,
}

/// What a window changed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// The rank became a straggler: its step time and the others' median.
    Named {
        rank: usize,
        step: Duration,
        median: Duration,
    },
    /// It is one no longer.
    Cleared { rank: usize },
}

#[derive(Clone, Copy, Debug, Default)]
struct Rank {
    /// Its step time in its last window with steps.
    step: Option<Duration>,
    /// Steps in a row above the bar.
    above: u64,
    named: bool,
}

/// The ranks of one generation.
#[derive(Debug)]
pub struct Detector {
    factor: f64,
    steps: u64,
    ranks: Vec<Rank>,
    /// Past [`EXACT_UP_TO`] ranks: the median of every rank's step time,
    /// and the observations since it was taken.
    median: Option<Duration>,
    since_median: usize,
}

/// Up to this many ranks each observation compares with the exact median
/// of the others. Beyond, a rank's own step time moves the median by at
/// most one place among thousands, and sorting every rank at every
/// heartbeat (n a second) would cost n^2 log n a second: the median of all
/// ranks is taken again once a quarter of the ranks have been observed.
const EXACT_UP_TO: usize = 64;

impl Detector {
    pub fn new(policy: &StragglerPolicy, world_size: usize) -> Self {
        Detector {
            factor: policy.factor,
            steps: policy.steps.max(1),
            ranks: vec![Rank::default(); world_size],
            median: None,
            since_median: 0,
        }
    }

    /// Rank `rank`'s step time per its last window.
    pub fn step_time(&self, rank: usize) -> Option<Duration> {
        self.ranks.get(rank)?.step
    }

    pub fn is_straggler(&self, rank: usize) -> bool {
        self.ranks.get(rank).is_some_and(|r| r.named)
    }

    /// Rank `rank`'s new window; a window without steps (a pause, a
    /// rollback) changes nothing.
    pub fn observe(&mut self, rank: usize, w: Window) -> Option<Verdict> {
        if w.steps == 0 || rank >= self.ranks.len() {
            return None;
        }
        let step = w.busy / u32::try_from(w.steps).unwrap_or(u32::MAX);
        self.ranks[rank].step = Some(step);
        let median = self.median_of_others(rank)?;
        let r = &mut self.ranks[rank];
        if step.as_secs_f64() <= median.as_secs_f64() * self.factor {
            r.above = 0;
            return std::mem::take(&mut r.named).then_some(Verdict::Cleared { rank });
        }
        r.above = r.above.saturating_add(w.steps);
        if r.above < self.steps || r.named {
            return None;
        }
        r.named = true;
        Some(Verdict::Named { rank, step, median })
    }

    /// The median step time of the ranks other than `rank` that have one
    /// (of every rank that has one, refreshed now and then, past
    /// [`EXACT_UP_TO`] ranks).
    fn median_of_others(&mut self, rank: usize) -> Option<Duration> {
        if self.ranks.len() <= EXACT_UP_TO {
            return median(
                (self.ranks.iter().enumerate())
                    .filter(|&(i, _)| i != rank)
                    .filter_map(|(_, r)| r.step)
                    .collect(),
            );
        }
        self.since_median += 1;
        if self.median.is_none() || self.since_median >= self.ranks.len() / 4 {
            self.median = median(self.ranks.iter().filter_map(|r| r.step).collect());
            self.since_median = 0;
        }
        self.median
    }
}

/// The median of `times`; linear.
fn median(mut times: Vec<Duration>) -> Option<Duration> {
    let n = times.len();
    if n == 0 {
        return None;
    }
    let mid = n / 2;
    let (below, &mut upper, _) = times.select_nth_unstable(mid);
    if n % 2 == 1 {
        return Some(upper);
    }
    // The lower middle: the largest of those below.
    let lower = below.iter().copied().max()?;
    Some((lower + upper) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(steps: u64, busy_ms: u64) -> Window {
        Window {
            steps,
            busy: Duration::from_millis(busy_ms),
        }
    }

    #[test]
    fn a_rank_slow_for_enough_steps_in_a_row_is_named_once_and_cleared_when_back() {
        let policy = StragglerPolicy {
            steps: 30,
            ..StragglerPolicy::default()
        };
        let mut d = Detector::new(&policy, 4);
        // Nobody to compare with yet.
        assert_eq!(d.observe(3, w(10, 500)), None);
        for r in 0..3 {
            assert_eq!(d.observe(r, w(10, 100)), None);
        }
        // 50 ms a step against 10 ms: above, but 10 + 10 < 30 steps yet.
        assert_eq!(d.observe(3, w(10, 500)), None);
        assert_eq!(d.observe(3, w(10, 500)), None);
        let named = d.observe(3, w(10, 500));
        assert_eq!(
            named,
            Some(Verdict::Named {
                rank: 3,
                step: Duration::from_millis(50),
                median: Duration::from_millis(10)
            })
        );
        assert!(d.is_straggler(3));
        assert_eq!(d.observe(3, w(10, 500)), None, "named once");
        // A window without steps says nothing.
        assert_eq!(d.observe(3, w(0, 900)), None);
        assert_eq!(d.observe(3, w(10, 150)), Some(Verdict::Cleared { rank: 3 }));
        assert!(!d.is_straggler(3));
        // One window back under starts the count again.
        assert_eq!(d.observe(3, w(20, 1_000)), None);
        assert_eq!(d.observe(3, w(5, 50)), None);
        assert_eq!(d.observe(3, w(20, 1_000)), None);
        assert_eq!(d.step_time(3), Some(Duration::from_millis(50)));
    }

    #[test]
    fn at_two_ranks_the_slow_one_is_named_not_the_fast_one() {
        let policy = StragglerPolicy {
            steps: 10,
            ..StragglerPolicy::default()
        };
        let mut d = Detector::new(&policy, 2);
        let mut named = Vec::new();
        for _ in 0..5 {
            named.extend(d.observe(0, w(10, 100)));
            named.extend(d.observe(1, w(10, 300)));
        }
        assert_eq!(
            named,
            [Verdict::Named {
                rank: 1,
                step: Duration::from_millis(30),
                median: Duration::from_millis(10)
            }]
        );
        // Just under the factor: not named.
        let mut d = Detector::new(&policy, 3);
        for _ in 0..10 {
            for (r, busy) in [(0, 100), (1, 120), (2, 219)] {
                assert_eq!(d.observe(r, w(10, busy)), None);
            }
        }
        assert_eq!(d.observe(9, w(10, 100)), None, "no such rank");
    }

    #[test]
    fn among_thousands_the_slow_rank_is_named_against_everyone_s_median() {
        let policy = StragglerPolicy {
            steps: 20,
            ..StragglerPolicy::default()
        };
        let n = 1000;
        let mut d = Detector::new(&policy, n);
        let mut named = Vec::new();
        for _ in 0..3 {
            for r in 0..n {
                // Rank 7 takes 40 ms a step; the rest 9 to 11 ms.
                let busy = if r == 7 {
                    400
                } else {
                    90 + (r as u64 % 3) * 10
                };
                named.extend(d.observe(r, w(10, busy)));
            }
        }
        assert_eq!(
            named,
            [Verdict::Named {
                rank: 7,
                step: Duration::from_millis(40),
                median: Duration::from_millis(10)
            }]
        );
    }

    #[test]
    fn the_linear_median_is_the_sorted_one() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        assert_eq!(median(Vec::new()), None);
        assert_eq!(median(ms(&[7])), Some(Duration::from_millis(7)));
        assert_eq!(median(ms(&[9, 1, 5])), Some(Duration::from_millis(5)));
        assert_eq!(median(ms(&[9, 1, 5, 3])), Some(Duration::from_millis(4)));
        assert_eq!(
            median(ms(&[4, 4, 8, 8, 1, 100])),
            Some(Duration::from_millis(6))
        );
    }
}
