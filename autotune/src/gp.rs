//! Gaussian-process regression over the unit hypercube.
//!
//! Prior: `f ~ GP(0, k)` with the Matérn 5/2 kernel
//!
//! ```text
//!   r² = Σ_i ((x_i − x'_i) / ℓ_i)²
//!   k(x, x') = σ_f² · (1 + √5·r + 5r²/3) · exp(−√5·r)
//! ```
//!
//! (Rasmussen & Williams 2006, eq. 4.17): twice differentiable, so less smooth than
//! the squared exponential Horovod uses, which suits throughput surfaces with kinks.
//!
//! Observations are standardised first, `z = (y − mean(y)) / std(y)` (population std;
//! 1 when the scores are all equal), exactly as Horovod's `NextSample` does. The
//! noise value α (`--autotune-gaussian-process-noise`, default 0.8) is a standard
//! deviation in those standardised units and enters as `K + α²·I`, as in Horovod's
//! `GaussianProcessRegressor` (scikit-learn's `alpha` would be added unsquared). A
//! jitter of 1e-10·σ_f², raised tenfold up to 1e-4·σ_f² when needed, keeps the
//! Cholesky factorisation (nalgebra) defined when α = 0.
//!
//! With `L Lᵀ = K + (α² + jitter)·I` and `w = (L Lᵀ)⁻¹ z`:
//!
//! ```text
//!   mean(x)     = mean(y) + std(y) · k(x, X) w
//!   variance(x) = std(y)² · (k(x, x) − |L⁻¹ k(X, x)|²)      (the latent f, no noise)
//!   log p(z)    = −½ zᵀw − Σ log L_ii − (n/2) log 2π
//! ```

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};

use crate::AutotuneError;

const SQRT_5: f64 = 2.236_067_977_499_79;
const JITTERS: [f64; 4] = [1e-10, 1e-8, 1e-6, 1e-4];

/// The Matérn 5/2 kernel with one length scale per coordinate.
#[derive(Clone, Debug, PartialEq)]
pub struct Matern52 {
    pub length_scales: Vec<f64>,
    pub signal_variance: f64,
}

impl Matern52 {
    pub fn new(length_scales: Vec<f64>, signal_variance: f64) -> Result<Self, AutotuneError> {
        let bad = |v: f64| !(v.is_finite() && v > 0.0);
        if let Some(&l) = length_scales.iter().find(|&&l| bad(l)) {
            return Err(AutotuneError::InvalidHyperparameter {
                name: "length_scale",
                value: l,
            });
        }
        if bad(signal_variance) {
            let value = signal_variance;
            return Err(AutotuneError::InvalidHyperparameter {
                name: "signal_variance",
                value,
            });
        }
        Ok(Matern52 {
            length_scales,
            signal_variance,
        })
    }

    /// `k(a, b)`; `a` and `b` have `length_scales.len()` coordinates.
    pub fn eval(&self, a: &[f64], b: &[f64]) -> f64 {
        let r2: f64 = a
            .iter()
            .zip(b)
            .zip(&self.length_scales)
            .map(|((x, y), l)| ((x - y) / l).powi(2))
            .sum();
        let s = SQRT_5 * r2.sqrt();
        self.signal_variance * (1.0 + s + 5.0 * r2 / 3.0) * (-s).exp()
    }
}

/// The candidate hyperparameters [`Gp::fit_grid`] tries.
#[derive(Clone, Debug, PartialEq)]
pub struct HyperGrid {
    /// Shared by every continuous coordinate (units of the unit cube).
    pub continuous_lengths: Vec<f64>,
    /// Shared by every categorical (0/1) coordinate.
    pub categorical_lengths: Vec<f64>,
    /// σ_f², in standardised score units.
    pub signal_variances: Vec<f64>,
}

impl Default for HyperGrid {
    /// 6 × 4 × 7 = 168 candidates (6 × 7 = 42 without categorical coordinates).
    fn default() -> Self {
        HyperGrid {
            continuous_lengths: vec![0.1, 0.2, 0.35, 0.6, 1.0, 2.0],
            categorical_lengths: vec![0.5, 1.0, 2.0, 4.0],
            signal_variances: vec![0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0],
        }
    }
}

/// A posterior prediction, in the units of the observed scores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub mean: f64,
    pub variance: f64,
}

impl Prediction {
    pub fn std_dev(&self) -> f64 {
        self.variance.max(0.0).sqrt()
    }
}

/// A Gaussian process conditioned on observations.
#[derive(Clone, Debug)]
pub struct Gp {
    kernel: Matern52,
    xs: Vec<Vec<f64>>,
    y_mean: f64,
    y_scale: f64,
    chol: Cholesky<f64, Dyn>,
    weights: DVector<f64>,
    lml: f64,
}

