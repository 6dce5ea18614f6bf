//! A deterministic synthetic classification data set. Sample `i` is a pure
//! function of `(seed, i)`, so each rank makes only the samples it trains on
//! and every world size sees the same data.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal};

/// Input dimension.
pub(crate) const FEATURES: usize = 16;
/// Number of classes.
pub(crate) const CLASSES: usize = 4;
/// Each class is a mixture of this many Gaussian blobs, so that the classes are
/// not linearly separable and the hidden layer earns its keep.
const BLOBS_PER_CLASS: usize = 2;
/// Standard deviation of the noise around a blob's centre.
const NOISE: f32 = 1.2;

/// The blob centres of a data set.
#[derive(Debug, Clone)]
pub(crate) struct DataSet {
    seed: u64,
    centres: Vec<[f32; FEATURES]>,
}

/// One labelled sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    pub(crate) x: [f32; FEATURES],
    pub(crate) label: usize,
}

fn normal(rng: &mut StdRng) -> f32 {
    StandardNormal.sample(rng)
}

impl DataSet {
    pub(crate) fn new(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let centres = (0..CLASSES * BLOBS_PER_CLASS)
            .map(|_| std::array::from_fn(|_| 1.5 * normal(&mut rng)))
            .collect();
        DataSet { seed, centres }
    }

    /// Sample number `i`.
    pub(crate) fn sample(&self, i: u64) -> Sample {
        let mix = self.seed ^ (i.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut rng = StdRng::seed_from_u64(mix);
        let blob = (i as usize) % self.centres.len();
        let centre = &self.centres[blob];
        let x = std::array::from_fn(|d| centre[d] + NOISE * normal(&mut rng));
        Sample {
            x,
            label: blob % CLASSES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_a_function_of_seed_and_index() {
        let (a, b) = (DataSet::new(7), DataSet::new(7));
        assert_eq!(a.sample(123), b.sample(123));
        assert_ne!(a.sample(123), a.sample(124));
        assert_ne!(a.sample(5).x, DataSet::new(8).sample(5).x);
    }

    #[test]
    fn every_class_appears_equally() {
        let d = DataSet::new(1);
        let mut counts = [0usize; CLASSES];
        for i in 0..800 {
            counts[d.sample(i).label] += 1;
        }
        assert_eq!(counts, [200; CLASSES]);
    }
}
