//! Mutual challenge-response over the job secret, before any other frame:
//!
//! ```text
//!  coordinator                               worker
//!      ── Challenge { nonce: c } ─────────────>
//!      <──────────── Prove { nonce: w, mac: HMAC(k, "worker" | c | w) }
//!      ── Proven { mac: HMAC(k, "coordinator" | c | w) } ──>
//! ```
//! Both proofs bind both nonces, so neither can be replayed, and the secret never
//! crosses the wire. MACs are compared in constant time.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The per-job secret. Never printed: `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

pub type Nonce = [u8; 32];
pub type Proof = [u8; 32];

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("the secret must be 64 hexadecimal digits")]
    BadHex,
    #[error("the system's random source failed: {0}")]
    Random(String),
}

fn random32() -> Result<[u8; 32], SecretError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| SecretError::Random(e.to_string()))?;
    Ok(b)
}

impl Secret {
    /// A fresh random secret for a new job.
    pub fn generate() -> Result<Self, SecretError> {
        random32().map(Secret)
    }

    /// The form handed to workers (environment or ssh stdin, never a command line).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn from_hex(s: &str) -> Result<Self, SecretError> {
        let s = s.trim();
        if s.len() != 64 || !s.is_ascii() {
            return Err(SecretError::BadHex);
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| SecretError::BadHex)?;
        }
        Ok(Secret(out))
    }

    fn mac(&self, role: &[u8], c: &Nonce, w: &Nonce) -> Hmac<Sha256> {
        // HMAC takes keys of any length, so this cannot fail for 32 bytes.
        let mut m =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        m.update(role);
        m.update(c);
        m.update(w);
        m
    }

    pub fn worker_proof(&self, c: &Nonce, w: &Nonce) -> Proof {
        self.mac(b"elasticrun worker", c, w)
            .finalize()
            .into_bytes()
            .into()
    }

    pub fn coordinator_proof(&self, c: &Nonce, w: &Nonce) -> Proof {
        self.mac(b"elasticrun coordinator", c, w)
            .finalize()
            .into_bytes()
            .into()
    }

    pub fn check_worker(&self, c: &Nonce, w: &Nonce, proof: &Proof) -> bool {
        self.mac(b"elasticrun worker", c, w)
            .verify_slice(proof)
            .is_ok()
    }

    pub fn check_coordinator(&self, c: &Nonce, w: &Nonce, proof: &Proof) -> bool {
        self.mac(b"elasticrun coordinator", c, w)
            .verify_slice(proof)
            .is_ok()
    }
}

/// The keys of one connection's frames after the handshake, one per
/// direction: bound to the secret and both nonces, so a frame of another
/// connection or of the other direction never verifies.
#[derive(Clone, PartialEq, Eq)]
pub struct FrameKeys {
    pub to_worker: [u8; 32],
    pub to_coordinator: [u8; 32],
}

impl std::fmt::Debug for FrameKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameKeys(..)")
    }
}

impl Secret {
    /// The frame keys of the connection whose handshake used `c` and `w`.
    pub fn frame_keys(&self, c: &Nonce, w: &Nonce) -> FrameKeys {
        let key = |role: &[u8]| self.mac(role, c, w).finalize().into_bytes().into();
        FrameKeys {
            to_worker: key(b"elasticrun frames to the worker"),
            to_coordinator: key(b"elasticrun frames to the coordinator"),
        }
    }
}

/// The key with which a job's data-plane connections prove that they belong
/// to the job: derived from the secret and the job's data token
/// ([`Secret::data_key`]), so it never crosses the wire. `Debug` shows
/// nothing of it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DataKey([u8; 32]);

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DataKey(..)")
    }
}

impl DataKey {
    /// A key from its bytes (a benchmark or a test without a job secret).
    pub fn new(bytes: [u8; 32]) -> Self {
        DataKey(bytes)
    }

