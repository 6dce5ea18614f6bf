//! A job in etcd, shared by `elasticrun serve` (the coordinator replicas) and
//! the workers that join by themselves (pods): where each thing lives under
//! the job's prefix ([`Keys`]), what is stored there ([`WorkerRecord`],
//! [`LeaderRecord`]), the connection to etcd with its deadlines
//! ([`connect`]), leases kept alive through etcd's outages ([`Lease`]), the
//! leader election ([`campaign`], [`LeaderWatch`]) and the workers' keys
//! ([`claim_slot`], [`PodWatch`]).
//!
//! ```text
//! /elasticrun/<job>/
//!   state                   the job state (generation, members, blacklist, resets): leader only,
//!                           each write a txn on the leader's election key
//!   election/<lease hex>    one per serve replica, on its lease; the lowest create revision leads
//!                           (value: LeaderRecord), that revision is the leader's epoch
//!   workers/<node>/<slot>   one per worker, on the worker's own lease (value: WorkerRecord)
//!   done                    "succeeded" or "failed" once the job is over (leader only)
//! ```
//!
//! Liveness comes from each worker's own lease, never from its connection to
//! a coordinator: a coordinator that dies makes no worker look dead.

mod election;
mod lease;
mod pods;
mod records;
mod session;
mod state;

use std::time::Duration;

pub use election::{Campaign, LeaderWatch, Leadership, campaign};
pub use lease::{Lease, LeaseHealth};
pub use pods::{PodWatch, Pods, claim_slot, finish, reclaim_slot, set_leaving};
pub use records::{LeaderRecord, MAX_RECORD_BYTES, WorkerRecord};
pub use session::{Endpoints, connect};
pub use state::{fenced_found, mark_done, read_done, timed_get, timed_txn};

pub use etcd_client::Client;

/// The shortest lease etcd grants (1.5 election timeouts with its defaults).
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(2);
/// The lease TTL of coordinators and workers when none is given.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);
/// The longest lease TTL accepted.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(3600);

