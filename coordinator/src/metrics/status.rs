//! The job as the status page and `/status.json` show it: now (its state,
//! generation, each rank with its host, step rate, step time and whether
//! it straggles) and its history (each generation: when it began, its
//! size, what reset the one before, how long that recovery took and how
//! many steps it rolled back; goodput over time). Bounded whatever the
//! job's length: the last [`HISTORY`] generations, and at most
//! [`SAMPLES`] goodput samples (when full, every other one is dropped and
//! samples come half as often: the whole job, ever coarser).

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::Progress;
use super::ranks::RankGauges;

/// Generations kept for the page.
pub const HISTORY: usize = 500;
/// Goodput samples kept for the page.
pub const SAMPLES: usize = 720;
/// The first goodput samples' spacing.
const FIRST_EVERY: Duration = Duration::from_secs(1);

/// Bytes `/status.json` takes at most for a job of `ranks` ranks, its
/// history and samples full (each item's longest rendering, rounded up,
/// beside 2 KiB for the rest; a host name's length past 64 bytes may take
/// it past: the buffer then grows).
pub fn document_room(ranks: usize) -> usize {
    const RANK: usize = 320;
    const GENERATION: usize = 200;
    const SAMPLE: usize = 72;
    (2 << 10) + ranks.saturating_mul(RANK) + HISTORY * GENERATION + SAMPLES * SAMPLE
}

/// A rank of the current generation.
#[derive(Clone, Debug, Serialize)]
pub struct RankView {
    pub rank: usize,
    pub host: String,
    pub slot: u32,
    /// Steps its training state holds.
    pub steps: u64,
    pub steps_per_second: Option<f64>,
    /// Its time a step outside collectives.
    pub step_seconds: Option<f64>,
    pub collective_bytes_per_second: Option<f64>,
    pub collective_wait_ratio: Option<f64>,
    pub straggler: bool,
    /// Its last heartbeat: when, and its progress then.
    #[serde(skip)]
    pub last: Option<(Instant, Progress)>,
    /// Its series in the per-rank families, once it has reported.
    #[serde(skip)]
    pub gauges: Option<RankGauges>,
}

/// A generation of the job's history.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GenerationView {
    pub generation: u64,
    /// Since the job started.
    pub at_seconds: f64,
    pub world_size: usize,
    /// What reset the generation before (none for the first).
    pub cause: Option<&'static str>,
    /// From that reset to this generation training.
    pub recovery_seconds: Option<f64>,
    pub rolled_back_steps: Option<u64>,
}

/// The job's goodput at a moment.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Sample {
    pub at_seconds: f64,
    pub goodput_ratio: f64,
}

/// `elasticrun serve`'s leadership.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct EtcdView {
    pub leader: bool,
    pub epoch: i64,
    pub failovers: u64,
}

/// What the page shows, kept as the job goes.
#[derive(Debug)]
pub struct View {
    pub started: Instant,
    pub ranks: Vec<RankView>,
    pub history: VecDeque<GenerationView>,
    pub samples: Vec<Sample>,
    every: Duration,
    /// What reset the current generation, for the next one's entry.
    pub next_cause: Option<&'static str>,
    pub etcd: Option<EtcdView>,
}

/// An empty vector with room for `bound` items, every byte of that room
/// written once: its pages are resident from the start (about 50 KiB for
/// the history and the samples), so the job's memory does not creep as it
/// fills, one generation or sample at a time, and it never moves.
fn resident<T: Clone>(bound: usize, filler: T) -> Vec<T> {
    let mut v = vec![filler; bound];
    v.clear();
    v
}

impl View {
    pub fn new(started: Instant) -> Self {
        View {
            started,
            ranks: Vec::new(),
            history: resident(HISTORY, GenerationView::default()).into(),
            samples: resident(SAMPLES, Sample::default()),
            every: FIRST_EVERY,
            next_cause: None,
            etcd: None,
        }
    }

