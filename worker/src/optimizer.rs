//! Training helpers in the manner of Horovod's `DistributedOptimizer` and
//! Determined's optimisations: gradients averaged across ranks as they become
//! ready, local aggregation over several backward passes
//! (`backward_passes_per_step`, Determined's `aggregation_frequency`), fp16
//! compression on the wire, and metric averaging.
//!
//! ```text
//!  pass 1..k-1: submit(name, g) adds g to a local sum (no traffic)
//!  pass k:      submit(name, g) sends (sum + g) / k at once, so its exchange
//!               overlaps the rest of the backward pass
//!  step():      None while accumulating; after pass k waits and returns every
//!               gradient averaged over ranks and passes, in submission order
//! ```

use std::collections::BTreeMap;

use collectives::{ReduceOp, f16};

use crate::engine::{Handle, Invalid};
use crate::{Error, Worker};

/// How gradients travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// As f32.
    #[default]
    None,
    /// As IEEE half precision: half the bytes, about three significant digits
    /// (Horovod's `Compression.fp16`); summed through f32.
    Fp16,
}

/// Settings of a [`DistributedOptimizer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptimizerOptions {
    /// Backward passes whose gradients are summed locally before one exchange
    /// (at least 1).
    pub backward_passes_per_step: usize,
    pub compression: Compression,
}

impl Default for OptimizerOptions {
    fn default() -> Self {
        OptimizerOptions {
            backward_passes_per_step: 1,
            compression: Compression::None,
        }
    }
}

enum InFlight {
    F32(Handle<f32>),
    F16(Handle<f16>),
}

/// Averages named gradients across ranks; see the module docs.
pub struct DistributedOptimizer<'w> {
    worker: &'w Worker,
    opts: OptimizerOptions,
    /// Backward passes finished in the current step.
    passes: usize,
    /// Local sums of the passes so far.
    sums: BTreeMap<String, Vec<f32>>,
    in_flight: Vec<(String, InFlight)>,
}

impl std::fmt::Debug for DistributedOptimizer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedOptimizer")
            .field("opts", &self.opts)
            .field("passes", &self.passes)
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

/// Averaged gradients by name, in the order they were submitted.
pub type Gradients = Vec<(String, Vec<f32>)>;

impl<'w> DistributedOptimizer<'w> {
    pub fn new(worker: &'w Worker, opts: OptimizerOptions) -> Result<Self, Error> {
        if opts.backward_passes_per_step == 0 {
            return Err(Invalid::PassesPerStep.into());
        }
        Ok(DistributedOptimizer {
            worker,
            opts,
            passes: 0,
            sums: BTreeMap::new(),
            in_flight: Vec::new(),
        })
    }

    fn last_pass(&self) -> bool {
        self.passes + 1 == self.opts.backward_passes_per_step
    }

    /// Hands over gradient `name` of this backward pass (each name once per
    /// pass, the same names on every rank).
    pub fn submit(&mut self, name: &str, grad: &[f32]) -> Result<(), Error> {
        if self.in_flight.iter().any(|(n, _)| n == name) {
            let name = name.to_owned();
            return Err(Invalid::Resubmitted { name }.into());
        }
        let sum = self.sums.remove(name);
        if !self.last_pass() {
            let mut sum = sum.unwrap_or_else(|| vec![0.0; grad.len()]);
            add(&mut sum, grad, name)?;
            self.sums.insert(name.to_owned(), sum);
            return Ok(());
        }
        let mut total = grad.to_vec();
        if let Some(s) = sum {
            add(&mut total, &s, name)?;
        }
        let k = self.opts.backward_passes_per_step as f32;
        if k > 1.0 {
            total.iter_mut().for_each(|g| *g /= k);
        }
        let wire = format!("grad.{name}");
        let w = self.worker;
        let h = match self.opts.compression {
            Compression::None => {
                InFlight::F32(w.allreduce_async(Some(&wire), total, ReduceOp::Average))
            }
            Compression::Fp16 => {
                let half: Vec<f16> = total.iter().map(|&g| f16::from_f32(g)).collect();
                InFlight::F16(w.allreduce_async(Some(&wire), half, ReduceOp::Average))
            }
        };
        self.in_flight.push((name.to_owned(), h));
        Ok(())
    }

