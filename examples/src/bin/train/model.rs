//! A multi-layer perceptron (one tanh hidden layer, softmax output) whose
//! parameters live in one flat vector, so that a whole gradient is averaged
//! across ranks with a single allreduce.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, StandardNormal};

use crate::data::{CLASSES, FEATURES, Sample};

/// Hidden units.
pub(crate) const HIDDEN: usize = 32;

const W1: usize = 0;
const B1: usize = W1 + HIDDEN * FEATURES;
const W2: usize = B1 + HIDDEN;
const B2: usize = W2 + CLASSES * HIDDEN;
/// Number of parameters.
pub(crate) const PARAMS: usize = B2 + CLASSES;

/// The parameter tensors, by name, as ranges of the flat vector (their
/// gradients are exchanged as separate named tensors, which the engine fuses).
pub(crate) const LAYERS: [(&str, std::ops::Range<usize>); 4] = [
    ("fc1.weight", W1..B1),
    ("fc1.bias", B1..W2),
    ("fc2.weight", W2..B2),
    ("fc2.bias", B2..PARAMS),
];

/// Parameters drawn with Xavier-style scaling, biases zero.
pub(crate) fn initial_params(seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(0x5EED));
    let mut p = vec![0.0; PARAMS];
    let mut draw = |fan_in: usize| -> f32 {
        let z: f32 = StandardNormal.sample(&mut rng);
        z / (fan_in as f32).sqrt()
    };
    p[W1..B1].iter_mut().for_each(|w| *w = draw(FEATURES));
    p[W2..B2].iter_mut().for_each(|w| *w = draw(HIDDEN));
    p
}

struct Forward {
    hidden: [f32; HIDDEN],
    probs: [f32; CLASSES],
}

fn forward(p: &[f32], x: &[f32; FEATURES]) -> Forward {
    let hidden = std::array::from_fn(|j| {
        let row = &p[W1 + j * FEATURES..W1 + (j + 1) * FEATURES];
        (p[B1 + j] + row.iter().zip(x).map(|(w, v)| w * v).sum::<f32>()).tanh()
    });
    let logits: [f32; CLASSES] = std::array::from_fn(|k| {
        let row = &p[W2 + k * HIDDEN..W2 + (k + 1) * HIDDEN];
        p[B2 + k] + row.iter().zip(&hidden).map(|(w, h)| w * h).sum::<f32>()
    });
    let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: [f32; CLASSES] = std::array::from_fn(|k| (logits[k] - top).exp());
    let total: f32 = exp.iter().sum();
    Forward {
        hidden,
        probs: std::array::from_fn(|k| exp[k] / total),
    }
}

fn cross_entropy(probs: &[f32; CLASSES], label: usize) -> f32 {
    -probs[label].max(1e-12).ln()
}

/// Adds the gradient of the summed cross-entropy over `batch` to `grad` and
/// returns the summed loss.
pub(crate) fn accumulate_gradient(p: &[f32], batch: &[Sample], grad: &mut [f32]) -> f32 {
    let mut loss = 0.0;
    for s in batch {
        let f = forward(p, &s.x);
        loss += cross_entropy(&f.probs, s.label);
        let dz: [f32; CLASSES] =
            std::array::from_fn(|k| f.probs[k] - f32::from(u8::from(k == s.label)));
        let mut dh = [0.0f32; HIDDEN];
        for k in 0..CLASSES {
            grad[B2 + k] += dz[k];
            for j in 0..HIDDEN {
                grad[W2 + k * HIDDEN + j] += dz[k] * f.hidden[j];
                dh[j] += p[W2 + k * HIDDEN + j] * dz[k];
            }
        }
        for j in 0..HIDDEN {
            let da = dh[j] * (1.0 - f.hidden[j] * f.hidden[j]);
            grad[B1 + j] += da;
            for (d, v) in s.x.iter().enumerate() {
                grad[W1 + j * FEATURES + d] += da * v;
            }
        }
    }
    loss
}

/// (summed loss, number classified correctly) over `samples`.
pub(crate) fn evaluate(p: &[f32], samples: impl Iterator<Item = Sample>) -> (f32, usize) {
    samples.fold((0.0, 0), |(loss, right), s| {
        let f = forward(p, &s.x);
        let guess = (0..CLASSES)
            .max_by(|&a, &b| f.probs[a].total_cmp(&f.probs[b]))
            .unwrap_or(0);
        (
            loss + cross_entropy(&f.probs, s.label),
            right + usize::from(guess == s.label),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::DataSet;

    #[test]
    fn gradient_matches_finite_differences() {
        let data = DataSet::new(3);
        let batch: Vec<Sample> = (0..5).map(|i| data.sample(i)).collect();
        let p = initial_params(3);
        let mut grad = vec![0.0; PARAMS];
        accumulate_gradient(&p, &batch, &mut grad);
        let loss_at = |p: &[f32]| accumulate_gradient(p, &batch, &mut vec![0.0; PARAMS]);
        for i in [W1, W1 + 17, B1 + 3, W2 + 40, B2 + 1] {
            let h = 1e-2;
            let (mut up, mut down) = (p.clone(), p.clone());
            up[i] += h;
            down[i] -= h;
            let numeric = (loss_at(&up) - loss_at(&down)) / (2.0 * h);
            assert!(
                (numeric - grad[i]).abs() < 2e-2 * (1.0 + grad[i].abs()),
                "param {i}: analytic {} vs numeric {numeric}",
                grad[i]
            );
        }
    }

    #[test]
    fn untrained_model_is_near_chance() {
        let data = DataSet::new(9);
        let (loss, right) = evaluate(&initial_params(9), (0..400).map(|i| data.sample(i)));
        let mean = loss / 400.0;
        assert!(mean > 0.8 && mean < 3.0, "mean loss {mean}");
        assert!(right < 300, "{right} of 400 right before training");
    }
}
