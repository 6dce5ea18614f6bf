//! Starting and supervising a job's workers.

pub mod output;
pub mod process;
