//! [`EtcdStore`]: the job state in etcd, at `/elasticrun/<job>/state`, each
//! commit a transaction that holds only while this coordinator still leads
//! (its election key has the create revision it won with) and the state is
//! still at the revision it read last. The revision is the key's etcd mod
//! revision.

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use etcdjob::{Keys, Leadership};
use futures::FutureExt;
use futures::future::BoxFuture;

use super::{JobState, MAX_STATE_BYTES, Revision, Store, StoreError};

/// A job's state in etcd, written by its leader only.
#[derive(Clone)]
pub struct EtcdStore {
    client: Client,
    key: String,
    leadership: Leadership,
    endpoints: String,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "etcd {} at {}", self.key, self.endpoints)
    }
}

impl EtcdStore {
    pub fn new(client: Client, keys: &Keys, leadership: Leadership, endpoints: String) -> Self {
        EtcdStore {
            client,
            key: keys.state(),
            leadership,
            endpoints,
        }
    }

    fn unavailable(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable {
            at: self.endpoints.clone(),
            why: e.to_string(),
        }
    }

    async fn load_now(&self) -> Result<Option<(Revision, JobState)>, StoreError> {
        let mut c = self.client.clone();
        let got = etcdjob::timed_get(&mut c, &self.key)
            .await
            .map_err(|e| self.unavailable(e))?;
        let Some((mod_rev, bytes)) = got else {
            return Ok(None);
        };
        if bytes.len() > MAX_STATE_BYTES {
            return Err(StoreError::Corrupt {
                key: self.key.clone(),
                why: format!("{} bytes, more than {MAX_STATE_BYTES}", bytes.len()),
            });
        }
        let state = JobState::decode(&self.key, &bytes)?;
        Ok(Some((Revision(mod_rev), state)))
    }

    async fn commit_now(
        &self,
        expected: Option<Revision>,
        state: &JobState,
    ) -> Result<Revision, StoreError> {
        let bytes = state.encode()?;
        let at = expected.map_or(0, |r| i64::try_from(r.0).unwrap_or(i64::MAX));
        let txn = Txn::new()
            .when([
                self.leadership.guard(),
                Compare::mod_revision(self.key.as_str(), CompareOp::Equal, at),
            ])
            .and_then([TxnOp::put(self.key.as_str(), bytes, None)])
            .or_else([
                TxnOp::get(self.key.as_str(), None),
                TxnOp::get(self.leadership.key.as_str(), None),
            ]);
        let mut c = self.client.clone();
        let r = etcdjob::timed_txn(&mut c, txn)
            .await
            .map_err(|e| self.unavailable(e))?;
        if r.succeeded() {
            let rev = r.header().map_or(0, |h| h.revision());
            return Ok(Revision(u64::try_from(rev).unwrap_or(0)));
        }
        let (found, leads) = etcdjob::fenced_found(&r, self.leadership.epoch);
        if !leads {
            return Err(StoreError::Deposed {
                key: self.leadership.key.clone(),
            });
        }
        Err(StoreError::Fenced {
            expected,
            found: found.map(Revision),
        })
    }
}

impl Store for EtcdStore {
    fn load(&self) -> BoxFuture<'_, Result<Option<(Revision, JobState)>, StoreError>> {
        self.load_now().boxed()
    }

    fn commit<'a>(
        &'a self,
        expected: Option<Revision>,
        state: &'a JobState,
    ) -> BoxFuture<'a, Result<Revision, StoreError>> {
        self.commit_now(expected, state).boxed()
    }
}
