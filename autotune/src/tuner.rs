//! The tuner rank 0 runs: measurements in, knob decisions out.
//!
//! ```text
//!  WarmUp ×warmup_samples ─▶ design (4 points) ─▶ EI proposals ─▶ categorical polish ─▶ Done
//!  at the start point,        sample 1 is the      (GP fitted on    (best point with one   best point,
//!  scores discarded           start point          every score)      switch flipped)       for good
//!                            └──────────────── max_samples scored samples ─────────────┘
//! ```
//!
//! Call order: read [`Tuner::current`], run with it, report each step (or cycle) with
//! [`Tuner::record`]. When a call completes a sample (see [`crate::SampleRecord`]) it
//! returns a [`Decision`]; the caller applies [`Decision::knobs`] on every rank at the
//! same cycle and from then on reports only measurements taken under them.
//!
//! Categorical polish: the last samples of the budget (one per categorical
//! coordinate, at most half of what the design leaves) each measure the current best
//! point with one categorical switch flipped, the first not yet measured. Expected
//! improvement under a zero prior mean rarely pays for trying an unmeasured level
//! next to the incumbent; this local move does (Horovod tunes its categorical knobs
//! one at a time for the same reason).
//!
//! The final point is the observed point with the highest posterior mean, so one
//! lucky noisy sample does not win; if no model can be fitted, the highest score.
//! If a proposal cannot be computed, the next point is drawn uniformly at random.
//! When the space has nothing to tune, the tuner starts final at the initial knobs.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::acquisition::{self, DEFAULT_XI};
use crate::design::{INITIAL_DESIGN, latin_hypercube};
use crate::sample::Sampler;
use crate::{AutotuneError, Decision, Gp, HyperGrid, SampleRecord, Space, TunerConfig, Tuning};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    WarmUp { remaining: usize },
    Search,
    Done { best: Tuning },
}

/// Rank 0's autotuner for one world size.
#[derive(Clone, Debug)]
pub struct Tuner {
    space: Space,
    config: TunerConfig,
    phase: Phase,
    current: Tuning,
    design: Vec<Tuning>,
    observed: Vec<(Tuning, f64)>,
    records: Vec<SampleRecord>,
    sampler: Sampler,
    rng: Xoshiro256PlusPlus,
}

impl Tuner {
    pub fn new(space: Space, config: TunerConfig) -> Result<Tuner, AutotuneError> {
        Tuner::resume(space, config, &[])
    }

    /// A tuner that already knows `history` (records of an earlier run at the same
    /// world size): its scored samples whose untuned knobs match `space` re-enter the
    /// model and count against the budget, and tuning restarts from their best point
    /// with a fresh warm-up. If the budget is already spent the tuner starts final.
    pub fn resume(
        space: Space,
        config: TunerConfig,
        history: &[SampleRecord],
    ) -> Result<Tuner, AutotuneError> {
        config.validate()?;
        let observed = history
            .iter()
            .filter(|r| !r.warmup && r.score.is_finite() && space.holds_fixed(&r.knobs))
            .map(|r| (r.knobs, r.score))
            .collect();
        let mut t = Tuner {
            current: space.initial(),
            space,
            config,
            phase: Phase::Search,
            design: Vec::new(),
            observed,
            records: history.to_vec(),
            sampler: Sampler::new(config.steps_per_sample),
            rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
        };
        t.current = t.best().map_or(t.current, |b| b.0);
        let n = INITIAL_DESIGN.min(config.max_samples).saturating_sub(1);
        t.design = latin_hypercube(&t.space, &t.current, n, &mut t.rng)?;
        t.phase = if t.space.dims().is_empty() || t.observed.len() >= config.max_samples {
            Phase::Done { best: t.current }
        } else if config.warmup_samples > 0 {
            Phase::WarmUp {
                remaining: config.warmup_samples,
            }
        } else {
            Phase::Search
        };
        Ok(t)
    }

    /// The knobs to run with now.
    pub fn current(&self) -> Tuning {
        self.current
    }

