//! The cheap correctness check: rank `r` fills every gradient with `r + 1`, so
//! after a step every element on every rank must be the mean of `1..=size`,
//! `(size + 1) / 2`, and stays so on later steps (the mean of equal values).

use worker::{DType, Element};

use crate::model::TensorSpec;

/// An averaged gradient that is not what every rank contributed.
#[derive(Debug, thiserror::Error)]
#[error(
    "wrong result on rank {rank} after step {step}: {tensor}[{index}] is {got}, expected {want}"
)]
pub(crate) struct WrongResult {
    pub(crate) rank: usize,
    pub(crate) step: usize,
    pub(crate) tensor: String,
    /// The first wrong element (or the expected length, when the length is wrong).
    pub(crate) index: usize,
    pub(crate) got: f64,
    pub(crate) want: f64,
}

/// The value rank `rank` fills its gradients with.
pub(crate) fn fill_value(rank: usize) -> f64 {
    (rank + 1) as f64
}

/// The average of every rank's fill value.
pub(crate) fn expected(size: usize) -> f64 {
    (size + 1) as f64 / 2.0
}

/// Relative error allowed: a few units in the last place of `T`.
fn tolerance<T: Element>() -> f64 {
    match T::DTYPE {
        DType::F16 => 4e-3,
        DType::BF16 => 3e-2,
        DType::F32 => 1e-6,
        _ => 1e-12,
    }
}

/// Checks every element of `grads` against `want`; the error names the first
/// one that differs (`rank` and `step` only label it).
pub(crate) fn verify<T: Element>(
    tensors: &[TensorSpec],
    grads: &[Vec<T>],
    want: f64,
    rank: usize,
    step: usize,
) -> Result<(), WrongResult> {
    let tol = tolerance::<T>() * want.abs().max(1.0);
    for (spec, g) in tensors.iter().zip(grads) {
        let wrong = |index, got| WrongResult {
            rank,
            step,
            tensor: spec.name.clone(),
            index,
            got,
            want,
        };
        if g.len() != spec.elements() {
            return Err(wrong(spec.elements(), g.len() as f64));
        }
        if let Some(i) = g.iter().position(|v| (v.to_f64() - want).abs() > tol) {
            return Err(wrong(i, g[i].to_f64()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::uniform;

    #[test]
    fn the_mean_of_the_fill_values_is_expected() {
        for size in 1..=7 {
            let mean = (0..size).map(fill_value).sum::<f64>() / size as f64;
            assert_eq!(mean, expected(size));
        }
    }

    #[test]
    fn right_results_pass_and_the_first_wrong_element_is_named() {
        let specs = uniform(2, 3);
        let mut grads = vec![vec![1.5f32; 3]; 2];
        verify(&specs, &grads, 1.5, 0, 0).unwrap();
        grads[1][2] = 1.0;
        let e = verify(&specs, &grads, 1.5, 1, 4).unwrap_err();
        assert_eq!((e.tensor.as_str(), e.index, e.got), ("tensor.1", 2, 1.0));
        assert!(e.to_string().contains("rank 1 after step 4"), "{e}");
        grads[1].pop();
        assert!(verify(&specs, &grads, 1.5, 0, 0).is_err());
    }

    #[test]
    fn half_precision_results_are_exact_enough() {
        let specs = uniform(1, 4);
        let v = worker::f16::from_f64(expected(3));
        verify(&specs, &[vec![v; 4]], expected(3), 0, 0).unwrap();
        let off = worker::f16::from_f64(expected(3) + 0.1);
        assert!(verify(&specs, &[vec![off; 4]], expected(3), 0, 0).is_err());
    }
}
