//! The workers' keys: a worker claims the lowest free slot of its node on its
//! own lease ([`claim_slot`]), marks itself leaving on SIGTERM
//! ([`set_leaving`]); the leader follows them all ([`PodWatch`]): listed,
//! then watched from the revision listed, listed again after an error or a
//! compaction, so that no change is missed across an etcd restart.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::records::{decode, encode};
use crate::{EtcdError, Keys, Lease, MAX_NODE_NAME, WorkerRecord, timed, valid_segment};

/// Every registered worker: `(node, slot)` → its record.
pub type Pods = BTreeMap<(String, u32), WorkerRecord>;

/// How many slots of one node a claim tries before giving up.
const MAX_SLOTS_PER_NODE: u32 = 4096;

/// Claims the lowest slot of `node` that no live worker holds, on `lease`.
pub async fn claim_slot(
    client: &Client,
    keys: &Keys,
    node: &str,
    lease: &Lease,
    record: &WorkerRecord,
) -> Result<u32, EtcdError> {
    valid_segment("node name", node, MAX_NODE_NAME)?;
    let mut c = client.clone();
    let opts = GetOptions::new().with_prefix().with_keys_only();
    for _ in 0..16 {
        let taken = timed(
            "listing the node's workers",
            c.get(keys.workers_on(node), Some(opts.clone())),
        )
        .await?;
        let used: BTreeSet<u32> = taken
            .kvs()
            .iter()
            .filter_map(|kv| keys.parse_worker(&String::from_utf8_lossy(kv.key())))
            .map(|(_, s)| s)
            .collect();
        let Some(slot) = (0..MAX_SLOTS_PER_NODE).find(|s| !used.contains(s)) else {
            break;
        };
        if put_if_free(client, keys, (node, slot), lease, record, "claiming a slot").await? {
            return Ok(slot);
        }
        // Another worker of the node took it meanwhile: look again.
    }
    Err(EtcdError::Request {
        what: "claiming a slot",
        why: format!("no free slot on {node} after 16 tries"),
    })
}

/// Claims `slot` of `node` again, on a new `lease`, for a worker whose
/// lease etcd ended while it lived on (etcd stalled longer than the lease):
/// `true` if the key was free and is this worker's again, `false` if
/// another worker holds it now.
pub async fn reclaim_slot(
    client: &Client,
    keys: &Keys,
    node: &str,
    slot: u32,
    lease: &Lease,
    record: &WorkerRecord,
) -> Result<bool, EtcdError> {
    let what = "claiming the slot again";
    put_if_free(client, keys, (node, slot), lease, record, what).await
}

/// Puts `record` on `lease` as the worker key of `(node, slot)` if no
/// worker holds that key: whether it did.
async fn put_if_free(
    client: &Client,
    keys: &Keys,
    (node, slot): (&str, u32),
    lease: &Lease,
    record: &WorkerRecord,
    what: &'static str,
) -> Result<bool, EtcdError> {
    let key = keys.worker(node, slot);
    let value = encode(&key, record)?;
    let txn = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.as_str(),
            value,
            Some(PutOptions::new().with_lease(lease.id())),
        )]);
    let mut c = client.clone();
    Ok(timed(what, c.txn(txn)).await?.succeeded())
}

/// Rewrites this worker's own key (still on its lease) as leaving.
pub async fn set_leaving(
    client: &Client,
    keys: &Keys,
    node: &str,
    slot: u32,
    lease: &Lease,
    record: &WorkerRecord,
) -> Result<(), EtcdError> {
    let leaving = WorkerRecord {
        leaving: true,
        ..record.clone()
    };
    let own = OwnKey {
        keys,
        node,
        slot,
        lease,
    };
    own.put(client, &leaving, true, "marking the worker leaving")
        .await
}

/// Rewrites this worker's own key with `record` (its training finished) off
/// its lease: the record outlives the process, so that a coordinator that
/// leads only later still sees that this worker finished.
pub async fn finish(
    client: &Client,
    keys: &Keys,
    node: &str,
    slot: u32,
    lease: &Lease,
    record: &WorkerRecord,
) -> Result<(), EtcdError> {
    let own = OwnKey {
        keys,
        node,
        slot,
        lease,
    };
    own.put(client, record, false, "recording the worker finished")
        .await
}

/// A worker's own key, written only while it is still on the worker's lease.
struct OwnKey<'a> {
    keys: &'a Keys,
    node: &'a str,
    slot: u32,
    lease: &'a Lease,
}