    /// Reports one step (or cycle): `bytes` processed by collectives in `seconds`.
    /// Returns a decision when this completes a sample; `None` otherwise, and always
    /// once tuning is over.
    pub fn record(&mut self, step: u64, bytes: u64, seconds: f64) -> Option<Decision> {
        if self.is_done() {
            return None;
        }
        let score = self.sampler.record(step, bytes, seconds)?;
        let warmup = matches!(self.phase, Phase::WarmUp { .. });
        let sample = SampleRecord {
            knobs: self.current,
            score,
            step,
            warmup,
        };
        self.records.push(sample);
        if let Phase::WarmUp { remaining } = self.phase {
            self.phase = match remaining {
                1 => Phase::Search,
                _ => Phase::WarmUp {
                    remaining: remaining - 1,
                },
            };
            return Some(Decision::WarmUp { sample });
        }
        self.observed.push((self.current, score));
        if self.observed.len() >= self.config.max_samples {
            let best = self.best().map_or(self.current, |b| b.0);
            self.current = best;
            self.phase = Phase::Done { best };
            return Some(Decision::Final { sample, best });
        }
        self.current = self.propose();
        Some(Decision::Explore {
            sample,
            next: self.current,
        })
    }

    fn propose(&mut self) -> Tuning {
        let n = self.observed.len();
        if let Some(k) = self.design.get(n.wrapping_sub(1)) {
            return *k;
        }
        if n + self.polish_budget() >= self.config.max_samples
            && let Some(k) = self.polish_next()
        {
            return k;
        }
        match self.propose_ei() {
            Ok(k) => k,
            Err(_) => {
                let u: Vec<f64> = self
                    .space
                    .dims()
                    .iter()
                    .map(|_| self.rng.random())
                    .collect();
                self.space.decode(&u).unwrap_or(self.current)
            }
        }
    }

    fn polish_budget(&self) -> usize {
        let after_design = self.config.max_samples.saturating_sub(INITIAL_DESIGN);
        self.space.categorical().len().min(after_design / 2)
    }

    /// The best point with the first categorical coordinate flipped whose flip has
    /// not been measured yet.
    fn polish_next(&self) -> Option<Tuning> {
        let best = self.space.encode(&self.best()?.0);
        let seen: Vec<Vec<f64>> = self.encoded();
        self.space.categorical().into_iter().find_map(|j| {
            let mut x = best.clone();
            x[j] = 1.0 - x[j];
            let k = self.space.decode(&x).ok()?;
            (!seen.contains(&self.space.encode(&k))).then_some(k)
        })
    }

    fn encoded(&self) -> Vec<Vec<f64>> {
        self.observed
            .iter()
            .map(|(k, _)| self.space.encode(k))
            .collect()
    }

    fn fit(&self) -> Result<Gp, AutotuneError> {
        let ys: Vec<f64> = self.observed.iter().map(|o| o.1).collect();
        let cat: Vec<bool> = self
            .space
            .dims()
            .iter()
            .map(|d| d.is_categorical())
            .collect();
        let grid = HyperGrid::default();
        Gp::fit_grid(&self.encoded(), &ys, self.config.gp_noise, &cat, &grid)
    }

    fn propose_ei(&mut self) -> Result<Tuning, AutotuneError> {
        let gp = self.fit()?;
        let xs = self.encoded();
        let mut incumbent = f64::MIN;
        for x in &xs {
            incumbent = incumbent.max(gp.predict(x)?.mean);
        }
        let p = acquisition::maximise(&gp, &self.space, incumbent, DEFAULT_XI, &xs, &mut self.rng)?;
        self.space.decode(&p.point)
    }

    /// The best point so far and its estimated score: the observed point with the
    /// highest posterior mean (the highest score when no model fits); `None` before
    /// any scored sample.
    pub fn best(&self) -> Option<(Tuning, f64)> {
        let raw = || {
            let mut all = self.observed.iter().copied();
            all.next()
                .map(|first| all.fold(first, |b, o| if o.1 > b.1 { o } else { b }))
        };
        let Ok(gp) = self.fit() else { return raw() };
        let mut best: Option<(Tuning, f64)> = None;
        for ((k, _), x) in self.observed.iter().zip(self.encoded()) {
            let Ok(p) = gp.predict(&x) else { return raw() };
            if best.is_none_or(|b| p.mean > b.1) {
                best = Some((*k, p.mean));
            }
        }
        best
    }

    /// Every completed sample, warm-up ones included, oldest first.
    pub fn records(&self) -> &[SampleRecord] {
        &self.records
    }

    /// Scored samples so far (the ones in the model).
    pub fn scored_samples(&self) -> usize {
        self.observed.len()
    }

    /// The chosen point, once tuning is over.
    pub fn final_knobs(&self) -> Option<Tuning> {
        match self.phase {
            Phase::Done { best } => Some(best),
            _ => None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.final_knobs().is_some()
    }

    pub fn space(&self) -> &Space {
        &self.space
    }

    pub fn config(&self) -> &TunerConfig {
        &self.config
    }
}
