//! The one error type of this crate.

use thiserror::Error;

/// Everything the autotuner core can refuse. No variant comes from the network or the
/// clock (there are none here): each is a bad input or a numerical dead end.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum AutotuneError {
    /// `TunerConfig::steps_per_sample` was 0.
    #[error("steps per sample must be at least 1")]
    ZeroStepsPerSample,
    /// `TunerConfig::max_samples` was 0.
    #[error("the maximum number of samples must be at least 1")]
    ZeroMaxSamples,
    /// The Gaussian-process noise (`--autotune-gaussian-process-noise`) was negative,
    /// NaN or infinite.
    #[error("gaussian-process noise must be finite and non-negative, got {value}")]
    InvalidNoise { value: f64 },
    /// A kernel hyperparameter (length scale, signal variance) was not finite and
    /// positive.
    #[error("kernel hyperparameter {name} must be finite and positive, got {value}")]
    InvalidHyperparameter { name: &'static str, value: f64 },
    /// A point or a kernel had the wrong number of coordinates.
    #[error("expected {expected} coordinates, got {got}")]
    DimensionMismatch { expected: usize, got: usize },
    /// A Gaussian process was asked to fit nothing.
    #[error("no observations to fit")]
    NoObservations,
    /// The hyperparameter grid had an empty axis.
    #[error("the hyperparameter grid has an empty axis: {axis}")]
    EmptyGrid { axis: &'static str },
    /// An observed score was NaN or infinite.
    #[error("observation {index} is not finite: {value}")]
    NonFiniteObservation { index: usize, value: f64 },
    /// The kernel matrix stayed indefinite even with the largest jitter tried.
    #[error(
        "kernel matrix of {size} observations is not positive definite (jitter up to {jitter})"
    )]
    NotPositiveDefinite { size: usize, jitter: f64 },
}
