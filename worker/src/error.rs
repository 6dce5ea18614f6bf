//! The worker's errors at its public boundary.

use std::time::Duration;

use collectives::TransportError;
use control::HandshakeError;

use crate::engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{var} {why}")]
    Environment { var: &'static str, why: String },
    #[error("cannot reach the coordinator at {0}")]
    Unreachable(std::net::SocketAddr),
    #[error("authentication with the coordinator failed: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    #[error("no assignment from the coordinator within {0:?}")]
    NoAssignment(Duration),
    #[error("data plane: {0}")]
    DataPlane(#[from] TransportError),
    #[error("{0}")]
    Io(String),
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
