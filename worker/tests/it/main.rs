//! The worker's tests, one binary: each module below was a test binary of
//! its own, and one binary builds the engine's generic code over the
//! in-memory transport once instead of once per file. Tests keep their names
//! under the module's (`cargo test -p worker --test it retune::`).
// Helpers of these tests fail the test by panicking, as the tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod engine;
mod gpu_engine;
mod hierarchical;
mod idle;
mod lent;
mod pending;
mod retune;
