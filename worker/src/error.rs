//! The worker's errors at its public boundary.

use std::time::Duration;

use collectives::TransportError;
use control::HandshakeError;

use crate::engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{var} {why}")]
    Environment { var: &'static str, why: String },
    #[error("cannot reach the coordinator at {at}")]
    Unreachable { at: String },
    #[error("authentication with the coordinator failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// The coordinator said `Stop` or `Leave` before placing this worker.
    #[error("the coordinator refused this worker: {reason}")]
    Refused { reason: String },
    #[error("no assignment from the coordinator within {waited:?}")]
    NoAssignment { waited: Duration },
    #[error("data plane: {0}")]
    DataPlane(#[from] TransportError),
    /// The control connection failed while joining (`what` was being done).
    #[error("{what}: {why}")]
    Control { what: &'static str, why: String },
    /// `--thread-affinity` named a CPU the engine's thread cannot be pinned to.
    #[error("cannot pin the engine's thread to CPU {cpu}: {source}")]
    ThreadAffinity {
        cpu: usize,
        source: crate::affinity::AffinityError,
    },
    /// Joining through etcd (`ELASTICRUN_ETCD`) failed.
    #[cfg(feature = "etcd")]
    #[error(transparent)]
    Etcd(#[from] etcdjob::EtcdError),
    /// No coordinator led the job within the start timeout.
    #[error(
        "no coordinator leads job {job} (none in etcd within {waited:?}): is `elasticrun serve` running?"
    )]
    NoLeader { job: String, waited: Duration },
    /// The leading coordinator's control plane is TLS and this pod's is
    /// not, or the other way round: with `--transport quic` or `tls` the
    /// control plane is TLS, and every pod and replica of a job must say
    /// the same transport.
    #[error(
        "this pod runs with ELASTICRUN_TRANSPORT={ours} but the coordinator {leader} does not: \
         give every pod and `elasticrun serve` the same --transport"
    )]
    TransportMismatch { leader: String, ours: &'static str },
    /// The worker's own runtime could not start.
    #[error("cannot start the worker's runtime: {why}")]
    Runtime { why: String },
}

/// A collective failed; the message names the peer or the disagreement.
pub type Error = EngineError;

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Collective(#[from] EngineError),
    #[error("cannot encode the object: {0}")]
    Encode(String),
    #[error("cannot decode the object: {0}")]
    Decode(String),
}
