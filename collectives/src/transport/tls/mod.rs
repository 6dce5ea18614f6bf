//! TLS over TCP: the TCP mesh ([`crate::transport::tcp`]) with every
//! connection a mutual TLS 1.3 session under the job's certificate
//! authority ([`control::pki`]), the same trust as the QUIC data plane's
//! ([`settings`]), the stream transport's frames inside
//! ([`crate::transport::stream`]) and the data-plane handshake inside those.
//!
//! Beside QUIC, this is the encrypted data plane for links of ordinary
//! (1,500-byte) frames: TCP keeps the kernel's segmentation and receive
//! offloads, and TLS seals records of 16 KiB where QUIC seals and
//! acknowledges every packet in user space (docs/BENCHMARKS.md).
//!
//! Set-up, as QUIC's: every rank binds a [`TlsEndpoint`] (which makes its
//! TLS key) and publishes its address and public key; the coordinator's
//! grant (the job's CA certificate and this rank's leaf) arrives with the
//! assignment ([`TlsEndpoint::prepare`]); then [`TlsEndpoint::connect`]
//! builds the mesh, higher ranks dialing lower ones and asking for the exact
//! name of the peer's leaf. A peer on the same host is offered shared
//! memory inside the session ([`crate::transport::shm`]), as over TCP: its
//! frames then never reach a socket, so there is nothing to encrypt.

use tokio::io::{ReadHalf, WriteHalf};
use tokio_rustls::TlsStream;
use tokio_util::either::Either;

use super::shm::{ShmRead, ShmWrite};
use super::stream::StreamTransport;
use super::tcp::PolledTcp;

mod mesh;
pub(crate) mod settings;

pub use mesh::TlsEndpoint;
pub use settings::TlsSetupError;

/// The reading half of a TLS mesh's link to one peer: its TLS session
/// (`Left`), or, for a peer on the same host, a shared-memory link whose
/// doorbell is the session's socket (`Right`).
pub type TlsRead = Either<ReadHalf<TlsStream<PolledTcp>>, ShmRead>;

/// The writing half of a TLS mesh's link to one peer (see [`TlsRead`]).
pub type TlsWrite = Either<WriteHalf<TlsStream<PolledTcp>>, ShmWrite>;

/// One rank's end of a TLS mesh. Built by [`TlsEndpoint::connect`]; its
/// settings are the TCP data plane's ([`crate::TcpConfig`]).
pub type TlsTransport = StreamTransport<TlsRead, TlsWrite>;