    fn hmac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC takes keys of any length, so this cannot fail for 32 bytes.
        let mut m =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!());
        for p in parts {
            m.update(p);
        }
        m
    }

    /// The MAC of `parts`, in order, under this key.
    pub fn mac(&self, parts: &[&[u8]]) -> Proof {
        self.hmac(parts).finalize().into_bytes().into()
    }

    /// Whether `proof` is the MAC of `parts` (compared in constant time).
    pub fn verify(&self, parts: &[&[u8]], proof: &[u8]) -> bool {
        self.hmac(parts).verify_slice(proof).is_ok()
    }
}

impl Secret {
    /// The data-plane key of the job whose data token is `data_token`.
    pub fn data_key(&self, data_token: u64) -> DataKey {
        // HMAC keyed with the secret, as every other key of the job.
        DataKey(DataKey(self.0).mac(&[b"elasticrun data plane", &data_token.to_le_bytes()]))
    }
}

impl Secret {
    /// The seed of the job's certificate authority's key: every holder of the
    /// secret (the coordinator, each `elasticrun serve` replica) derives the
    /// same authority, so none has to hand its key to another.
    #[cfg(feature = "pki")]
    pub(crate) fn ca_seed(&self) -> [u8; 32] {
        DataKey(self.0).mac(&[b"elasticrun job certificate authority"])
    }
}

/// A fresh nonce.
pub fn nonce() -> Result<Nonce, SecretError> {
    random32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_keys_differ_by_secret_and_token_and_verify_their_own_macs() {
        let s = Secret::generate().unwrap();
        let k = s.data_key(7);
        assert_eq!(k, s.data_key(7));
        assert_ne!(k, s.data_key(8));
        assert_ne!(k, Secret::generate().unwrap().data_key(7));
        let mac = k.mac(&[b"a", b"bc"]);
        assert!(k.verify(&[b"a", b"bc"], &mac));
        assert!(!k.verify(&[b"ab", b"d"], &mac));
        assert!(!s.data_key(8).verify(&[b"a", b"bc"], &mac));
        assert!(!k.verify(&[b"a", b"bc"], &mac[..31]));
        assert_eq!(format!("{k:?}"), "DataKey(..)");
    }

    #[test]
    fn hex_round_trip_and_refusals() {
        let s = Secret::generate().unwrap();
        assert_eq!(Secret::from_hex(&s.to_hex()).unwrap(), s);
        assert_eq!(Secret::from_hex("abc"), Err(SecretError::BadHex));
        assert_eq!(Secret::from_hex(&"zz".repeat(32)), Err(SecretError::BadHex));
        assert_eq!(format!("{s:?}"), "Secret(..)");
    }

    #[test]
    fn proofs_bind_secret_role_and_both_nonces() {
        let k = Secret::generate().unwrap();
        let other = Secret::generate().unwrap();
        let (c, w) = (nonce().unwrap(), nonce().unwrap());
        let p = k.worker_proof(&c, &w);
        assert!(k.check_worker(&c, &w, &p));
        assert!(!other.check_worker(&c, &w, &p), "another job's secret");
        assert!(
            !k.check_coordinator(&c, &w, &p),
            "a worker proof is not a coordinator proof"
        );
        assert!(
            !k.check_worker(&nonce().unwrap(), &w, &p),
            "replayed against a new challenge"
        );
        assert!(!k.check_worker(&c, &nonce().unwrap(), &p));
        assert!(k.check_coordinator(&c, &w, &k.coordinator_proof(&c, &w)));
    }

    #[test]
    fn frame_keys_differ_by_direction_connection_and_secret() {
        let k = Secret::generate().unwrap();
        let (c, w) = (nonce().unwrap(), nonce().unwrap());
        let keys = k.frame_keys(&c, &w);
        assert_eq!(keys, k.frame_keys(&c, &w));
        assert_ne!(keys.to_worker, keys.to_coordinator);
        assert_ne!(keys, k.frame_keys(&nonce().unwrap(), &w));
        assert_ne!(keys, Secret::generate().unwrap().frame_keys(&c, &w));
        assert_ne!(keys.to_worker, k.worker_proof(&c, &w));
        assert_eq!(format!("{keys:?}"), "FrameKeys(..)");
    }
}
