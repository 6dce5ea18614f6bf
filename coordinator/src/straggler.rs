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
}

impl Detector {
    pub fn new(policy: &StragglerPolicy, world_size: usize) -> Self {
        Detector {
            factor: policy.factor,
            steps: policy.steps.max(1),
            ranks: vec![Rank::default(); world_size],
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

    /// The median step time of the ranks other than `rank` that have one.
    fn median_of_others(&self, rank: usize) -> Option<Duration> {
        let mut others: Vec<Duration> = (self.ranks.iter().enumerate())
            .filter(|&(i, _)| i != rank)
            .filter_map(|(_, r)| r.step)
            .collect();
        if others.is_empty() {
            return None;
        }
        others.sort();
        let mid = others.len() / 2;
        Some(if others.len() % 2 == 1 {
            others[mid]
        } else {
            (others[mid - 1] + others[mid]) / 2
        })
    }
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
}
