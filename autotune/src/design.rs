//! The initial design: the points sampled before the Gaussian process has enough
//! observations to be worth asking.
//!
//! Sample 1 is the starting point itself (the baseline); samples 2..=[`INITIAL_DESIGN`]
//! are a seeded Latin hypercube over the continuous coordinates (each coordinate's
//! range cut into n strata, one point per stratum, strata paired at random), and each
//! categorical coordinate takes the level the starting point does not have at a third
//! of the points (at least one). The flips are dealt out round-robin from a random
//! offset, so different knobs flip at different points where there are enough
//! points: every level of every categorical knob is measured before expected
//! improvement takes over, and the flips are not all confounded with each other.

use rand::seq::SliceRandom;
use rand::{Rng, RngExt};

use crate::{AutotuneError, Space, Tuning};

/// Samples in the initial design, the starting point included (Horovod also begins
/// with four fixed test points).
pub const INITIAL_DESIGN: usize = 4;

/// `n` design points after `start`, decoded to knobs.
pub(crate) fn latin_hypercube(
    space: &Space,
    start: &Tuning,
    n: usize,
    rng: &mut impl Rng,
) -> Result<Vec<Tuning>, AutotuneError> {
    let origin = space.encode(start);
    let mut points = vec![origin.clone(); n];
    if n == 0 {
        return Ok(Vec::new());
    }
    let categorical = space.categorical();
    let flips = (n / 3).max(1);
    let offset = rng.random_range(0..n);
    for (c, &j) in categorical.iter().enumerate() {
        for t in 0..flips {
            let i = (offset + c + t * categorical.len()) % n;
            points[i][j] = 1.0 - points[i][j];
        }
    }
    for j in space.continuous() {
        let mut strata: Vec<usize> = (0..n).collect();
        strata.shuffle(rng);
        for (point, &s) in points.iter_mut().zip(&strata) {
            point[j] = (s as f64 + rng.random::<f64>()) / n as f64;
        }
    }
    points.iter().map(|p| space.decode(p)).collect()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::Xoshiro256PlusPlus;

    use super::*;
    use crate::{Dim, Layout};

    #[test]
    fn one_point_per_stratum_and_every_level_seen() {
        let layout = Layout {
            hosts: 2,
            max_local_size: 4,
        };
        let space = Space::new(Tuning::default(), &[], layout);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let start = space.initial();
        let pts = latin_hypercube(&space, &start, 3, &mut rng).unwrap();
        let enc: Vec<Vec<f64>> = pts.iter().map(|k| space.encode(k)).collect();
        let origin = space.encode(&start);
        for (j, dim) in space.dims().iter().enumerate() {
            if dim.is_categorical() {
                let flipped = enc.iter().filter(|p| p[j] != origin[j]).count();
                assert_eq!(flipped, 1, "{dim:?}");
            } else if *dim != Dim::FusionThreshold {
                let mut strata: Vec<usize> =
                    enc.iter().map(|p| (p[j] * 3.0).floor() as usize).collect();
                strata.sort();
                assert_eq!(strata, vec![0, 1, 2], "{dim:?}: {enc:?}");
            }
        }
    }
}