    fn since_start(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.started).as_secs_f64()
    }

    /// A new generation of `ranks` (host and slot each) from `at`.
    pub fn generation(&mut self, generation: u64, ranks: &[(String, u32)], at: Instant) {
        self.ranks = (ranks.iter().enumerate())
            .map(|(rank, (host, slot))| RankView {
                rank,
                host: host.clone(),
                slot: *slot,
                steps: 0,
                steps_per_second: None,
                step_seconds: None,
                collective_bytes_per_second: None,
                collective_wait_ratio: None,
                straggler: false,
                last: None,
                gauges: None,
            })
            .collect();
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(GenerationView {
            generation,
            at_seconds: self.since_start(at),
            world_size: ranks.len(),
            cause: self.next_cause.take(),
            recovery_seconds: None,
            rolled_back_steps: None,
        });
    }

    /// The current generation's recovery ended.
    pub fn recovered(&mut self, took: Duration, rolled_back: u64) {
        if let Some(g) = self.history.back_mut()
            && g.cause.is_some()
        {
            g.recovery_seconds = Some(took.as_secs_f64());
            g.rolled_back_steps = Some(rolled_back);
        }
    }

    /// The job's goodput `ratio` at `at`, kept if a sample is due.
    pub fn sample(&mut self, at: Instant, ratio: f64) {
        let at_seconds = self.since_start(at);
        if let Some(last) = self.samples.last()
            && at_seconds - last.at_seconds < self.every.as_secs_f64()
        {
            return;
        }
        self.samples.push(Sample {
            at_seconds,
            goodput_ratio: ratio,
        });
        if self.samples.len() >= SAMPLES {
            let mut i = 0;
            self.samples.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.every *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_and_samples_stay_bounded_however_long_the_job() {
        let t0 = Instant::now();
        let mut v = View::new(t0);
        // Both start at their bound, and never move as they fill.
        let room = |v: &View| (v.history.capacity(), v.samples.capacity());
        assert_eq!(room(&v), (HISTORY, SAMPLES));
        assert!(v.history.is_empty() && v.samples.is_empty());
        let (start_room, start_samples) = (room(&v), v.samples.as_ptr());
        let ranks = [("a".to_owned(), 0), ("b".to_owned(), 1)];
        for g in 1..=(HISTORY as u64 + 50) {
            v.next_cause = (g > 1).then_some("failure");
            v.generation(g, &ranks, t0 + Duration::from_secs(g));
            v.recovered(Duration::from_millis(40), 2);
        }
        assert_eq!(v.history.len(), HISTORY);
        let first = &v.history[0];
        assert_eq!(first.generation, 51);
        assert_eq!(first.cause, Some("failure"));
        assert_eq!(first.recovery_seconds, Some(0.04));
        assert_eq!(v.ranks.len(), 2);
        assert_eq!(v.ranks[1].host, "b");
        // A day of samples, one asked for every 100 ms.
        for tenth in 0..(24 * 3600 * 10) {
            v.sample(t0 + Duration::from_millis(tenth * 100), 0.5);
        }
        assert!(v.samples.len() < SAMPLES, "{}", v.samples.len());
        assert!(v.samples.len() > SAMPLES / 4, "{}", v.samples.len());
        let last = v.samples.last().unwrap().at_seconds;
        assert!(last > 23.0 * 3600.0, "the samples reach the end: {last}");
        assert!(
            v.samples
                .windows(2)
                .all(|w| w[0].at_seconds < w[1].at_seconds),
            "in order"
        );
        assert_eq!(room(&v), start_room, "never grown");
        assert_eq!(v.samples.as_ptr(), start_samples, "never moved");
    }

    #[test]
    fn the_first_generation_has_no_cause_and_no_recovery() {
        let t0 = Instant::now();
        let mut v = View::new(t0);
        v.generation(1, &[("a".to_owned(), 0)], t0 + Duration::from_secs(2));
        v.recovered(Duration::from_secs(1), 0);
        let g = &v.history[0];
        assert_eq!((g.cause, g.recovery_seconds), (None, None));
        assert_eq!(g.at_seconds, 2.0);
    }
}
