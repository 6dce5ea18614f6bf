//! Expected improvement, and its maximisation over a mixed categorical/continuous
//! space.
//!
//! For a maximisation with posterior `N(μ(x), σ(x)²)` and incumbent `μ*`:
//!
//! ```text
//!   I = μ(x) − μ* − ξ,   Z = I / σ(x)
//!   EI(x) = I·Φ(Z) + σ(x)·φ(Z)          (σ(x) > 0)
//!   EI(x) = max(I, 0)                   (σ(x) = 0)
//! ```
//!
//! (Jones, Schonlau & Welch 1998). The incumbent is the highest posterior *mean* at
//! an observed point rather than the highest raw score, which is what a noisy
//! objective needs (Brochu, Cora & de Freitas 2010, §2.4; Horovod does the same).
//! ξ ≥ 0 trades exploitation for exploration: an improvement smaller than ξ counts
//! for nothing. It is given in units of the scores' standard deviation
//! ([`DEFAULT_XI`] = 0.01, Horovod's default, which Horovod also applies to
//! standardised scores).
//!
//! Maximisation. Categorical coordinates are not relaxed: for every combination of
//! their levels (at most 2⁴ = 16) the continuous part is searched by seeded random
//! multi-start ([`RANDOM_STARTS`] uniform points plus every observed point), then a
//! compass search from the best [`REFINED_STARTS`] of them (steps ±1/8 per
//! coordinate, halved when nothing improves, down to 1/1024). Every candidate is
//! snapped to the knob grid before it is scored, so the value compared is the value
//! of a point the engine can run. Ties keep the earlier candidate: the result
//! depends only on the model, the space and the random generator's state.

use rand::{Rng, RngExt};

use crate::{AutotuneError, Gp, Prediction, Space};

/// ξ, in standard deviations of the observed scores.
pub const DEFAULT_XI: f64 = 0.01;
/// Uniform random starts per categorical combination.
pub const RANDOM_STARTS: usize = 64;
/// Starts refined by compass search per categorical combination.
pub const REFINED_STARTS: usize = 3;
const FIRST_STEP: f64 = 0.125;
const LAST_STEP: f64 = 1.0 / 1024.0;

/// Expected improvement of `p` over `incumbent` with margin `xi` (all in score units).
pub fn expected_improvement(p: Prediction, incumbent: f64, xi: f64) -> f64 {
    let improvement = p.mean - incumbent - xi;
    let sigma = p.std_dev();
    if sigma <= 0.0 {
        return improvement.max(0.0);
    }
    let z = improvement / sigma;
    (improvement * normal_cdf(z) + sigma * normal_pdf(z)).max(0.0)
}

/// The standard normal density.
pub fn normal_pdf(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// The standard normal distribution function, `Φ(z) = erfc(−z/√2) / 2`.
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// Complementary error function, relative error < 1.2e-7 everywhere (the Chebyshev
/// fit `erfcc` of Press et al., Numerical Recipes, 2nd ed., §6.2).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = [
        -1.265_512_23,
        1.000_023_68,
        0.374_091_96,
        0.096_784_18,
        -0.186_288_06,
        0.278_868_07,
        -1.135_203_98,
        1.488_515_87,
        -0.822_152_23,
        0.170_872_77,
    ];
    let horner = poly.iter().rev().fold(0.0, |acc, c| c + t * acc);
    let r = t * (-z * z + horner).exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// The point [`maximise`] chose and its expected improvement.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    /// Snapped to the knob grid.
    pub point: Vec<f64>,
    pub ei: f64,
}

