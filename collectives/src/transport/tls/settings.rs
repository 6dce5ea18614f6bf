//! rustls settings of the encrypted data planes, QUIC's and TLS over TCP's:
//! mutual TLS 1.3 under the job's authority only, with the `ring` provider
//! and AES-128-GCM.

use std::sync::Arc;

use control::TlsGrant;
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::PrivateKeyDer;

/// The protocol name both ends offer (ALPN): a client of anything else
/// fails the handshake.
pub(crate) const ALPN: &[u8] = b"elasticrun-data/1";

/// Why the TLS settings could not be made from a grant.
#[derive(Debug, thiserror::Error)]
#[error("the data plane's TLS settings: {0}")]
pub struct TlsSetupError(String);

pub(crate) fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> TlsSetupError + '_ {
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
) -> Result<rustls::ServerConfig, TlsSetupError> {
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
    // Every connection is made once per generation: nothing to resume.
    tls.send_tls13_tickets = 0;
    Ok(tls)
}

/// The client side: the peer must present the leaf its name says, of the
/// job's authority, and this rank presents its own.
pub(crate) fn client(
    grant: &TlsGrant,
    key: PrivateKeyDer<'static>,
) -> Result<rustls::ClientConfig, TlsSetupError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(setup("TLS 1.3"))?
        .with_root_certificates(roots(grant)?)
        .with_client_auth_cert(vec![grant.leaf_der()], key)
        .map_err(setup("this rank's leaf"))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.resumption = rustls::client::Resumption::disabled();
    Ok(tls)
}
