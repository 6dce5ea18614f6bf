//! Configuration, parsed once at the edge into typed values.

pub mod cli;
pub mod file;