/// The point of `space` with the highest expected improvement under `gp` over
/// `incumbent`; `observed` are the points already sampled (extra starts).
pub fn maximise(
    gp: &Gp,
    space: &Space,
    incumbent: f64,
    xi: f64,
    observed: &[Vec<f64>],
    rng: &mut impl Rng,
) -> Result<Proposal, AutotuneError> {
    let (cat, cont) = (space.categorical(), space.continuous());
    let d = space.dims().len();
    let xi = xi * gp.score_scale();
    let ei = |x: &[f64]| -> Result<(Vec<f64>, f64), AutotuneError> {
        let snapped = space.snap(x)?;
        let p = gp.predict(&snapped)?;
        Ok((snapped, expected_improvement(p, incumbent, xi)))
    };
    let mut best: Option<Proposal> = None;
    for combo in 0..(1usize << cat.len()) {
        let mut template = vec![0.0; d];
        for (bit, &i) in cat.iter().enumerate() {
            template[i] = ((combo >> bit) & 1) as f64;
        }
        let mut starts: Vec<(Vec<f64>, f64)> = Vec::with_capacity(RANDOM_STARTS + observed.len());
        for _ in 0..RANDOM_STARTS {
            let mut x = template.clone();
            cont.iter().for_each(|&i| x[i] = rng.random::<f64>());
            let v = ei(&x)?.1;
            starts.push((x, v));
        }
        for o in observed.iter().filter(|o| o.len() == d) {
            let mut x = template.clone();
            cont.iter().for_each(|&i| x[i] = o[i]);
            let v = ei(&x)?.1;
            starts.push((x, v));
        }
        // Stable sort: equal values keep their generation order.
        starts.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (x, v) in starts.into_iter().take(REFINED_STARTS) {
            let (point, value) = compass(x, v, &cont, &ei)?;
            if best.as_ref().is_none_or(|b| value > b.ei) {
                best = Some(Proposal { point, ei: value });
            }
        }
    }
    match best {
        Some(b) => Ok(b),
        // No coordinate at all: the only point is the empty one.
        None => Ok(Proposal {
            point: Vec::new(),
            ei: 0.0,
        }),
    }
}

/// Compass search on the continuous coordinates; returns the snapped point.
fn compass<F>(
    mut x: Vec<f64>,
    mut value: f64,
    cont: &[usize],
    ei: &F,
) -> Result<(Vec<f64>, f64), AutotuneError>
where
    F: Fn(&[f64]) -> Result<(Vec<f64>, f64), AutotuneError>,
{
    let mut step = FIRST_STEP;
    while step >= LAST_STEP && !cont.is_empty() {
        let mut moved = false;
        for &i in cont {
            for dir in [1.0, -1.0] {
                let mut y = x.clone();
                y[i] = (x[i] + dir * step).clamp(0.0, 1.0);
                let v = ei(&y)?.1;
                if v > value {
                    (x, value, moved) = (y, v, true);
                    break;
                }
            }
        }
        if !moved {
            step /= 2.0;
        }
    }
    ei(&x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_cdf_matches_known_values() {
        for (z, want) in [
            (0.0, 0.5),
            (1.0, 0.841_344_746),
            (-1.96, 0.024_997_895),
            (3.0, 0.998_650_102),
        ] {
            assert!(
                (normal_cdf(z) - want).abs() < 1e-7,
                "Φ({z}) = {}",
                normal_cdf(z)
            );
        }
        assert!(normal_cdf(-40.0) >= 0.0 && normal_cdf(-40.0) < 1e-300);
    }

    #[test]
    fn ei_limits() {
        let p = |mean, variance| Prediction { mean, variance };
        // No uncertainty: the plain improvement.
        assert_eq!(expected_improvement(p(3.0, 0.0), 1.0, 0.5), 1.5);
        assert_eq!(expected_improvement(p(0.0, 0.0), 1.0, 0.0), 0.0);
        // At the incumbent, σ·φ(0).
        let at = expected_improvement(p(1.0, 4.0), 1.0, 0.0);
        assert!((at - 2.0 * normal_pdf(0.0)).abs() < 1e-12);
        // Far below: nothing to expect.
        assert!(expected_improvement(p(-10.0, 1.0), 1.0, 0.0) < 1e-20);
        // More uncertainty, more expected improvement; more ξ, less.
        assert!(
            expected_improvement(p(0.0, 4.0), 1.0, 0.0)
                > expected_improvement(p(0.0, 1.0), 1.0, 0.0)
        );
        assert!(expected_improvement(p(1.0, 1.0), 1.0, 0.5) < at);
    }
}
