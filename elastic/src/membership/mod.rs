//! Elastic membership as a deterministic state machine: which slots run workers,
//! which workers form each generation and in what rank order, when a host is
//! blacklisted, and when the job ends. No I/O and no clock: the coordinator's driver
//! feeds [`Membership`] events with `now` (time since job start) and carries out the
//! [`Command`]s it hands back, in order.
//!
//! ```text
//!  driver ──discovered / registered / rejoined / failed / finished / tick(now)──► Membership
//!         ◄── Spawn, Stop, Reset, HostsUpdated, Assign, Leave, Blacklisted, ... ──┘
//! ```
//!
//! # Policy
//!
//! - **Generations.** The first `Assign` is generation 1 and every later one bumps it
//!   by one; [`Membership::resets`] counts the `Assign`s after the first. When a new
//!   generation would make the resets exceed `reset_limit`, the job ends with
//!   [`JobFailure::ResetLimit`] instead.
//! - **Slots.** A host with N slots offers `host/0 .. host/N-1`. Usable slots are
//!   those of discovered, non-blacklisted hosts; the target world size is
//!   `min(usable slots, max_np)`. Workers are spawned on free usable slots (hosts in
//!   discovery order, then slot index; a slot just vacated by a failure first, so
//!   that one crashed process on a healthy host is replaced in place) until that
//!   many are live on usable slots. Members on a host that left discovery do not
//!   count: they leave at the next `Assign`, and a host replacing another at
//!   `max_np` must not wait for that. No `Assign` places more than `max_np`; a
//!   worker over it (a host came back while its replacement was starting) gets
//!   `Leave`.
//! - **First generation.** Waits until `initial_np` workers have registered and no
//!   spawn is pending. If `elastic_timeout` passes first, it starts with the
//!   registered workers if there are at least `min_np`, else the job fails with
//!   [`JobFailure::TooFewWorkers`].
//! - **Failures.** A member that fails (exit, lost connection, silence, stall) makes
//!   the others drop the generation at once (`Reset{g+1}`); a replacement is
//!   spawned and the coordinator gathers: the next `Assign` comes once every live
//!   member has rejoined and every pending spawn has registered, or, when the
//!   survivors are at least `min_np`, once `replacement_wait` has passed since
//!   the failure: replacements still starting then register while the new
//!   generation trains and join at its next commit (`HostsUpdated`). A member that does
//!   not rejoin within `rejoin_timeout`, or a spawn that does not register within
//!   `start_timeout`, has failed and is stopped; a worker that exits 0 before it was
//!   placed has failed too. A member that rejoins for `g+1` before its peer's
//!   failure is seen (a ring error) starts the same gathering. Failures while
//!   gathering only shrink the gathering, except that the first member lost in a
//!   `HostsUpdated` gathering sends `Reset` for the same generation (members still
//!   training could not reach their commit). So does a `HostsUpdated` gathering in
//!   which members on usable slots have not rejoined within `rejoin_timeout`
//!   (they may wait in a collective on the members of a host that left discovery
//!   because it vanished from the network): the rejoin timeout then starts again
//!   instead of failing them. Within one gathering a slot is spawned
//!   at most once (a host that cannot start workers cannot hold the gathering open)
//!   unless fewer than `min_np` workers (`initial_np` for the first generation) are
//!   live, a wait that the elastic timeout bounds.
//! - **Rank order.** Survivors keep their relative order (rank 0 stays rank 0 if it
//!   survives); newcomers are appended in spawn order.
//! - **Too few.** When fewer than `min_np` workers are live, the job waits, spawning
//!   as hosts appear, up to `elastic_timeout` from that moment; then it fails with
//!   [`JobFailure::TooFewWorkers`] unless `min_np` are ready or could still rejoin
//!   (and then it assigns without waiting for pending spawns).
//! - **Scale up.** New usable slots are spawned at once; the first of them to register
//!   makes a single `HostsUpdated{g+1}`: members rejoin at their next commit (no
//!   rollback) and newcomers that register meanwhile join too.
//! - **Scale down.** A host (or slot) that leaves discovery makes `HostsUpdated{g+1}`
//!   if members run there; the next `Assign` does not place them and they get
//!   `Leave` (exit 0). Workers there that are not members yet are stopped at once.
//! - **Blacklist.** Every failure counts against its host; `failures` (at least 2)
//!   within `window` blacklist it: its workers are stopped (members among them have
//!   failed) and nothing is spawned there. The k-th blacklisting of a host lasts
//!   `min(MIN·2^(k-1), MAX)` of `--blacklist-cooldown-range`, then the host is
//!   readmitted with a clean history; without a range it lasts for the rest of the
//!   job.
//! - **Finish.** When a member exits 0, no new generation starts: pending spawns are
//!   stopped and the job succeeds (`Finish`) once every member has finished. A
//!   member that then fails, or is waiting for a new generation, ends the job with
//!   [`JobFailure::FailedAfterFinish`].
//! - Events about unknown slots (never spawned, or already stopped, left or gone) and
//!   for other generations are ignored. `Stop` and `Leave` hand the worker to the
//!   driver: the core forgets it at once and may spawn on its slot again, so the
//!   driver must drop later events of that process.
//! - **Static jobs.** With [`OnFailure::EndJob`] ([`Policy::fixed`]) the first
//!   failure of any worker, in any phase, ends the job with
//!   [`JobFailure::WorkerFailed`], and spawns that do not register within the start
//!   timeout end it with [`JobFailure::StartTimeout`] naming every missing slot.
//! - **Resuming.** [`Membership::snapshot`] and [`Membership::resume`] carry the
//!   durable facts across a coordinator restart; resumed members are detached
//!   until they reattach, and fail after the rejoin timeout (see [`Snapshot`]).
//! - Timers fire only in [`Membership::tick`]; call it by
//!   [`Membership::next_deadline`].

