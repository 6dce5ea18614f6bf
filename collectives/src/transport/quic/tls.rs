//! quinn settings of the QUIC data plane: the TLS settings of
//! [`crate::transport::tls::settings`] for QUIC, with the transport of
//! [`super::path::transport`].

use std::sync::Arc;

use control::TlsGrant;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls_pki_types::PrivateKeyDer;

use super::QuicConfig;
use super::path::transport;
use crate::transport::tls::settings::{self, TlsSetupError, setup};

/// The server side: a peer must present a leaf of the job's authority.
pub(crate) fn server(
    grant: &TlsGrant,
    key: PrivateKeyDer<'static>,
    config: &QuicConfig,
) -> Result<quinn::ServerConfig, TlsSetupError> {
    let tls = settings::server(grant, key)?;
    let crypto = QuicServerConfig::try_from(tls).map_err(setup("QUIC's cipher suites"))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(transport(config, config.max_udp_payload));
    // Every peer is known: no address validation round trip.
    server.max_incoming(64);
    Ok(server)
}

/// The client side: the peer must present the leaf its name says, of the
/// job's authority, and this rank presents its own.
pub(crate) fn client(
    grant: &TlsGrant,
    key: PrivateKeyDer<'static>,
    config: &QuicConfig,
) -> Result<quinn::ClientConfig, TlsSetupError> {
    let tls = settings::client(grant, key)?;
    let crypto = QuicClientConfig::try_from(tls).map_err(setup("QUIC's cipher suites"))?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(transport(config, config.max_udp_payload));
    Ok(client)
}