/// A lease TTL as `--lease-ttl` and `ELASTICRUN_LEASE_TTL` give it: seconds,
/// from [`MIN_LEASE_TTL`] to [`MAX_LEASE_TTL`]; the error says why not.
pub fn parse_lease_ttl(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    let (min, max) = (MIN_LEASE_TTL.as_secs_f64(), MAX_LEASE_TTL.as_secs_f64());
    if !secs.is_finite() || secs < min || secs > max {
        return Err(format!(
            "{text} is not from {min} to {max} seconds (etcd grants no lease under {min} s)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// How long one etcd request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Why something in etcd could not be done.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd at {endpoints} cannot be reached within {after:?}: {why}")]
    Unreachable {
        endpoints: String,
        after: Duration,
        why: String,
    },
    #[error("etcd: {what} failed: {why}")]
    Request { what: &'static str, why: String },
    #[error("etcd: {what} did not answer within {after:?}")]
    Timeout { what: &'static str, after: Duration },
    #[error("{key} in etcd cannot be read: {why}")]
    Corrupt { key: String, why: String },
    #[error("the value for {key} is {bytes} bytes, more than {max}")]
    TooLarge {
        key: String,
        bytes: usize,
        max: usize,
    },
    #[error("{what:?} is not a valid {kind}: {why}")]
    Invalid {
        kind: &'static str,
        what: String,
        why: &'static str,
    },
    #[error("the lease {id:x} was lost: {why}")]
    LeaseLost { id: i64, why: String },
}

impl EtcdError {
    pub(crate) fn request(what: &'static str) -> impl FnOnce(etcd_client::Error) -> EtcdError {
        move |e| EtcdError::Request {
            what,
            why: e.to_string(),
        }
    }
}

/// Runs one etcd request with [`REQUEST_TIMEOUT`].
pub(crate) async fn timed<T>(
    what: &'static str,
    f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => r.map_err(EtcdError::request(what)),
        Err(_) => Err(EtcdError::Timeout {
            what,
            after: REQUEST_TIMEOUT,
        }),
    }
}

/// The longest node name (a Kubernetes node name is a DNS subdomain).
pub const MAX_NODE_NAME: usize = 253;

/// A job's name: 1 to 63 of `a-z`, `0-9`, `-`, `_`, `.` (a Kubernetes
/// label value fits), so that it is one path segment of every key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobName(String);

impl JobName {
    pub fn new(name: &str) -> Result<Self, EtcdError> {
        valid_segment("job name", name, 63)?;
        Ok(JobName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for JobName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks that `s` can be one segment of a key.
pub(crate) fn valid_segment(kind: &'static str, s: &str, max: usize) -> Result<(), EtcdError> {
    let bad = |why| EtcdError::Invalid {
        kind,
        what: s.to_owned(),
        why,
    };
    if s.is_empty() || s.len() > max {
        return Err(bad(if max == 63 {
            "it must be 1 to 63 characters long"
        } else {
            "it must be 1 to 253 characters long"
        }));
    }
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c);
    if !s.chars().all(ok) || s == "." || s == ".." {
        return Err(bad("only a-z, 0-9, '-', '_' and '.' may be used"));
    }
    Ok(())
}

/// Where a job's keys are: everything under `/elasticrun/<job>/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(job: &JobName) -> Self {
        Keys {
            prefix: format!("/elasticrun/{job}/"),
        }
    }

    /// Every key of the job starts with this.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The job state the leader commits.
    pub fn state(&self) -> String {
        format!("{}state", self.prefix)
    }

    /// Set by the leader when the job is over: `succeeded` or `failed`.
    pub fn done(&self) -> String {
        format!("{}done", self.prefix)
    }

    /// The election's keys start with this.
    pub fn election(&self) -> String {
        format!("{}election/", self.prefix)
    }

    /// Every worker's key starts with this.
    pub fn workers(&self) -> String {
        format!("{}workers/", self.prefix)
    }

    /// The keys of the workers on `node` start with this.
    pub fn workers_on(&self, node: &str) -> String {
        format!("{}workers/{node}/", self.prefix)
    }

    /// The key of the worker on `slot` of `node`.
    pub fn worker(&self, node: &str, slot: u32) -> String {
        format!("{}workers/{node}/{slot}", self.prefix)
    }

    /// `(node, slot)` of a worker key, or `None` if `key` is not one.
    pub fn parse_worker(&self, key: &str) -> Option<(String, u32)> {
        let rest = key.strip_prefix(&self.workers())?;
        let (node, slot) = rest.split_once('/')?;
        valid_segment("node name", node, MAX_NODE_NAME).ok()?;
        if slot.starts_with('+') || (slot.len() > 1 && slot.starts_with('0')) {
            return None;
        }
        Some((node.to_owned(), slot.parse().ok()?))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn job_names_are_one_key_segment() {
        for good in ["a", "train-7", "x.y_z", &"a".repeat(63)] {
            assert!(JobName::new(good).is_ok(), "{good}");
        }
        for bad in ["", "A", "a/b", "..", "a b", &"a".repeat(64), "é"] {
            let e = JobName::new(bad).unwrap_err();
            assert!(matches!(e, EtcdError::Invalid { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn worker_keys_round_trip_and_garbage_is_not_one() {
        let keys = Keys::new(&JobName::new("j").unwrap());
        let k = keys.worker("node-1", 3);
        assert_eq!(k, "/elasticrun/j/workers/node-1/3");
        assert_eq!(keys.parse_worker(&k), Some(("node-1".into(), 3)));
        for bad in [
            "/elasticrun/j/workers/node-1",
            "/elasticrun/j/workers/node-1/x",
            "/elasticrun/j/workers/node-1/03",
            "/elasticrun/j/workers/node-1/+3",
            "/elasticrun/j/workers/Node/3",
            "/elasticrun/j/workers/n/3/4",
            "/elasticrun/k/workers/n/3",
        ] {
            assert_eq!(keys.parse_worker(bad), None, "{bad}");
        }
    }
}
