//! How long an elastic job took to recover from a reset, and how many steps
//! it rolled back: one line per generation that replaced another.
//!
//! ```text
//!  Reset / HostsUpdated sent ── since
//!  Assign g (ranks)
//!  Running { g, step, reached } from every rank of g ──► "generation g running N workers
//!                                                         T after the failure; K steps rolled back (step R -> S)"
//! ```
//!
//! The time runs from when elasticrun sent `Reset` (it had just learnt of
//! the failure) or `HostsUpdated`, to when the last rank of the new
//! generation said it runs: it entered the generation and synced its state
//! from rank 0, so it trains on. A new failure before that keeps the first
//! one's start. The step is the worker runtime's count of optimizer steps
//! that the training state holds: `step` is where the new generation goes on
//! from (rank 0's), `reached` the furthest step a rank had reached in the
//! generation it left.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Duration;

use control::Generation;
use elastic::membership::SlotId;
use tokio::time::Instant;

use super::say::{count, span};

/// The recovery under way, if any.
#[derive(Debug, Default)]
pub(super) struct Recovery {
    open: Option<Open>,
}

#[derive(Debug)]
struct Open {
    since: Instant,
    /// Whether it began with a failure (`Reset`), or with hosts changing.
    failure: bool,
    /// The generation assigned since, its rank 0 and its ranks (a set: each
    /// rank's `Running` is looked up in it, thousands of them at scale).
    generation: Option<Generation>,
    rank0: Option<SlotId>,
    ranks: HashSet<SlotId>,
    /// What each rank of it said: (step, reached).
    running: BTreeMap<SlotId, (u64, Option<u64>)>,
}

/// A finished recovery, said as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Recovered {
    pub(super) generation: Generation,
    pub(super) workers: usize,
    pub(super) took: Duration,
    pub(super) failure: bool,
    /// The step the new generation goes on from.
    pub(super) step: u64,
    /// The furthest step reached before, when a survivor said.
    pub(super) reached: Option<u64>,
}

impl Recovery {
    /// Whether a recovery is under way.
    pub(super) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// A `Reset` (`failure`) or `HostsUpdated` was sent at `at`.
    pub(super) fn begin(&mut self, at: Instant, failure: bool) {
        match &mut self.open {
            Some(open) => {
                open.generation = None;
                open.rank0 = None;
                open.ranks.clear();
                open.running.clear();
            }
            None => {
                self.open = Some(Open {
                    since: at,
                    failure,
                    generation: None,
                    rank0: None,
                    ranks: HashSet::new(),
                    running: BTreeMap::new(),
                });
            }
        }
    }

    /// Generation `generation` was assigned to `ranks`.
    pub(super) fn assigned(&mut self, generation: Generation, ranks: &[SlotId]) {
        if let Some(open) = &mut self.open {
            open.generation = Some(generation);
            open.rank0 = ranks.first().cloned();
            open.ranks = ranks.iter().cloned().collect();
            open.running.clear();
        }
    }

    /// The worker on `slot` runs in `generation` from `step`, having
    /// reached `reached` before; the recovery when it was the last rank.
    pub(super) fn running(
        &mut self,
        at: Instant,
        slot: &SlotId,
        generation: Generation,
        step: u64,
        reached: Option<u64>,
    ) -> Option<Recovered> {
        let open = self.open.as_mut()?;
        if open.generation != Some(generation) || !open.ranks.contains(slot) {
            return None;
        }
        open.running.insert(slot.clone(), (step, reached));
        if open.running.len() < open.ranks.len() {
            return None;
        }
        let open = self.open.take()?;
        let rank0 = open.rank0.as_ref().and_then(|s| open.running.get(s));
        Some(Recovered {
            generation,
            workers: open.ranks.len(),
            took: at.saturating_duration_since(open.since),
            failure: open.failure,
            step: rank0.map_or(step, |(s, _)| *s),
            reached: open.running.values().filter_map(|(_, r)| *r).max(),
        })
    }
}

impl fmt::Display for Recovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let after = if self.failure {
            "the failure"
        } else {
            "the host change"
        };
        write!(
            f,
            "generation {} running {} {} after {after}; ",
            self.generation,
            count(self.workers, "worker"),
            span(self.took)
        )?;
        match self.reached {
            Some(0) if self.step == 0 => f.write_str("back to the last commit (no steps counted)"),
            Some(r) if r > self.step => write!(
                f,
                "{} rolled back (step {r} -> {})",
                count(usize::try_from(r - self.step).unwrap_or(usize::MAX), "step"),
                self.step
            ),
            Some(_) => write!(f, "nothing rolled back (step {})", self.step),
            None => write!(f, "from step {}", self.step),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: u32) -> SlotId {
        SlotId::new("h", n)
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_rank_running_ends_the_recovery() {
        let mut r = Recovery::default();
        let t0 = Instant::now();
        // Generation 1 is no recovery.
        r.assigned(Generation(1), &[slot(0), slot(1)]);
        assert_eq!(r.running(t0, &slot(0), Generation(1), 0, None), None);
        r.begin(t0, true);
        // A second failure before the job runs again keeps the first start.
        r.begin(t0 + Duration::from_millis(100), true);
        let ranks = [slot(0), slot(2), slot(1)];
        r.assigned(Generation(3), &ranks);
        let at = t0 + Duration::from_millis(412);
        assert_eq!(r.running(at, &slot(2), Generation(2), 33, Some(40)), None);
        assert_eq!(r.running(at, &slot(0), Generation(3), 33, Some(40)), None);
        assert_eq!(r.running(at, &slot(2), Generation(3), 33, Some(39)), None);
        let done = r.running(at, &slot(1), Generation(3), 33, None).unwrap();
        assert_eq!(
            done.to_string(),
            "generation 3 running 3 workers 412 ms after the failure; 7 steps rolled back (step 40 -> 33)"
        );
        assert_eq!(r.running(at, &slot(1), Generation(3), 33, None), None);
    }

    #[test]
    fn host_changes_and_counts_are_worded_as_they_are() {
        let mut done = Recovered {
            generation: Generation(2),
            workers: 1,
            took: Duration::from_millis(12_345),
            failure: false,
            step: 15,
            reached: Some(15),
        };
        assert_eq!(
            done.to_string(),
            "generation 2 running 1 worker 12.3 s after the host change; nothing rolled back (step 15)"
        );
        done.failure = true;
        done.reached = Some(16);
        assert!(
            done.to_string()
                .ends_with("; 1 step rolled back (step 16 -> 15)")
        );
        done.reached = None;
        assert!(done.to_string().ends_with("; from step 15"));
    }
}
