//! The collectives' tests, one binary: each module below was a test binary
//! of its own, and one binary builds the collectives' generic code once per
//! transport (the in-memory one, TCP, TLS, QUIC) instead of once per file.
//! Tests keep their names under the module's (`cargo test -p collectives
//! --test it tls::`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod book;
mod carry;
mod common;
mod hierarchical;
mod mem_failures;
mod mem_grid;
mod on_demand;
mod quic;
mod shm;
mod tcp;
mod tls;
