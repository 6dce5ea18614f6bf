//! quinn settings of the QUIC data plane: the TLS settings of
//! [`crate::transport::tls::settings`] for QUIC, and a transport tuned for
//! bulk transfer between a few peers.

use std::sync::Arc;
use std::time::Duration;

use control::TlsGrant;
use quinn::congestion::CubicConfig;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls_pki_types::PrivateKeyDer;

use super::QuicConfig;
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

/// quinn's transport settings for bulk transfer between ranks, with packets
/// of up to `payload` bytes ([`super::path`]).
pub(crate) fn transport(config: &QuicConfig, payload: u16) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    let window = VarInt::from_u64(config.stream_window_bytes).unwrap_or(VarInt::MAX);
    t.stream_receive_window(window)
        .receive_window(VarInt::MAX)
        .send_window(config.stream_window_bytes.saturating_mul(2))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .max_concurrent_bidi_streams(VarInt::from_u32(4))
        .keep_alive_interval(Some(config.idle_timeout / 4))
        .initial_rtt(Duration::from_millis(1));
    // A silent peer (killed: UDP says nothing) is lost after the idle timeout.
    t.max_idle_timeout(config.idle_timeout.try_into().ok());
    t.initial_mtu(config.initial_mtu.min(payload).max(1200));
    let mut mtu = MtuDiscoveryConfig::default();
    mtu.upper_bound(payload);
    t.mtu_discovery_config(Some(mtu));
    t.enable_segmentation_offload(payload <= super::path::GSO_MAX_PACKET);
    let mut cubic = CubicConfig::default();
    cubic.initial_window(config.initial_window_bytes);
    t.congestion_controller_factory(Arc::new(cubic));
    Arc::new(t)
}
