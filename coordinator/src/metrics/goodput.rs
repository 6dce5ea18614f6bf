//! Goodput: the job's wall time split into training and time lost, by
//! cause: start-up (from elasticrun's start to the first generation
//! training), waiting (start-up or recovery while fewer than `--min-np`
//! slots are there to be had), recovery (from each reset to the new
//! generation training), rolled-back steps (training whose steps a failure
//! undid: the steps reached but not committed, at the generation's mean
//! step time, moved from training) and stalls (training time in which
//! ranks waited on a rank that never submitted, moved from training when
//! the stall ends the rank). Pure: the driver says when the job changes
//! part and what each recovery rolled back; the clock is passed in.

use std::time::Duration;

use tokio::time::Instant;

/// A part of the job's wall time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Startup,
    Training,
    Recovery,
    RolledBack,
    Waiting,
    Stall,
}

pub const PARTS: [Part; 6] = [
    Part::Startup,
    Part::Training,
    Part::Recovery,
    Part::RolledBack,
    Part::Waiting,
    Part::Stall,
];

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Startup => "startup",
            Part::Training => "training",
            Part::Recovery => "recovery",
            Part::RolledBack => "rolled_back",
            Part::Waiting => "waiting",
            Part::Stall => "stall",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The time of each part so far.
#[derive(Debug)]
pub struct Goodput {
    current: Part,
    /// The part a wait for slots interrupted (start-up or recovery).
    resume: Part,
    since: Instant,
    /// The job has ended: no more time counts.
    ended: bool,
    totals: [Duration; PARTS.len()],
    /// The current generation's training: when it began, the step it went
    /// on from, and how long it trained before a reset ended it.
    generation: Generation,
}

#[derive(Debug, Default)]
struct Generation {
    from_step: u64,
    trained: Duration,
}

impl Goodput {
    pub fn new(now: Instant) -> Self {
        Goodput {
            current: Part::Startup,
            resume: Part::Startup,
            since: now,
            ended: false,
            totals: [Duration::ZERO; PARTS.len()],
            generation: Generation::default(),
        }
    }

    /// Counts the time since the last look to the current part.
    pub fn flush(&mut self, now: Instant) {
        if self.ended {
            return;
        }
        let spent = now.saturating_duration_since(self.since);
        self.totals[self.current.index()] += spent;
        if self.current == Part::Training {
            self.generation.trained += spent;
        }
        self.since = now;
    }

    /// The job trains from now (a first generation, or a recovery's end
    /// going on from `from_step`).
    pub fn training(&mut self, now: Instant, from_step: u64) {
        self.flush(now);
        if self.current != Part::Training {
            self.generation = Generation {
                from_step,
                trained: Duration::ZERO,
            };
        }
        self.current = Part::Training;
    }

    /// The job ended: its time stops here.
    pub fn end(&mut self, now: Instant) {
        self.flush(now);
        self.ended = true;
    }

    /// A reset: the job recovers from now.
    pub fn recovering(&mut self, now: Instant) {
        self.flush(now);
        self.current = Part::Recovery;
    }

    /// Whether the job, starting or recovering, waits for slots (fewer
    /// than `--min-np` to be had): its time counts as waiting meanwhile.
    pub fn waiting(&mut self, now: Instant, short: bool) {
        let next = match (self.current, short) {
            (Part::Startup | Part::Recovery, true) => Part::Waiting,
            (Part::Waiting, false) => self.resume,
            _ => return,
        };
        self.flush(now);
        if next == Part::Waiting {
            self.resume = self.current;
        }
        self.current = next;
    }

    /// A stall ended a rank: the `lasted` the others waited on it was not
    /// training (as much as the current generation trained).
    pub fn stalled(&mut self, now: Instant, lasted: Duration) {
        self.flush(now);
        let lost = lasted
            .min(self.generation.trained)
            .min(self.totals[Part::Training.index()]);
        self.generation.trained -= lost;
        self.totals[Part::Training.index()] -= lost;
        self.totals[Part::Stall.index()] += lost;
    }

