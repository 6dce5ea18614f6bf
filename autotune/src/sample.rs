//! The tuner's settings, what it hands back, and how measurements become samples.
//!
//! ```text
//!  record(step, bytes, seconds)   step:  s0  s0+1  …  s0+n−1 │ s0+n …
//!                                        └── one sample ────┘ └ next
//!  score = Σ bytes / Σ seconds over the sample (bytes processed by collectives per second)
//! ```
//!
//! A sample opens at the step of its first record and closes with the record whose
//! step reaches `first + steps_per_sample − 1` (so skipped steps count). A step lower
//! than the previous one (a restart) drops the partial sample and opens a new one;
//! records with a negative or non-finite duration are ignored; a sample with no
//! measured time yields no score.

use serde::{Deserialize, Serialize};

use crate::{AutotuneError, Tuning};

/// The autotuner's own settings (the `--autotune-*` options).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TunerConfig {
    /// Samples at the starting point whose scores are discarded. Default 3.
    pub warmup_samples: usize,
    /// Steps per sample. Default 10.
    pub steps_per_sample: u64,
    /// Scored samples before the best point is kept for good. Default 20.
    pub max_samples: usize,
    /// α, the Gaussian-process noise (see [`Gp`](crate::Gp)). Default 0.8.
    pub gp_noise: f64,
    /// Seeds the design and the acquisition's random starts. Default 0.
    pub seed: u64,
}

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig {
            warmup_samples: 3,
            steps_per_sample: 10,
            max_samples: 20,
            gp_noise: 0.8,
            seed: 0,
        }
    }
}

impl TunerConfig {
    pub fn validate(&self) -> Result<(), AutotuneError> {
        if self.steps_per_sample == 0 {
            return Err(AutotuneError::ZeroStepsPerSample);
        }
        if self.max_samples == 0 {
            return Err(AutotuneError::ZeroMaxSamples);
        }
        if !(self.gp_noise.is_finite() && self.gp_noise >= 0.0) {
            return Err(AutotuneError::InvalidNoise {
                value: self.gp_noise,
            });
        }
        Ok(())
    }
}

/// One completed sample: a row of the CSV log.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    pub knobs: Tuning,
    /// Bytes processed by collectives per second over the sample.
    pub score: f64,
    /// The step that completed the sample.
    pub step: u64,
    /// Warm-up samples are logged but never enter the model.
    pub warmup: bool,
}

/// What a completed sample means for the knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decision {
    /// A warm-up sample ended; keep the current knobs.
    WarmUp { sample: SampleRecord },
    /// A scored sample ended; switch to `next` (which may equal the current knobs).
    Explore { sample: SampleRecord, next: Tuning },
    /// The budget is spent; use `best` for the rest of the run.
    Final { sample: SampleRecord, best: Tuning },
}

impl Decision {
    /// The sample that completed.
    pub fn sample(&self) -> &SampleRecord {
        match self {
            Decision::WarmUp { sample }
            | Decision::Explore { sample, .. }
            | Decision::Final { sample, .. } => sample,
        }
    }

    /// The knobs to run with from now on.
    pub fn knobs(&self) -> Tuning {
        match self {
            Decision::WarmUp { sample } => sample.knobs,
            Decision::Explore { next, .. } => *next,
            Decision::Final { best, .. } => *best,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Open {
    first_step: u64,
    last_step: u64,
    bytes: u128,
    seconds: f64,
}

/// Step accounting for one sample at a time.
#[derive(Clone, Debug)]
pub(crate) struct Sampler {
    steps_per_sample: u64,
    open: Option<Open>,
}

impl Sampler {
    pub(crate) fn new(steps_per_sample: u64) -> Sampler {
        Sampler {
            steps_per_sample,
            open: None,
        }
    }

    /// Adds a record; returns the score when it closes a sample.
    pub(crate) fn record(&mut self, step: u64, bytes: u64, seconds: f64) -> Option<f64> {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return None;
        }
        let mut s = match self.open {
            Some(s) if step >= s.last_step => s,
            _ => Open {
                first_step: step,
                last_step: step,
                bytes: 0,
                seconds: 0.0,
            },
        };
        s.bytes += u128::from(bytes);
        s.seconds += seconds;
        s.last_step = step;
        // `step >= last_step >= first_step`: no underflow.
        if step - s.first_step + 1 < self.steps_per_sample {
            self.open = Some(s);
            return None;
        }
        self.open = None;
        (s.seconds > 0.0).then(|| s.bytes as f64 / s.seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_covers_steps_per_sample_steps() {
        let mut s = Sampler::new(3);
        assert_eq!(s.record(10, 100, 1.0), None);
        assert_eq!(s.record(11, 100, 1.0), None);
        assert_eq!(s.record(12, 400, 1.0), Some(200.0));
        // Skipped steps count towards the sample.
        assert_eq!(s.record(13, 100, 1.0), None);
        assert_eq!(s.record(20, 300, 1.0), Some(200.0));
    }

    #[test]
    fn restarts_bad_durations_and_empty_samples() {
        let mut s = Sampler::new(2);
        assert_eq!(s.record(5, 1000, 1.0), None);
        // Going back drops the partial sample.
        assert_eq!(s.record(1, 10, 1.0), None);
        assert_eq!(s.record(2, 10, f64::NAN), None);
        assert_eq!(s.record(2, 10, -1.0), None);
        assert_eq!(s.record(2, 30, 1.0), Some(20.0));
        assert_eq!(s.record(3, 30, 0.0), None);
        assert_eq!(s.record(4, 30, 0.0), None, "no time measured: no score");
    }

    #[test]
    fn config_validation() {
        assert_eq!(TunerConfig::default().validate(), Ok(()));
        let bad = |c: TunerConfig| c.validate().unwrap_err();
        let d = TunerConfig::default();
        assert_eq!(
            bad(TunerConfig {
                steps_per_sample: 0,
                ..d
            }),
            AutotuneError::ZeroStepsPerSample
        );
        assert_eq!(
            bad(TunerConfig {
                max_samples: 0,
                ..d
            }),
            AutotuneError::ZeroMaxSamples
        );
        assert!(matches!(
            bad(TunerConfig {
                gp_noise: f64::NAN,
                ..d
            }),
            AutotuneError::InvalidNoise { .. }
        ));
    }
}
