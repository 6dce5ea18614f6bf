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

/// Runs a transaction with [`REQUEST_TIMEOUT`](crate::REQUEST_TIMEOUT).
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

/// Records that the job is over (`ok`: it succeeded), guarded by the
/// leadership that decided it.
pub async fn mark_done(
    c: &mut Client,
    keys: &crate::Keys,
    leadership: &crate::Leadership,
    ok: bool,
) -> Result<(), EtcdError> {
    let value = if ok { "succeeded" } else { "failed" };
    let txn = etcd_client::Txn::new()
        .when([leadership.guard()])
        .and_then([etcd_client::TxnOp::put(keys.done(), value, None)]);
    timed("recording the end of the job", c.txn(txn)).await?;
    Ok(())
}

/// Whether the job is over: `Some(true)` succeeded, `Some(false)` failed.
pub async fn read_done(c: &mut Client, keys: &crate::Keys) -> Result<Option<bool>, EtcdError> {
    let got = timed("reading whether the job is over", c.get(keys.done(), None)).await?;
    let Some(kv) = got.kvs().first() else {
        return Ok(None);
    };
    match kv.value() {
        b"succeeded" => Ok(Some(true)),
        b"failed" => Ok(Some(false)),
        other => Err(EtcdError::Corrupt {
            key: keys.done(),
            why: format!(
                "{:?} is neither \"succeeded\" nor \"failed\"",
                String::from_utf8_lossy(other)
            ),
        }),
    }
}