    /// The recovery that ended went on from step `step`, `rolled_back`
    /// steps below the furthest one reached: that much of the last
    /// generation's training, at its mean step time, was lost.
    pub fn rolled_back(&mut self, step: u64, rolled_back: u64) {
        let reached = step + rolled_back;
        let steps = reached.saturating_sub(self.generation.from_step);
        if steps == 0 || rolled_back == 0 {
            return;
        }
        let per_step = self.generation.trained / u32::try_from(steps).unwrap_or(u32::MAX);
        let lost = (per_step * u32::try_from(rolled_back).unwrap_or(u32::MAX))
            .min(self.totals[Part::Training.index()]);
        self.totals[Part::Training.index()] -= lost;
        self.totals[Part::RolledBack.index()] += lost;
    }

    /// The time of `part` (as of the last flush).
    pub fn total(&self, part: Part) -> Duration {
        self.totals[part.index()]
    }

    /// The wall time so far (as of the last flush).
    pub fn wall(&self) -> Duration {
        self.totals.iter().sum()
    }

    /// `goodput 91.3%: 41.20 s training of 45.10 s (start-up 1.90 s,
    /// waiting 0.00 s, recovery 0.40 s, rolled back 1.60 s, stalls 0.00 s)`.
    pub fn summary(&self) -> String {
        let wall = self.wall();
        let share = if wall.is_zero() {
            0.0
        } else {
            100.0 * self.total(Part::Training).as_secs_f64() / wall.as_secs_f64()
        };
        let s = |p| self.total(p).as_secs_f64();
        format!(
            "goodput {share:.1}%: {:.2} s training of {:.2} s (start-up {:.2} s, waiting \
             {:.2} s, recovery {:.2} s, rolled back {:.2} s, stalls {:.2} s)",
            s(Part::Training),
            wall.as_secs_f64(),
            s(Part::Startup),
            s(Part::Waiting),
            s(Part::Recovery),
            s(Part::RolledBack),
            s(Part::Stall),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wall_time_splits_by_part_and_rolled_back_steps_move_out_of_training() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut g = Goodput::new(t0);
        g.training(at(2_000), 0);
        // 100 steps in 10 s: 100 ms a step; the failure at step 100.
        g.recovering(at(12_000));
        g.rolled_back(96, 4);
        g.training(at(12_500), 96);
        g.flush(at(20_000));
        assert_eq!(g.total(Part::Startup), Duration::from_secs(2));
        assert_eq!(g.total(Part::Recovery), Duration::from_millis(500));
        assert_eq!(g.total(Part::RolledBack), Duration::from_millis(400));
        assert_eq!(g.total(Part::Training), Duration::from_millis(17_100));
        assert_eq!(g.wall(), Duration::from_secs(20));
        let line = g.summary();
        assert!(
            line.starts_with("goodput 85.5%: 17.10 s training of 20.00 s"),
            "{line}"
        );
        g.end(at(20_000));
        g.flush(at(30_000));
        assert_eq!(
            g.wall(),
            Duration::from_secs(20),
            "nothing counts after the end"
        );
        // Nothing rolled back, or no steps known: nothing moves.
        g.rolled_back(200, 0);
        g.rolled_back(5, 1);
        assert_eq!(g.total(Part::RolledBack), Duration::from_millis(400));
    }

    #[test]
    fn waiting_for_slots_interrupts_start_up_and_recovery_and_stalls_leave_training() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut g = Goodput::new(t0);
        g.waiting(at(1_000), true);
        g.waiting(at(1_500), true);
        g.waiting(at(3_000), false);
        g.training(at(4_000), 0);
        // Training does not wait, whatever the shortfall says.
        g.waiting(at(5_000), true);
        g.stalled(at(10_000), Duration::from_secs(2));
        g.recovering(at(10_000));
        g.waiting(at(10_500), true);
        g.waiting(at(11_000), false);
        g.training(at(11_200), 0);
        g.stalled(at(11_400), Duration::from_secs(60));
        g.end(at(12_000));
        let ms = |p| g.total(p).as_millis();
        assert_eq!(ms(Part::Startup), 2_000);
        assert_eq!(ms(Part::Waiting), 2_500);
        assert_eq!(ms(Part::Recovery), 700);
        // 6 s of training, 2 s of it a stall; then 0.2 s, all of it a
        // stall however long the stall says it lasted.
        assert_eq!(ms(Part::Stall), 2_200);
        assert_eq!(ms(Part::Training), 4_600);
        assert_eq!(g.wall(), Duration::from_secs(12));
        let line = g.summary();
        assert!(
            line.contains("waiting 2.50 s") && line.contains("stalls 2.20 s"),
            "{line}"
        );
    }
}
