//! Elastic membership with no I/O and no runtime of its own: host lists and
//! discovery output ([`hosts`], [`discovery`]), and [`Membership`], the
//! deterministic state machine that decides which slots run workers, the rank order
//! of each generation (survivors keep theirs), blacklisting with cooldown, reset
//! counting and when the job ends. The coordinator drives it with events and
//! virtual time and carries out its [`Command`]s.
//!
//! The worker side of elastic training (`State`, `run`) is `worker::elastic`.

pub mod discovery;
pub mod hosts;
pub mod membership;
pub mod slurm;

pub use discovery::parse_discovered;
pub use hosts::{HostSlots, HostsError, parse_host_list, parse_hostfile};
pub use membership::{
    BlacklistPolicy, Command, Generation, JobFailure, Membership, OnFailure, Policy, PolicyError,
    SlotId, Snapshot,
};
