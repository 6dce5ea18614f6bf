//! elasticrun's control plane: the messages between the coordinator and its
//! workers ([`WorkerMsg`], [`CoordinatorMsg`]), their framing ([`FrameCodec`]:
//! length-delimited bincode with explicit limits), and the authentication that
//! opens every connection ([`accept`] / [`connect`], a mutual HMAC challenge over
//! the per-job [`Secret`], after which every frame carries a tag under keys
//! derived from it and both nonces). [`mod@env`] names the variables the launcher sets for
//! every worker.

mod address;
pub mod alloc_env;
mod auth;
#[cfg(feature = "io")]
mod codec;
pub mod env;
mod generation;
#[cfg(feature = "io")]
mod handshake;
#[cfg(feature = "io")]
pub mod limits;
mod messages;
#[cfg(feature = "pki")]
pub mod pki;
mod quoted;
#[cfg(feature = "io")]
mod seal;
mod throttle;
#[cfg(feature = "io")]
pub mod tls;

pub use address::{AddressError, DataEndpoint, LeafPublicKey, PeerAddress};
pub use auth::{DataKey, FrameKeys, Nonce, Proof, Secret, SecretError, nonce};
#[cfg(feature = "io")]
pub use codec::{CodecError, FrameCodec, MAX_FRAME};
pub use generation::Generation;
#[cfg(feature = "io")]
pub use handshake::{CoordinatorLink, HandshakeError, WorkerLink, accept, connect};
pub use messages::{
    Assignment, Autotune, CoordinatorMsg, Knob, Knobs, MAX_LOOKUP, MAX_PENDING_NAME,
    MAX_PENDING_REPORTED, PeerTable, PendingReport, PendingTensor, Registration, TlsGrant, Tuning,
    WorkerMsg, cut_name,
};
pub use quoted::Quoted;
pub use throttle::{Say, Throttle};
