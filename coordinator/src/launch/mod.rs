//! Starting and supervising a job's workers: the [`Launcher`] seam the job
//! driver starts them through, and its process implementation
//! ([`start::ProcessLauncher`]).

pub mod address;
mod forwarder;
mod launcher;
pub mod output;
mod pieces;
pub mod process;
pub mod program_env;
pub mod srun;
pub mod ssh;
pub mod start;
pub mod warm;

pub use launcher::{EXIT_POLL, EXIT_SWEEP, LaunchError, Launcher, Started, stop_all};
