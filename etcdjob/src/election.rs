//! The leader election of a job's coordinator replicas: each puts
//! `election/<lease hex>` on its own lease; the key with the lowest create
//! revision leads, and that revision is the leader's epoch. Every write of
//! the leader is a transaction guarded by its key's create revision
//! ([`Leadership::guard`]): once its lease is gone, so is its key, and the
//! write fails. Workers follow the leader with a [`LeaderWatch`] and drop a
//! connection to a leader that is no longer the one etcd names.
//!
//! (etcd's own election service does the same over one long `Campaign`
//! call; these few requests, each with a deadline, let a replica stand by
//! through etcd outages and notice its own lease lapsing while it waits.)

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchOptions,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::lease::lost;
use crate::records::{decode, encode};
use crate::{EtcdError, Keys, LeaderRecord, Lease, timed};

/// This replica leads: its election key and epoch.
#[derive(Clone, Debug)]
pub struct Leadership {
    pub key: String,
    /// The create revision of `key`: higher for every later leader.
    pub epoch: i64,
}

impl Leadership {
    /// The condition every write of this leader is guarded by.
    pub fn guard(&self) -> Compare {
        Compare::create_revision(self.key.as_str(), CompareOp::Equal, self.epoch)
    }

    /// Gives the leadership up at once (a graceful stop), best effort.
    pub async fn resign(&self, client: &Client) {
        let txn = Txn::new()
            .when([self.guard()])
            .and_then([TxnOp::delete(self.key.as_str(), None)]);
        let mut c = client.clone();
        if let Err(e) = timed("resigning", c.txn(txn)).await {
            tracing::debug!(%e, "cannot resign; the lease ends the leadership");
        }
    }
}

/// What a replica waiting to lead reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Campaign {
    /// Another replica leads.
    StandingBy { leader: Option<LeaderRecord> },
}