impl OwnKey<'_> {
    /// Puts `record`, on the lease (`on_lease`) or off it.
    async fn put(
        &self,
        client: &Client,
        record: &WorkerRecord,
        on_lease: bool,
        what: &'static str,
    ) -> Result<(), EtcdError> {
        let key = self.keys.worker(self.node, self.slot);
        let value = encode(&key, record)?;
        let opts = on_lease.then(|| PutOptions::new().with_lease(self.lease.id()));
        let txn = Txn::new()
            .when([Compare::lease(
                key.as_str(),
                CompareOp::Equal,
                self.lease.id(),
            )])
            .and_then([TxnOp::put(key.as_str(), value, opts)]);
        let mut c = client.clone();
        timed(what, c.txn(txn)).await?;
        Ok(())
    }
}

/// Every registered worker, kept current by a task (ended on drop).
#[derive(Debug)]
pub struct PodWatch {
    rx: watch::Receiver<Option<Pods>>,
    task: JoinHandle<()>,
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodWatch {
    pub fn start(client: &Client, keys: &Keys) -> Self {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(follow(client.clone(), keys.clone(), tx));
        PodWatch { rx, task }
    }

    /// A receiver of every change (`None` until the first listing).
    pub fn subscribe(&self) -> watch::Receiver<Option<Pods>> {
        self.rx.clone()
    }
}

async fn follow(client: Client, keys: Keys, tx: watch::Sender<Option<Pods>>) {
    let mut failing = false;
    let mut garbage = BTreeSet::new();
    loop {
        let r = list_and_watch(&client, &keys, &tx, &mut garbage, &mut failing).await;
        if let Err(e) = r {
            if !failing {
                tracing::warn!(%e, "etcd: cannot follow the workers' keys; retrying");
                failing = true;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

async fn list_and_watch(
    client: &Client,
    keys: &Keys,
    tx: &watch::Sender<Option<Pods>>,
    garbage: &mut BTreeSet<String>,
    failing: &mut bool,
) -> Result<(), EtcdError> {
    let mut c = client.clone();
    let got = timed(
        "listing the workers",
        c.get(keys.workers(), Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let rev = got.header().map_or(0, |h| h.revision());
    let mut pods = Pods::new();
    for kv in got.kvs() {
        if let Some((id, r)) = read(keys, kv.key(), kv.value(), garbage) {
            pods.insert(id, r);
        }
    }
    publish(tx, &pods);
    if std::mem::take(failing) {
        tracing::warn!("etcd: following the workers' keys again");
    }
    let opts = WatchOptions::new()
        .with_prefix()
        .with_start_revision(rev + 1);
    let mut stream = timed("watching the workers", c.watch(keys.workers(), Some(opts))).await?;
    loop {
        let msg = stream
            .message()
            .await
            .map_err(EtcdError::request("watching the workers"))?;
        let Some(r) = msg else { return Ok(()) };
        if r.canceled() {
            // Compacted past our revision, or the watch ended: list again.
            return Ok(());
        }
        for e in r.events() {
            let Some(kv) = e.kv() else { continue };
            match e.event_type() {
                EventType::Put => {
                    if let Some((id, rec)) = read(keys, kv.key(), kv.value(), garbage) {
                        pods.insert(id, rec);
                    }
                }
                EventType::Delete => {
                    let key = String::from_utf8_lossy(kv.key()).into_owned();
                    garbage.remove(&key);
                    if let Some(id) = keys.parse_worker(&key) {
                        pods.remove(&id);
                    }
                }
            }
        }
        publish(tx, &pods);
    }
}

fn publish(tx: &watch::Sender<Option<Pods>>, pods: &Pods) {
    tx.send_if_modified(|cur| {
        let changed = cur.as_ref() != Some(pods);
        if changed {
            *cur = Some(pods.clone());
        }
        changed
    });
}

/// A worker key and its record, or `None` (said once per key) for anything
/// else found under `workers/`.
fn read(
    keys: &Keys,
    key: &[u8],
    value: &[u8],
    garbage: &mut BTreeSet<String>,
) -> Option<((String, u32), WorkerRecord)> {
    let key = String::from_utf8_lossy(key).into_owned();
    let parsed = match keys.parse_worker(&key) {
        Some(id) => decode::<WorkerRecord>(&key, value).map(|r| (id, r)),
        None => Err(EtcdError::Corrupt {
            key: key.clone(),
            why: "not a worker key (workers/<node>/<slot>)".into(),
        }),
    };
    match parsed {
        Ok(p) => {
            garbage.remove(&key);
            Some(p)
        }
        Err(e) => {
            if garbage.insert(key) {
                tracing::warn!("ignored: {e}");
            }
            None
        }
    }
}
