//! [`MemoryStore`]: the job state in this process, encoded as a remote store
//! would keep it, so that what is committed is exactly what a resume reads.

use std::sync::Mutex;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::{JobState, Revision, Store, StoreError};

/// The key [`StoreError::Corrupt`] names for this store.
const KEY: &str = "memory:job-state";

/// A store that lives as long as the coordinator process (jobs whose
/// coordinator is the launcher itself).
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<Option<(Revision, Vec<u8>)>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the stored bytes as they are, for tests of what a store
    /// holding garbage does.
    pub fn put_raw(&self, revision: Revision, bytes: Vec<u8>) {
        *self.lock() = Some((revision, bytes));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Revision, Vec<u8>)>> {
        // A panic while holding this lock cannot leave the Option half-written.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Store for MemoryStore {
    fn load(&self) -> BoxFuture<'_, Result<Option<(Revision, JobState)>, StoreError>> {
        let loaded = match &*self.lock() {
            None => Ok(None),
            Some((rev, bytes)) => JobState::decode(KEY, bytes).map(|s| Some((*rev, s))),
        };
        async move { loaded }.boxed()
    }

    fn commit<'a>(
        &'a self,
        expected: Option<Revision>,
        state: &'a JobState,
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        let done = state.encode().and_then(|bytes| {
            let mut slot = self.lock();
            let found = slot.as_ref().map(|(r, _)| *r);
            if found != expected {
                return Err(StoreError::Fenced { expected, found });
            }
            let next = Revision(found.map_or(1, |r| r.0 + 1));
            *slot = Some((next, bytes));
            Ok(next)
        });
        async move { done }.boxed()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::{Duration, SystemTime};

    use elastic::{SlotId, Snapshot};

    use super::*;

    fn state(generation: u64) -> JobState {
        JobState {
            epoch: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            membership: Snapshot {
                generation: elastic::Generation(generation),
                resets: 1,
                members: vec![SlotId::new("a", 0), SlotId::new("b", 1)],
                next_order: 3,
                hosts: Vec::new(),
            },
        }
    }

    #[tokio::test]
    async fn commits_are_fenced_by_revision() {
        let store = MemoryStore::new();
        assert!(store.load().await.unwrap().is_none());
        let r1 = store.commit(None, &state(1)).await.unwrap();
        assert_eq!(r1, Revision(1));
        let r2 = store.commit(Some(r1), &state(2)).await.unwrap();
        assert_eq!(store.load().await.unwrap(), Some((r2, state(2))));
        // A coordinator that read r1 (or nothing) is behind: fenced, and the
        // state is left as it was.
        for stale in [Some(r1), None] {
            match store.commit(stale, &state(9)).await {
                Err(StoreError::Fenced { expected, found }) => {
                    assert_eq!((expected, found), (stale, Some(r2)));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(store.load().await.unwrap(), Some((r2, state(2))));
    }

    #[tokio::test]
    async fn garbage_in_the_store_is_an_error_naming_it() {
        let store = MemoryStore::new();
        for bytes in [vec![0xff; 7], Vec::new(), {
            let mut b = state(1).encode().unwrap();
            b.push(0);
            b
        }] {
            store.put_raw(Revision(4), bytes);
            let e = store.load().await.unwrap_err();
            assert!(
                matches!(&e, StoreError::Corrupt { key, .. } if key == KEY),
                "{e}"
            );
        }
        // A forged huge length prefix fails without allocating it.
        store.put_raw(Revision(5), vec![0xfc, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            store.load().await,
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn age_counts_from_the_epoch() {
        let s = state(1);
        assert_eq!(
            s.age(s.epoch + Duration::from_secs(5)),
            Duration::from_secs(5)
        );
        assert_eq!(s.age(s.epoch - Duration::from_secs(5)), Duration::ZERO);
    }
}