/// Stands for leadership of the job on `lease` with `record`, until this
/// replica leads or its lease is lost; `standing_by` hears who leads
/// meanwhile (once per change).
pub async fn campaign(
    client: &Client,
    keys: &Keys,
    lease: &Lease,
    record: &LeaderRecord,
    mut standing_by: impl FnMut(Campaign),
) -> Result<Leadership, EtcdError> {
    let key = format!("{}{:x}", keys.election(), lease.id());
    let value = encode(&key, record)?;
    let mut c = client.clone();
    // A key this lease holds already (a replica standing again after it
    // stepped down) keeps its create revision, with the new address.
    let put = Txn::new().and_then([TxnOp::put(
        key.as_str(),
        value,
        Some(etcd_client::PutOptions::new().with_lease(lease.id())),
    )]);
    let mut last_said = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = async {
            timed("entering the election", c.clone().txn(put.clone())).await?;
            let mine = timed("reading the election key", c.get(key.as_str(), None)).await?;
            let Some(kv) = mine.kvs().first() else {
                return Err(lost(lease.id(), "its election key is gone".into()));
            };
            let epoch = kv.create_revision();
            let (rev, first) = first_candidate(client, keys).await?;
            if first.as_ref().is_some_and(|(k, _, _)| *k == key) {
                return Ok(Some(Leadership {
                    key: key.clone(),
                    epoch,
                }));
            }
            let leader = first.as_ref().and_then(|(_, _, r)| r.clone());
            if last_said.as_ref() != Some(&leader) {
                standing_by(Campaign::StandingBy {
                    leader: leader.clone(),
                });
                last_said = Some(leader);
            }
            if let Some((k, _, _)) = first {
                wait_deleted(client, &k, rev).await?;
            }
            Ok(None)
        };
        let outcome = tokio::select! {
            r = attempt => r,
            why = lease.lapsed(Duration::ZERO) => return Err(lost(lease.id(), why)),
        };
        match outcome {
            Ok(Some(l)) => return Ok(l),
            Ok(None) => backoff = Duration::from_millis(100),
            Err(e @ EtcdError::LeaseLost { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(%e, "etcd: standing for leadership; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// The lowest election key at the revision read: `(key, its create
/// revision, its record)`; a record that cannot be read is `None` (said).
async fn first_candidate(
    client: &Client,
    keys: &Keys,
) -> Result<(i64, Option<(String, i64, Option<LeaderRecord>)>), EtcdError> {
    let opts = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let mut c = client.clone();
    let got = timed("reading the election", c.get(keys.election(), Some(opts))).await?;
    let rev = got.header().map_or(0, |h| h.revision());
    let first = got.kvs().first().map(|kv| {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let record = match decode::<LeaderRecord>(&key, kv.value()) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(%e, "the election holds a key that is not a coordinator's");
                None
            }
        };
        (key, kv.create_revision(), record)
    });
    Ok((rev, first))
}

/// Waits until `key` is deleted after revision `rev` (or the watch breaks:
/// the caller looks again).
async fn wait_deleted(client: &Client, key: &str, rev: i64) -> Result<(), EtcdError> {
    let mut c = client.clone();
    let opts = WatchOptions::new().with_start_revision(rev + 1);
    let mut stream = timed("watching the leader", c.watch(key, Some(opts))).await?;
    loop {
        match stream.message().await {
            Ok(Some(r)) => {
                if r.canceled()
                    || r.events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete)
                {
                    return Ok(());
                }
            }
            Ok(None) => return Ok(()),
            Err(e) => return Err(EtcdError::request("watching the leader")(e)),
        }
    }
}

/// The leader as workers follow it: `(epoch, record)`, `None` while no
/// coordinator leads. Kept current by a task (ended on drop) that lists,
/// then watches the election, and lists again after any change or error.
#[derive(Debug)]
pub struct LeaderWatch {
    rx: watch::Receiver<Option<(i64, LeaderRecord)>>,
    task: JoinHandle<()>,
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LeaderWatch {
    pub fn start(client: &Client, keys: &Keys) -> Self {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(follow(client.clone(), keys.clone(), tx));
        LeaderWatch { rx, task }
    }

    /// A receiver of every change.
    pub fn subscribe(&self) -> watch::Receiver<Option<(i64, LeaderRecord)>> {
        self.rx.clone()
    }

    pub fn current(&self) -> Option<(i64, LeaderRecord)> {
        self.rx.borrow().clone()
    }

    /// The leader, waiting up to `within` for one.
    pub async fn wait(&self, within: Duration) -> Option<(i64, LeaderRecord)> {
        let mut rx = self.rx.clone();
        let found = tokio::time::timeout(within, rx.wait_for(Option::is_some)).await;
        found.ok()?.ok()?.clone()
    }
}

async fn follow(client: Client, keys: Keys, tx: watch::Sender<Option<(i64, LeaderRecord)>>) {
    let mut failing = false;
    loop {
        let round = async {
            let (rev, first) = first_candidate(&client, &keys).await?;
            let leader = first.and_then(|(_, epoch, r)| Some((epoch, r?)));
            tx.send_if_modified(|cur| {
                let changed = *cur != leader;
                *cur = leader;
                changed
            });
            let mut c = client.clone();
            let opts = WatchOptions::new()
                .with_prefix()
                .with_start_revision(rev + 1);
            let watching = c.watch(keys.election(), Some(opts));
            let mut stream = timed("watching the election", watching).await?;
            // Until the first change (the watch's "created" answer has none).
            loop {
                match stream.message().await {
                    Ok(Some(r)) if r.events().is_empty() && !r.canceled() => continue,
                    Ok(_) => return Ok(()),
                    Err(e) => return Err(EtcdError::request("watching the election")(e)),
                }
            }
        };
        match round.await {
            Ok(()) => {
                if std::mem::take(&mut failing) {
                    tracing::warn!("etcd: following the coordinator election again");
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(%e, "etcd: cannot follow the coordinator election; retrying");
                    failing = true;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}