impl Gp {
    /// Conditions the prior on `ys` observed at `xs`, with noise standard deviation
    /// `noise` (α, in standardised units).
    pub fn fit(
        xs: &[Vec<f64>],
        ys: &[f64],
        kernel: Matern52,
        noise: f64,
    ) -> Result<Gp, AutotuneError> {
        check(xs, ys, kernel.length_scales.len(), noise)?;
        let n = xs.len();
        let y_mean = ys.iter().sum::<f64>() / n as f64;
        let var = ys.iter().map(|y| (y - y_mean).powi(2)).sum::<f64>() / n as f64;
        let y_scale = if var.sqrt() > f64::EPSILON * y_mean.abs().max(1.0) {
            var.sqrt()
        } else {
            1.0
        };
        let z = DVector::from_iterator(n, ys.iter().map(|y| (y - y_mean) / y_scale));
        let k = DMatrix::from_fn(n, n, |i, j| kernel.eval(&xs[i], &xs[j]));
        let mut last = 0.0;
        for jitter in JITTERS {
            last = jitter * kernel.signal_variance;
            let diag = noise * noise + last;
            let Some(chol) = Cholesky::new(&k + DMatrix::identity(n, n) * diag) else {
                continue;
            };
            let weights = chol.solve(&z);
            let log_det_half: f64 = chol.l_dirty().diagonal().iter().map(|d| d.ln()).sum();
            let lml = -0.5 * z.dot(&weights)
                - log_det_half
                - 0.5 * n as f64 * (2.0 * std::f64::consts::PI).ln();
            let xs = xs.to_vec();
            return Ok(Gp {
                kernel,
                xs,
                y_mean,
                y_scale,
                chol,
                weights,
                lml,
            });
        }
        Err(AutotuneError::NotPositiveDefinite {
            size: n,
            jitter: last,
        })
    }

    /// Fits every kernel of `grid` (continuous coordinates share one length scale,
    /// the coordinates flagged in `categorical` another) and keeps the one with the
    /// highest log marginal likelihood; ties keep the earlier candidate.
    pub fn fit_grid(
        xs: &[Vec<f64>],
        ys: &[f64],
        noise: f64,
        categorical: &[bool],
        grid: &HyperGrid,
    ) -> Result<Gp, AutotuneError> {
        let axes = [
            ("continuous_lengths", grid.continuous_lengths.is_empty()),
            ("categorical_lengths", grid.categorical_lengths.is_empty()),
            ("signal_variances", grid.signal_variances.is_empty()),
        ];
        if let Some((axis, _)) = axes.iter().find(|a| a.1) {
            return Err(AutotuneError::EmptyGrid { axis });
        }
        let any_cat = categorical.iter().any(|&c| c);
        let cat_lengths = if any_cat {
            &grid.categorical_lengths[..]
        } else {
            &grid.categorical_lengths[..1]
        };
        let mut best: Option<Gp> = None;
        let mut last_err = AutotuneError::NoObservations;
        for &lc in &grid.continuous_lengths {
            for &lk in cat_lengths {
                let lengths: Vec<f64> = categorical
                    .iter()
                    .map(|&c| if c { lk } else { lc })
                    .collect();
                for &sv in &grid.signal_variances {
                    match Gp::fit(xs, ys, Matern52::new(lengths.clone(), sv)?, noise) {
                        Ok(gp) if best.as_ref().is_none_or(|b| gp.lml > b.lml) => best = Some(gp),
                        Ok(_) => {}
                        Err(e) => last_err = e,
                    }
                }
            }
        }
        best.ok_or(last_err)
    }

    /// The posterior of the latent function at `x`.
    pub fn predict(&self, x: &[f64]) -> Result<Prediction, AutotuneError> {
        let d = self.kernel.length_scales.len();
        if x.len() != d {
            return Err(AutotuneError::DimensionMismatch {
                expected: d,
                got: x.len(),
            });
        }
        let ks = DVector::from_iterator(
            self.xs.len(),
            self.xs.iter().map(|xi| self.kernel.eval(xi, x)),
        );
        let mean_z = ks.dot(&self.weights);
        // Only the lower triangle of `l_dirty` is read.
        let v = self.chol.l_dirty().solve_lower_triangular(&ks);
        let explained = v.map_or(0.0, |v| v.norm_squared());
        let var_z = (self.kernel.eval(x, x) - explained).max(0.0);
        Ok(Prediction {
            mean: self.y_mean + self.y_scale * mean_z,
            variance: self.y_scale.powi(2) * var_z,
        })
    }

    pub fn log_marginal_likelihood(&self) -> f64 {
        self.lml
    }

    pub fn kernel(&self) -> &Matern52 {
        &self.kernel
    }

    /// The standard deviation the scores were divided by.
    pub fn score_scale(&self) -> f64 {
        self.y_scale
    }

    /// Number of observations.
    pub fn len(&self) -> usize {
        self.xs.len()
    }

    /// Always false: a fitted process has at least one observation.
    pub fn is_empty(&self) -> bool {
        self.xs.is_empty()
    }
}

fn check(xs: &[Vec<f64>], ys: &[f64], d: usize, noise: f64) -> Result<(), AutotuneError> {
    if !(noise.is_finite() && noise >= 0.0) {
        return Err(AutotuneError::InvalidNoise { value: noise });
    }
    if xs.is_empty() {
        return Err(AutotuneError::NoObservations);
    }
    if xs.len() != ys.len() {
        return Err(AutotuneError::DimensionMismatch {
            expected: xs.len(),
            got: ys.len(),
        });
    }
    if let Some(x) = xs.iter().find(|x| x.len() != d) {
        return Err(AutotuneError::DimensionMismatch {
            expected: d,
            got: x.len(),
        });
    }
    if let Some((index, &value)) = ys.iter().enumerate().find(|(_, y)| !y.is_finite()) {
        return Err(AutotuneError::NonFiniteObservation { index, value });
    }
    Ok(())
}
