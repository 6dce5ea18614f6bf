//! The worker side of elastic training, as Horovod's elastic API has it: a
//! [`State`] committed in memory every few steps, and [`run()`], which brings a
//! training function back after workers fail (restore the last commit, join
//! the next generation, sync from rank 0, call again) or hosts change (join
//! the next generation at a commit and sync, with no rollback).

mod run;
mod state;

pub use run::{ElasticError, Outcome, rejoin, rejoin_async, run, run_async};
pub use state::{Interrupt, PeerLost, State, WorkersFailed};
