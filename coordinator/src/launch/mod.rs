//! Starting and supervising a job's workers.

pub mod address;
pub mod output;
pub mod process;
pub mod ssh;
pub mod start;
