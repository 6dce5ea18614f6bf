//! Elastic membership with no I/O of its own: host lists and discovery output
//! ([`hosts`], [`discovery`]), and [`Membership`], the deterministic state machine
//! that decides which slots run workers, the rank order of each generation (survivors
//! keep theirs), blacklisting with cooldown, reset counting and when the job ends.
//! The coordinator drives it with events and virtual time and carries out its
//! [`Command`]s.
//!
//! The worker side is [`training`]: [`State`] (commit, restore, sync, host
//! updates) and [`run`], the loop that brings a training function back after
//! workers fail or hosts change.

pub mod discovery;
pub mod hosts;
pub mod membership;
pub mod training;

pub use discovery::parse_discovered;
pub use hosts::{HostSlots, HostsError, parse_host_list, parse_hostfile};
pub use membership::{
    BlacklistPolicy, Command, JobFailure, Membership, Policy, PolicyError, SlotId,
};
pub use training::{ElasticError, Interrupt, Outcome, State, run};
