//! What the job's keys hold: JSON (readable with `etcdctl get`), at most
//! [`MAX_RECORD_BYTES`], and anything else a [`EtcdError::Corrupt`] naming
//! the key.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::EtcdError;

/// Largest worker or leader record read or written.
pub const MAX_RECORD_BYTES: usize = 4096;

/// A worker's own key: who it is, written on its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRecord {
    /// The pod's name (`POD_NAME`), or the host name outside Kubernetes.
    pub pod: String,
    /// The pod's incarnation (`POD_UID`): a pod recreated under the same
    /// name is another worker.
    pub uid: String,
    /// Its process id.
    pub pid: u32,
    /// The address its data plane listens on (`POD_IP`).
    pub ip: IpAddr,
    /// Set on SIGTERM: it leaves at its next commit (a scale-down).
    pub leaving: bool,
    /// Set when its program has ended its training cleanly.
    #[serde(default)]
    pub finished: bool,
}

/// A coordinator replica's election key: where its control plane listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaderRecord {
    pub addr: SocketAddr,
    /// Which replica it is (host name and process id), for messages.
    pub instance: String,
    /// Whether its control plane speaks TLS (a job on the QUIC or TLS data
    /// plane), so that a pod started with the other transport says so at once.
    #[serde(default)]
    pub tls: bool,
    /// The job's data plane (`tcp`, `quic` or `tls`), so that a pod started
    /// with another one says so at once, even where both speak TLS. Absent
    /// from the records of replicas that did not write it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
}

/// The JSON of `value`, refused when over [`MAX_RECORD_BYTES`].
pub(crate) fn encode<T: Serialize>(key: &str, value: &T) -> Result<Vec<u8>, EtcdError> {
    let bytes = serde_json::to_vec(value).map_err(|e| EtcdError::Corrupt {
        key: key.to_owned(),
        why: e.to_string(),
    })?;
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(EtcdError::TooLarge {
            key: key.to_owned(),
            bytes: bytes.len(),
            max: MAX_RECORD_BYTES,
        });
    }
    Ok(bytes)
}

/// Reads a record found at `key`.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(
    key: &str,
    bytes: &[u8],
) -> Result<T, EtcdError> {
    let corrupt = |why: String| EtcdError::Corrupt {
        key: key.to_owned(),
        why,
    };
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(corrupt(format!(
            "{} bytes, more than the {MAX_RECORD_BYTES} a record may have",
            bytes.len()
        )));
    }
    serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn record() -> WorkerRecord {
        WorkerRecord {
            pod: "train-0".into(),
            uid: "6f1c".into(),
            pid: 7,
            ip: "10.0.0.7".parse().unwrap(),
            leaving: false,
            finished: false,
        }
    }

    #[test]
    fn records_round_trip() {
        let bytes = encode("k", &record()).unwrap();
        assert_eq!(decode::<WorkerRecord>("k", &bytes).unwrap(), record());
    }

    #[test]
    fn garbage_names_its_key() {
        let huge = vec![b' '; MAX_RECORD_BYTES + 1];
        for bad in [&b""[..], b"{", b"[1,2]", b"{\"pod\":1}", &huge] {
            match decode::<WorkerRecord>("/elasticrun/j/workers/n/0", bad) {
                Err(EtcdError::Corrupt { key, .. }) => assert_eq!(key, "/elasticrun/j/workers/n/0"),
                other => panic!("{other:?}"),
            }
        }
        let mut r = record();
        r.pod = "p".repeat(MAX_RECORD_BYTES);
        assert!(matches!(encode("k", &r), Err(EtcdError::TooLarge { .. })));
    }
}