    /// Ends a backward pass: `None` while gradients accumulate locally; on
    /// the pass that completes a step, every gradient averaged over ranks and
    /// passes (and the step is counted, [`crate::Session::steps`]).
    pub fn step(&mut self) -> Result<Option<Gradients>, Error> {
        if !self.last_pass() {
            self.passes += 1;
            return Ok(None);
        }
        self.passes = 0;
        let unsent: Vec<String> = std::mem::take(&mut self.sums).into_keys().collect();
        let mut out = Vec::with_capacity(self.in_flight.len());
        for (name, h) in self.in_flight.drain(..) {
            let g = match h {
                InFlight::F32(h) => h.wait()?.data,
                InFlight::F16(h) => h.wait()?.data.iter().map(|g| g.to_f32()).collect(),
            };
            out.push((name, g));
        }
        if !unsent.is_empty() {
            return Err(Invalid::Unsent { names: unsent }.into());
        }
        self.worker.set_steps(self.worker.steps().saturating_add(1));
        Ok(Some(out))
    }
}

fn add(sum: &mut [f32], g: &[f32], name: &str) -> Result<(), Error> {
    if sum.len() != g.len() {
        return Err(Invalid::Length {
            name: name.to_owned(),
            was: sum.len(),
            now: g.len(),
        }
        .into());
    }
    sum.iter_mut().zip(g).for_each(|(s, x)| *s += x);
    Ok(())
}

impl Worker {
    /// Averages `metrics` across ranks (Determined's
    /// `average_training_metrics`); every rank must pass the same names.
    /// Returns them in name order.
    pub fn average_metrics(
        &self,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<BTreeMap<String, f64>, Error> {
        let values: Vec<f64> = metrics.values().copied().collect();
        let name = format!("metrics.{}", metrics.len());
        let avg = self
            .allreduce_async(Some(&name), values, ReduceOp::Average)
            .wait()?;
        Ok(metrics.keys().cloned().zip(avg.data).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::worker::alone;

    #[test]
    fn passes_accumulate_locally_and_the_last_one_exchanges_their_mean() {
        let w = alone();
        let opts = OptimizerOptions {
            backward_passes_per_step: 3,
            ..OptimizerOptions::default()
        };
        let mut opt = DistributedOptimizer::new(&w, opts).unwrap();
        for step in 0..2 {
            for pass in 0..3 {
                let g = (step * 10 + pass) as f32;
                opt.submit("w", &[g, 2.0 * g]).unwrap();
                opt.submit("b", &[1.0]).unwrap();
                let out = opt.step().unwrap();
                if pass < 2 {
                    assert_eq!(out, None, "step {step} pass {pass}");
                } else {
                    let mean = (step * 10 + 1) as f32;
                    let want = vec![
                        ("w".into(), vec![mean, 2.0 * mean]),
                        ("b".into(), vec![1.0]),
                    ];
                    assert_eq!(out, Some(want), "step {step}");
                }
            }
        }
        w.shutdown();
    }

    #[test]
    fn fp16_compression_keeps_about_three_digits() {
        let w = alone();
        let opts = OptimizerOptions {
            compression: Compression::Fp16,
            ..OptimizerOptions::default()
        };
        let mut opt = DistributedOptimizer::new(&w, opts).unwrap();
        let g = [0.1f32, -1.23456, 1000.5];
        opt.submit("w", &g).unwrap();
        let out = opt.step().unwrap().unwrap();
        for (got, want) in out[0].1.iter().zip(g) {
            assert!((got - want).abs() <= want.abs() * 1e-3, "{got} vs {want}");
        }
        assert_ne!(out[0].1, g.to_vec(), "fp16 should round");
        w.shutdown();
    }

    #[test]
    fn misuse_is_an_error_not_a_wrong_answer() {
        let w = alone();
        let bad = OptimizerOptions {
            backward_passes_per_step: 0,
            ..OptimizerOptions::default()
        };
        assert!(DistributedOptimizer::new(&w, bad).is_err());
        let two = OptimizerOptions {
            backward_passes_per_step: 2,
            ..OptimizerOptions::default()
        };
        let mut opt = DistributedOptimizer::new(&w, two).unwrap();
        opt.submit("w", &[1.0, 2.0]).unwrap();
        opt.step().unwrap();
        let e = opt.submit("w", &[1.0]).unwrap_err();
        assert!(e.to_string().contains("changed length"), "{e}");
        let mut opt = DistributedOptimizer::new(&w, two).unwrap();
        opt.submit("w", &[1.0]).unwrap();
        opt.submit("b", &[1.0]).unwrap();
        opt.step().unwrap();
        opt.submit("w", &[1.0]).unwrap();
        let e = opt.step().unwrap_err();
        assert!(e.to_string().contains("[\"b\"]"), "{e}");
        let m: BTreeMap<String, f64> = [("loss".to_owned(), 0.5), ("acc".to_owned(), 0.9)].into();
        assert_eq!(w.average_metrics(&m).unwrap(), m);
        w.shutdown();
    }
}
