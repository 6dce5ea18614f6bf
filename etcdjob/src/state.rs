//! The requests of the leader's job-state store (the store itself is the
//! coordinator's `EtcdStore`).

use etcd_client::Client;

use crate::{EtcdError, timed};

/// Reads `key`: its mod revision and value, `None` when it does not exist.
pub async fn timed_get(c: &mut Client, key: &str) -> Result<Option<(u64, Vec<u8>)>, EtcdError> {
    let got = timed("reading the job state", c.get(key, None)).await?;
    Ok(got.kvs().first().map(|kv| {
        (
            u64::try_from(kv.mod_revision()).unwrap_or(0),
            kv.value().to_vec(),
        )
    }))
}

/// Runs a transaction with [`REQUEST_TIMEOUT`].
pub async fn timed_txn(
    c: &mut Client,
    txn: etcd_client::Txn,
) -> Result<etcd_client::TxnResponse, EtcdError> {
    timed("committing the job state", c.txn(txn)).await
}

/// From a failed commit whose `or_else` read the state key, then the leader
/// key: the state's mod revision (`None`: no state), and whether the leader
/// key still has create revision `epoch`.
pub fn fenced_found(r: &etcd_client::TxnResponse, epoch: i64) -> (Option<u64>, bool) {
    let mut gets = r.op_responses().into_iter().filter_map(|op| match op {
        etcd_client::TxnOpResponse::Get(g) => Some(g),
        _ => None,
    });
    let state = gets.next().and_then(|g| {
        g.kvs()
            .first()
            .map(|kv| u64::try_from(kv.mod_revision()).unwrap_or(0))
    });
    let leads = gets.next().is_some_and(|g| {
        g.kvs()
            .first()
            .is_some_and(|kv| kv.create_revision() == epoch)
    });
    (state, leads)
}
