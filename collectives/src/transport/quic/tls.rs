//! rustls and quinn settings of the QUIC data plane: mutual TLS 1.3 under
//! the job's authority only, with the `ring` provider, and a transport tuned
//! for bulk transfer between a few peers.

use std::sync::Arc;
use std::time::Duration;

use control::TlsGrant;
use quinn::congestion::CubicConfig;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::PrivateKeyDer;

use super::QuicConfig;

/// The protocol name both ends offer (ALPN): a QUIC client of anything else
/// fails the handshake.
pub(crate) const ALPN: &[u8] = b"elasticrun-data/1";

/// Why the TLS settings could not be made from a grant.
#[derive(Debug, thiserror::Error)]
#[error("the data plane's TLS settings: {0}")]
pub struct TlsSetupError(String);

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> TlsSetupError + '_ {
    move |e| TlsSetupError(format!("{what}: {e}"))
}

/// ring with TLS 1.3's AES-128-GCM only. rustls offers AES-256-GCM first,
/// whose four more rounds per block cost a bulk transfer more than a tenth of
/// its time; 128-bit keys are TLS 1.3's mandatory suite and QUIC needs it for
/// its Initial packets anyway.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256];
    Arc::new(provider)
}

fn roots(grant: &TlsGrant) -> Result<Arc<RootCertStore>, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    roots
        .add(grant.ca_der())
        .map_err(setup("the job's CA certificate"))?;
    Ok(Arc::new(roots))
}

/// The server side: a peer must present a leaf of the job's authority.
pub(crate) fn server(
    grant: &TlsGrant,
    key: PrivateKeyDer<'static>,
    config: &QuicConfig,
) -> Result<quinn::ServerConfig, TlsSetupError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(grant)?, provider())
        .build()
        .map_err(setup("the client verifier"))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(setup("TLS 1.3"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![grant.leaf_der()], key)
        .map_err(setup("this rank's leaf"))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
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
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(setup("TLS 1.3"))?
        .with_root_certificates(roots(grant)?)
        .with_client_auth_cert(vec![grant.leaf_der()], key)
        .map_err(setup("this rank's leaf"))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
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
