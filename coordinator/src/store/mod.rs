//! Where a job's durable state lives: the [`Store`] seam.
//!
//! The job driver commits [`JobState`] (the job's epoch and the membership
//! core's [`Snapshot`]) *before* it carries out an assignment, a reset, a host
//! update or a blacklisting, so that a coordinator that dies after telling
//! workers something has recorded it first. Every commit names the revision it
//! read last; a store whose state has moved on since refuses with
//! [`StoreError::Fenced`]: another coordinator has taken the job over, and this
//! one must stop. At start the driver loads: an empty store is a new job; a
//! stored state is resumed ([`elastic::Membership::resume`]), its clock going on
//! from the stored epoch.
//!
//! ```text
//!  driver ──load()──────────────────────► Option<(Revision, JobState)>
//!         ──commit(Some(rev), state)──► Ok(rev + 1) | Err(Fenced { expected, found })
//! ```
//!
//! Implementations: [`MemoryStore`] (a job whose coordinator is the launcher:
//! the state lives as long as the process) and [`EtcdStore`] (`elasticrun
//! serve`: the state outlives every coordinator, and only the elected leader
//! can write it).

mod etcd;
mod memory;

use std::time::{Duration, SystemTime};

use elastic::Snapshot;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub use etcd::EtcdStore;
pub use memory::MemoryStore;

/// Largest encoded job state a store accepts or decodes.
pub const MAX_STATE_BYTES: usize = 1 << 20;

/// A store's version of the job state: every commit makes a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Revision(pub u64);

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "revision {}", self.0)
    }
}

/// What a job must not lose when its coordinator does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobState {
    /// When the job started (every time in `membership` counts from here).
    pub epoch: SystemTime,
    pub membership: Snapshot,
}

impl JobState {
    /// The encoding stores keep (bincode, at most [`MAX_STATE_BYTES`]).
    pub fn encode(&self) -> Result<Vec<u8>, StoreError> {
        let bytes = bincode::serde::encode_to_vec(self, bincode_config())
            .map_err(|e| StoreError::Encode { why: e.to_string() })?;
        if bytes.len() > MAX_STATE_BYTES {
            return Err(StoreError::TooLarge { bytes: bytes.len() });
        }
        Ok(bytes)
    }

    /// Decodes what [`JobState::encode`] made; anything else is
    /// [`StoreError::Corrupt`], naming `key` (where the bytes were found).
    pub fn decode(key: &str, bytes: &[u8]) -> Result<Self, StoreError> {
        let corrupt = |why: String| StoreError::Corrupt {
            key: key.to_owned(),
            why,
        };
        let (state, used) = bincode::serde::decode_from_slice(bytes, bincode_config())
            .map_err(|e| corrupt(e.to_string()))?;
        if used != bytes.len() {
            return Err(corrupt(format!("{} bytes left over", bytes.len() - used)));
        }
        Ok(state)
    }

    /// How long the job has run at `now` (zero if the clock went back).
    pub fn age(&self, now: SystemTime) -> Duration {
        now.duration_since(self.epoch).unwrap_or_default()
    }
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_STATE_BYTES>()
}

/// Why a store could not load or commit.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The state moved on since `expected` (`None`: the store was expected to
    /// be empty): another coordinator leads this job now.
    #[error("fenced: expected {}, the store is at {}", show(*expected), show(*found))]
    Fenced {
        expected: Option<Revision>,
        found: Option<Revision>,
    },
    #[error("the job state at {key} cannot be read: {why}")]
    Corrupt { key: String, why: String },
    #[error("the job state cannot be encoded: {why}")]
    Encode { why: String },
    #[error("the job state is {bytes} bytes, more than a store keeps ({MAX_STATE_BYTES})")]
    TooLarge { bytes: usize },
    #[error("the store at {at} cannot be reached: {why}")]
    Unavailable { at: String, why: String },
    /// This coordinator no longer leads the job (its election key `key` is
    /// gone or another's): it must not write, and steps down.
    #[error("deposed: this coordinator no longer leads the job ({key} is not its election key)")]
    Deposed { key: String },
}

impl StoreError {
    /// Whether another coordinator may lead the job now: this one must step
    /// down rather than act.
    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced { .. } | StoreError::Deposed { .. })
    }
}

fn show(r: Option<Revision>) -> String {
    r.map_or_else(|| "no state".to_owned(), |r| r.to_string())
}

/// Durable job state, with commits fenced by revision. Object-safe (a job
/// picks its store at run time); commits are rare (one per generation or
/// blacklisting), so boxed futures cost nothing that matters.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The last committed state and its revision; `None` for a new job.
    fn load(&self) -> BoxFuture<'_, Result<Option<(Revision, JobState)>, StoreError>>;

    /// Replaces the state if the store is still at `expected`; the new
    /// revision, or [`StoreError::Fenced`].
    fn commit<'a>(
        &'a self,
        expected: Option<Revision>,
        state: &'a JobState,
    ) -> BoxFuture<'a, Result<Revision, StoreError>>;
}

/// A store shared with others in this process: the coordinators of an
/// in-process cluster test, one taking the job over from the other.
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn load(&self) -> BoxFuture<'_, Result<Option<(Revision, JobState)>, StoreError>> {
        (**self).load()
    }

    fn commit<'a>(
        &'a self,
        expected: Option<Revision>,
        state: &'a JobState,
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        (**self).commit(expected, state)
    }
}
