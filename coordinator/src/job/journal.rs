//! The driver's journal: the job's clock, which goes on across a
//! coordinator restart, and its record in the store, committed before
//! anything durable is acted on.

use std::time::{Duration, SystemTime};

use elastic::membership::Snapshot;
use tokio::time::Instant;

use crate::store::{JobState, Revision, Store, StoreError};

/// How long a commit to the store may take.
pub(super) const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the job's durable state is committed, and since when it runs.
#[derive(Debug)]
pub(super) struct Journal {
    store: Box<dyn Store>,
    /// The revision last read or written there.
    revision: Option<Revision>,
    /// When the job started; the core's clock is the time since.
    epoch: SystemTime,
    /// The job's age when this process took it over (zero for a new job).
    age_at_start: Duration,
    started: Instant,
}

impl Journal {
    /// The journal of a job that started at `epoch` and was `age` old when
    /// this process read it from `store` at `revision` (none: a new job).
    pub(super) fn new(
        store: Box<dyn Store>,
        revision: Option<Revision>,
        epoch: SystemTime,
        age: Duration,
    ) -> Self {
        Self {
            store,
            revision,
            epoch,
            age_at_start: age,
            started: Instant::now(),
        }
    }

    /// Time since the job's epoch: the core's clock.
    pub(super) fn now(&self) -> Duration {
        self.age_at_start.saturating_add(self.started.elapsed())
    }

    /// Commits `membership` (the core's durable facts) within
    /// [`STORE_TIMEOUT`].
    pub(super) async fn record(&mut self, membership: Snapshot) -> Result<(), StoreError> {
        let state = JobState {
            epoch: self.epoch,
            membership,
        };
        let commit = self.store.commit(self.revision, &state);
        let revision = match tokio::time::timeout(STORE_TIMEOUT, commit).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(StoreError::Unavailable {
                    at: format!("{:?}", self.store),
                    why: format!("no answer within {STORE_TIMEOUT:?}"),
                });
            }
        };
        self.revision = Some(revision);
        Ok(())
    }
}