mod backoff;
mod blacklist;
mod fill;
mod gather;
mod machine;
mod policy;
mod seats;
mod shortfall;
mod snapshot;
#[cfg(test)]
mod tests;
mod timers;

use std::fmt;
use std::time::Duration;

pub use control::Generation;

pub use machine::{Membership, WorkerCounts};
pub use policy::{
    BlacklistPolicy, DEFAULT_ELASTIC_TIMEOUT, DEFAULT_REJOIN_TIMEOUT, DEFAULT_REPLACEMENT_WAIT,
    DEFAULT_START_TIMEOUT, OnFailure, Policy, PolicyError,
};
pub use shortfall::Shortfall;
pub use snapshot::{Ban, HostHistory, Snapshot};

/// One place for a worker: slot `slot` of host `host`.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct SlotId {
    pub host: String,
    pub slot: u32,
}

impl SlotId {
    pub fn new(host: impl Into<String>, slot: u32) -> Self {
        Self {
            host: host.into(),
            slot,
        }
    }
}

impl fmt::Display for SlotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} slot {}", self.host, self.slot)
    }
}

/// What the driver must do, in the order handed back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Start a worker process on this slot; it should then register.
    Spawn(SlotId),
    /// Stop that worker (host removed or blacklisted, timed out, job finishing). The
    /// core has forgotten it: drop its later exit or failure events.
    Stop { slot: SlotId, why: String },
    /// Tell every live member: drop the current generation now and rejoin for
    /// `generation` (workers failed).
    Reset { generation: Generation },
    /// Tell every live member: rejoin for `generation` at your next commit (hosts
    /// changed; no rollback).
    HostsUpdated { generation: Generation },
    /// The new generation, in rank order; send each worker its assignment.
    Assign {
        generation: Generation,
        ranks: Vec<SlotId>,
    },
    /// A live worker not placed in the new generation (its host or slot left
    /// discovery): tell it to exit cleanly; exit 0 is expected and its events are
    /// ignored.
    Leave { slot: SlotId },
    /// `host` is blacklisted until `until` (`None`: for the rest of the job).
    Blacklisted {
        host: String,
        until: Option<Duration>,
    },
    /// `host`'s cooldown ran out; it is usable again while discovered.
    Readmitted { host: String },
    /// The worker on `slot` registered while the generation is as large as
    /// it may be: it waits as a hot spare, to take a failed member's place.
    Spare { slot: SlotId },
    /// A static job's start timeout (`after`) passed with no worker
    /// registered: the program does not use the runtime (a plain script,
    /// torch.distributed), so its processes are supervised until they exit,
    /// the job succeeding when every one has exited 0, like torchrun's.
    WithoutRuntime { after: Duration },
    /// Every member finished: the job succeeded.
    Finish,
    /// End the job with this error.
    Fail(JobFailure),
}

/// Why the job ended without success.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobFailure {
    #[error(
        "too few workers: {have} ready, --min-np is {min_np}; waited {} (--elastic-timeout)",
        fmt_secs(*waited)
    )]
    TooFewWorkers {
        have: usize,
        min_np: usize,
        waited: Duration,
    },
    #[error("reset limit reached: the job already reset {limit} times (--reset-limit {limit})")]
    ResetLimit { limit: u32 },
    #[error("{slot} failed after other workers had finished: {why}")]
    FailedAfterFinish { slot: SlotId, why: String },
    /// A worker failed in a job that ends on any failure ([`OnFailure::EndJob`]);
    /// `why` is the driver's description of it, said as it is.
    #[error("{why}")]
    WorkerFailed { slot: SlotId, why: String },
    /// Workers of a job that ends on any failure did not register in time.
    #[error(
        "{} of {expected} workers did not register within {after:?}: {}",
        missing.len(),
        list(missing)
    )]
    StartTimeout {
        after: Duration,
        expected: usize,
        missing: Vec<SlotId>,
    },
}

fn list(slots: &[SlotId]) -> String {
    slots
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `12s`, `0.5s`: a duration the way the command line writes it.
pub fn fmt_secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}
