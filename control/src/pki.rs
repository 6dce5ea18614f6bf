//! The job's trust root for TLS: a certificate authority per job
//! ([`JobCa`]), derived from the job secret, and a leaf certificate per
//! worker and generation ([`TlsGrant`]) for the key the worker made itself
//! ([`LeafKey`]: only its public half ever leaves the worker).
//!
//! ```text
//!  worker: LeafKey::generate ── public key in its QUIC address ──> coordinator
//!  coordinator: JobCa::from_secret(secret).issue(public key, rank, generation)
//!           ── TlsGrant { ca, leaf } in the Assignment ──> worker
//! ```
//! Every key is Ed25519. A peer's certificate must chain to the job's
//! authority and be within its validity; the leaf's name says whose it is
//! (`r<rank>.g<generation>.elasticrun`), and a dialer asks for exactly its
//! peer's name, so a leaf of another rank, generation or job is refused.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ED25519, PublicKeyData, SignatureAlgorithm,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::address::LeafPublicKey;
use crate::auth::Secret;
use crate::generation::Generation;
use crate::messages::TlsGrant;

/// Why a key or certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot {what}: {source}")]
pub struct PkiError {
    what: &'static str,
    #[source]
    source: rcgen::Error,
}

fn pki(what: &'static str) -> impl FnOnce(rcgen::Error) -> PkiError {
    move |source| PkiError { what, source }
}

impl PublicKeyData for LeafPublicKey {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &PKCS_ED25519
    }
}

/// A worker's TLS key: made on the worker, kept there.
pub struct LeafKey {
    pkcs8: Vec<u8>,
    public: LeafPublicKey,
}

impl std::fmt::Debug for LeafKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LeafKey({:?})", self.public)
    }
}

impl LeafKey {
    /// A fresh key from the system's random source.
    pub fn generate() -> Result<Self, PkiError> {
        let pair = KeyPair::generate_for(&PKCS_ED25519).map_err(pki("make a TLS key"))?;
        let public = pair.public_key_raw().try_into().map_err(|_| PkiError {
            what: "make a TLS key",
            source: rcgen::Error::KeyGenerationUnavailable,
        })?;
        Ok(LeafKey {
            pkcs8: pair.serialize_der(),
            public: LeafPublicKey(public),
        })
    }

    /// The half that is sent to the coordinator.
    pub fn public(&self) -> LeafPublicKey {
        self.public
    }

    /// The private key, for rustls.
    pub fn private_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.pkcs8.clone()))
    }
}

impl TlsGrant {
    pub fn ca_der(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.ca.clone())
    }

    pub fn leaf_der(&self) -> CertificateDer<'static> {
        CertificateDer::from(self.leaf.clone())
    }
}

/// The name in the leaf of `rank` in `generation`, which its peers ask for.
pub fn leaf_name(rank: usize, generation: Generation) -> String {
    format!("r{rank}.g{}.elasticrun", generation.0)
}

/// How long an issued leaf is valid: from an hour back (clocks of hosts
/// differ a little) to a day on. A leaf is used only to set up the
/// connections of its generation, right after it is issued; every later
/// generation brings a new one.
pub const LEAF_BACKDATE: Duration = Duration::from_secs(3600);
pub const LEAF_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The job's certificate authority.
pub struct JobCa {
    issuer: Issuer<'static, KeyPair>,
    cert: Vec<u8>,
}

impl std::fmt::Debug for JobCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobCa(..)")
    }
}

/// PKCS#8 v1 wrapping of an Ed25519 private key's 32-byte seed (RFC 8410).
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

impl JobCa {
    /// The authority of the job whose secret is `secret`: the same for
    /// every holder of the secret.
    pub fn from_secret(secret: &Secret) -> Result<Self, PkiError> {
        let mut pkcs8 = ED25519_PKCS8_PREFIX.to_vec();
        pkcs8.extend_from_slice(&secret.ca_seed());
        let key =
            KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(pkcs8), &PKCS_ED25519)
                .map_err(pki("derive the job's CA key"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(pki("describe the job's CA"))?;
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "elasticrun job authority");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .map_err(pki("sign the job's CA certificate"))?;
        Ok(JobCa {
            cert: cert.der().to_vec(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The authority's certificate, which every worker trusts.
    pub fn certificate(&self) -> &[u8] {
        &self.cert
    }

    /// The grant of `rank` in `generation` for the worker whose key is
    /// `key`, valid as [`LEAF_LIFETIME`] says from now.
    pub fn grant(
        &self,
        key: &LeafPublicKey,
        rank: usize,
        generation: Generation,
    ) -> Result<TlsGrant, PkiError> {
        let now = SystemTime::now();
        let from = now.checked_sub(LEAF_BACKDATE).unwrap_or(now);
        self.grant_valid(key, rank, generation, from, now + LEAF_LIFETIME)
    }

    /// A grant valid from `not_before` to `not_after` (tests make expired
    /// ones).
    pub fn grant_valid(
        &self,
        key: &LeafPublicKey,
        rank: usize,
        generation: Generation,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<TlsGrant, PkiError> {
        self.certify(key, &leaf_name(rank, generation), not_before, not_after)
    }

    /// A grant of a leaf named `name` for `key`, valid from `not_before` to
    /// `not_after`.
    pub fn certify(
        &self,
        key: &LeafPublicKey,
        name: &str,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<TlsGrant, PkiError> {
        let mut params =
            CertificateParams::new(vec![name.to_owned()]).map_err(pki("describe a leaf"))?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        let leaf = params
            .signed_by(key, &self.issuer)
            .map_err(pki("sign a leaf certificate"))?;
        Ok(TlsGrant {
            ca: self.cert.clone(),
            leaf: leaf.der().to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_of_one_secret_derive_one_authority_and_other_jobs_another() {
        let s = Secret::generate().unwrap();
        let a = JobCa::from_secret(&s).unwrap();
        let b = JobCa::from_secret(&s).unwrap();
        assert_eq!(a.certificate(), b.certificate());
        let other = JobCa::from_secret(&Secret::generate().unwrap()).unwrap();
        assert_ne!(a.certificate(), other.certificate());
    }

    #[test]
    fn a_grant_carries_the_authority_and_a_leaf_for_the_key() {
        let s = Secret::generate().unwrap();
        let ca = JobCa::from_secret(&s).unwrap();
        let key = LeafKey::generate().unwrap();
        let g = ca.grant(&key.public(), 3, Generation(7)).unwrap();
        assert_eq!(g.ca, ca.certificate());
        // The leaf holds the worker's public key and its name.
        let has = |needle: &[u8]| g.leaf.windows(needle.len()).any(|w| w == needle);
        assert!(has(&key.public().0));
        assert!(has(leaf_name(3, Generation(7)).as_bytes()));
        assert!(!has(leaf_name(3, Generation(8)).as_bytes()));
        assert_ne!(LeafKey::generate().unwrap().public(), key.public());
    }
}
