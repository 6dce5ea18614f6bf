//! # autotune
//!
//! The autotuner's optimisation core: a seeded Bayesian optimiser over elasticrun's
//! performance knobs (fusion threshold, cycle time, response cache, hierarchical
//! allreduce/allgather, ring segment size), scored by bytes processed per second.
//! No I/O, no clock, no async: the engine's rank 0 feeds measurements to a
//! [`Tuner`] and applies the [`Decision`]s it returns. See `docs/autotune.md`.
//!
//! - `knobs`: [`Tuning`], [`Knob`], [`Layout`] and the tuned ranges;
//! - `space`: [`Space`], which knobs are tuned and the encoding into the unit cube;
//! - `gp`: [`Gp`], Gaussian-process regression (Matérn 5/2, nalgebra's Cholesky);
//! - `acquisition`: [`expected_improvement`] and its maximiser [`maximise_ei`];
//! - `design`: the initial Latin-hypercube design ([`INITIAL_DESIGN`] points);
//! - `sample`: [`TunerConfig`], [`SampleRecord`], [`Decision`], step accounting;
//! - `tuner`: [`Tuner`], warm-up, proposals, categorical polish, the final choice;
//! - `by_world_size`: [`Memory`], tuning per world size for elastic jobs;
//! - `log`: the CSV log ([`csv_header`], [`csv_row`]) and the final [`params_yaml`].

mod acquisition;
mod by_world_size;
mod design;
mod error;
mod gp;
mod knobs;
mod log;
mod sample;
mod space;
mod tuner;

pub use acquisition::{
    DEFAULT_XI, Proposal, RANDOM_STARTS, REFINED_STARTS, expected_improvement,
    maximise as maximise_ei, normal_cdf, normal_pdf,
};
pub use by_world_size::Memory;
pub use design::INITIAL_DESIGN;
pub use error::AutotuneError;
pub use gp::{Gp, HyperGrid, Matern52, Prediction};
pub use knobs::{
    CYCLE_MAX_US, CYCLE_MIN_US, FUSION_GRID_BYTES, FUSION_MAX_BYTES, FUSION_MIN_BYTES, Knob,
    Layout, SEGMENT_GRID_BYTES, SEGMENT_MAX_BYTES, SEGMENT_MIN_BYTES, Tuning,
};
pub use log::{CSV_COLUMNS, csv_header, csv_row, params_yaml};
pub use sample::{Decision, SampleRecord, TunerConfig};
pub use space::{Dim, Space};
pub use tuner::Tuner;
