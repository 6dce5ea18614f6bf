//! The first bytes on every data-plane connection. The acceptor speaks first,
//! with a fresh nonce; the dialer introduces itself and proves with the job's
//! data key ([`control::DataKey`], derived from the job secret, never on the
//! wire) that it belongs to the job; the acceptor answers with one status
//! byte and, when it accepts, a proof of its own. Both proofs cover the
//! acceptor's nonce and the whole hello, so a recorded hello is refused when
//! played again (the nonce differs), an altered one is refused, and neither
//! side can pass for a member of the job without the key. Nothing of the
//! payload is read before the hello is proven.
//!
//! ```text
//! challenge (acceptor -> dialer, 40 bytes, little-endian):
//! 0      4     6     8
//! | ERDP | ver | 0   | nonce A (32) |
//! hello (dialer -> acceptor, 88 bytes):
//! 0      4     6     8            16     20     24          56
//! | ERDP | ver | 0   | generation | rank | size | nonce D (32) | mac D (32) |
//!   mac D = HMAC-SHA256(key, "dial" | A | hello[0..56])
//! answer: 1 byte, 0 = accepted and then mac A (32 bytes)
//!   = HMAC-SHA256(key, "accept" | A | hello[0..88]); else a `Refusal` code
//! ```

use control::{DataKey, Nonce, Proof};

use crate::tag::{Generation, Rank};

pub(crate) const CHALLENGE_LEN: usize = 40;
pub(crate) const HELLO_LEN: usize = 88;
/// Where the dialer's MAC starts in the hello.
const MAC_AT: usize = 56;
const MAGIC: &[u8; 4] = b"ERDP";
const VERSION: u16 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) generation: Generation,
    pub(crate) rank: Rank,
    pub(crate) size: usize,
}

/// Why an acceptor refused a hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    NotOurProtocol = 1,
    WrongJob = 2,
    WrongGeneration = 3,
    WrongWorld = 4,
    UnexpectedRank = 5,
    /// Connections on demand: both ranks dialed each other at once, and
    /// the higher rank's connection carries the pair.
    Crossed = 6,
}

impl Refusal {
    pub(crate) fn from_code(code: u8) -> Option<Self> {
        [
            Refusal::NotOurProtocol,
            Refusal::WrongJob,
            Refusal::WrongGeneration,
            Refusal::WrongWorld,
            Refusal::UnexpectedRank,
            Refusal::Crossed,
        ]
        .into_iter()
        .find(|r| *r as u8 == code)
    }

    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::NotOurProtocol => "not an elasticrun data-plane hello (magic or version)",
            Refusal::WrongJob => {
                "the peer did not prove it belongs to this job (another job's key, or a replayed \
                 or altered hello)"
            }
            Refusal::WrongGeneration => "peer is in another generation",
            Refusal::WrongWorld => "peer has another world size",
            Refusal::UnexpectedRank => "peer rank is not one this rank accepts",
            Refusal::Crossed => {
                "both ranks dialed each other at once: the higher rank's connection carries the pair"
            }
        }
    }
}

/// Why a dialer gave up on the acceptor's side of the handshake.
pub(crate) const NOT_A_PEER: &str =
    "the peer did not answer as an elasticrun data-plane endpoint (magic or version)";
pub(crate) const UNPROVEN_ACCEPTOR: &str =
    "the peer accepted without proving it belongs to this job (wrong key)";

fn header() -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0..4].copy_from_slice(MAGIC);
    b[4..6].copy_from_slice(&VERSION.to_le_bytes());
    b
}

fn ours(b: &[u8]) -> bool {
    b.len() >= 8 && b[0..8] == header()
}

/// The acceptor's first words: its nonce.
pub(crate) fn challenge(nonce: &Nonce) -> [u8; CHALLENGE_LEN] {
    let mut b = [0u8; CHALLENGE_LEN];
    b[0..8].copy_from_slice(&header());
    b[8..].copy_from_slice(nonce);
    b
}

/// The acceptor's nonce from its challenge; `None` when it is not ours.
pub(crate) fn read_challenge(b: &[u8; CHALLENGE_LEN]) -> Option<Nonce> {
    let mut n = [0u8; 32];
    n.copy_from_slice(&b[8..]);
    ours(b).then_some(n)
}

/// The acceptor's proof that it holds `key`, for the hello it accepted.
pub(crate) fn acceptor_proof(key: &DataKey, a: &Nonce, hello: &[u8; HELLO_LEN]) -> Proof {
    key.mac(&[b"accept", a, hello])
}

/// Whether `proof` is the acceptor's proof for `hello` (in constant time).
pub(crate) fn check_acceptor_proof(
    key: &DataKey,
    a: &Nonce,
    hello: &[u8; HELLO_LEN],
    proof: &[u8],
) -> bool {
    key.verify(&[b"accept", a, hello], proof)
}

impl Hello {
    /// The hello of `rank` of a generation of `size` ranks; an error for a
    /// rank outside it.
    pub(crate) fn of(
        rank: Rank,
        generation: Generation,
        size: usize,
    ) -> Result<Hello, crate::error::TransportError> {
        if rank >= size {
            return Err(crate::error::TransportError::InvalidRank { rank, size });
        }
        Ok(Hello {
            generation,
            rank,
            size,
        })
    }

    /// This hello, proven with `key` for the acceptor whose nonce is `a`;
    /// `d` is the dialer's own nonce.
    pub(crate) fn encode(&self, key: &DataKey, a: &Nonce, d: &Nonce) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..8].copy_from_slice(&header());
        b[8..16].copy_from_slice(&self.generation.0.to_le_bytes());
        b[16..20].copy_from_slice(&(self.rank as u32).to_le_bytes());
        b[20..24].copy_from_slice(&(self.size as u32).to_le_bytes());
        b[24..MAC_AT].copy_from_slice(d);
        let mac = key.mac(&[b"dial", a, &b[..MAC_AT]]);
        b[MAC_AT..].copy_from_slice(&mac);
        b
    }

    /// The hello in `b` if it is ours and proven with `key` for nonce `a`.
    pub(crate) fn decode(b: &[u8; HELLO_LEN], key: &DataKey, a: &Nonce) -> Result<Hello, Refusal> {
        if !ours(b) {
            return Err(Refusal::NotOurProtocol);
        }
        if !key.verify(&[b"dial", a, &b[..MAC_AT]], &b[MAC_AT..]) {
            return Err(Refusal::WrongJob);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut g = [0u8; 8];
        g.copy_from_slice(&b[8..16]);
        Ok(Hello {
            generation: Generation(u64::from_le_bytes(g)),
            rank: u32_at(16) as Rank,
            size: u32_at(20) as usize,
        })
    }

    /// What the acceptor `me` answers to a proven hello from a rank that
    /// `dialers` lets dial it.
    pub(crate) fn check_dialer(&self, me: &Hello, dialers: Dialers) -> Result<(), Refusal> {
        let expected = match dialers {
            Dialers::Above => self.rank > me.rank,
            Dialers::Any => self.rank != me.rank,
        };
        if self.generation != me.generation {
            Err(Refusal::WrongGeneration)
        } else if self.size != me.size {
            Err(Refusal::WrongWorld)
        } else if !expected || self.rank >= me.size {
            Err(Refusal::UnexpectedRank)
        } else {
            Ok(())
        }
    }
}

/// Which ranks may dial an acceptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialers {
    /// Those above it: the full mesh, where higher ranks dial lower ones.
    Above,
    /// Any other: connections made on demand, by whichever end needs one first.
    Any,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(rank: Rank) -> Hello {
        Hello {
            generation: Generation(3),
            rank,
            size: 4,
        }
    }

    fn key(b: u8) -> DataKey {
        DataKey::new([b; 32])
    }

    #[test]
    fn round_trip_with_the_key_and_nonce() {
        let (a, d) = ([1u8; 32], [2u8; 32]);
        let h = hello(2);
        assert_eq!(
            Hello::decode(&h.encode(&key(9), &a, &d), &key(9), &a),
            Ok(h)
        );
        assert_eq!(read_challenge(&challenge(&a)), Some(a));
    }

    #[test]
    fn another_key_a_replay_and_an_altered_hello_are_refused() {
        let (a, d) = ([1u8; 32], [2u8; 32]);
        let b = hello(2).encode(&key(9), &a, &d);
        assert_eq!(Hello::decode(&b, &key(8), &a), Err(Refusal::WrongJob));
        // The same bytes for another acceptor nonce: a replay.
        assert_eq!(
            Hello::decode(&b, &key(9), &[3u8; 32]),
            Err(Refusal::WrongJob)
        );
        for i in [8, 16, 20, 24, MAC_AT, HELLO_LEN - 1] {
            let mut altered = b;
            altered[i] ^= 1;
            assert_eq!(
                Hello::decode(&altered, &key(9), &a),
                Err(Refusal::WrongJob),
                "byte {i}"
            );
        }
        let proof = acceptor_proof(&key(9), &a, &b);
        assert!(check_acceptor_proof(&key(9), &a, &b, &proof));
        assert!(!check_acceptor_proof(&key(8), &a, &b, &proof));
        assert!(!check_acceptor_proof(&key(9), &[3u8; 32], &b, &proof));
    }

    #[test]
    fn garbage_is_not_our_protocol() {
        let k = key(9);
        assert_eq!(
            Hello::decode(&[b'G'; HELLO_LEN], &k, &[0; 32]),
            Err(Refusal::NotOurProtocol)
        );
        assert_eq!(read_challenge(&[b'G'; CHALLENGE_LEN]), None);
        let mut old = challenge(&[0; 32]);
        old[4] = 1; // version 1
        assert_eq!(read_challenge(&old), None);
    }

    #[test]
    fn acceptor_checks_generation_world_and_rank() {
        let me = hello(1);
        assert_eq!(hello(2).check_dialer(&me, Dialers::Above), Ok(()));
        assert_eq!(
            hello(1).check_dialer(&me, Dialers::Above),
            Err(Refusal::UnexpectedRank)
        );
        assert_eq!(
            hello(0).check_dialer(&me, Dialers::Above),
            Err(Refusal::UnexpectedRank)
        );
        assert_eq!(
            hello(4).check_dialer(&me, Dialers::Above),
            Err(Refusal::UnexpectedRank)
        );
        assert_eq!(hello(0).check_dialer(&me, Dialers::Any), Ok(()));
        assert_eq!(hello(3).check_dialer(&me, Dialers::Any), Ok(()));
        assert_eq!(
            hello(1).check_dialer(&me, Dialers::Any),
            Err(Refusal::UnexpectedRank),
            "itself"
        );
        assert_eq!(
            hello(4).check_dialer(&me, Dialers::Any),
            Err(Refusal::UnexpectedRank)
        );
        let old = Hello {
            generation: Generation(2),
            ..hello(2)
        };
        assert_eq!(
            old.check_dialer(&me, Dialers::Above),
            Err(Refusal::WrongGeneration)
        );
        let wider = Hello {
            size: 5,
            ..hello(2)
        };
        assert_eq!(
            wider.check_dialer(&me, Dialers::Above),
            Err(Refusal::WrongWorld)
        );
        for r in [
            Refusal::NotOurProtocol,
            Refusal::WrongJob,
            Refusal::WrongGeneration,
            Refusal::WrongWorld,
            Refusal::UnexpectedRank,
        ] {
            assert_eq!(Refusal::from_code(r as u8), Some(r));
        }
        assert_eq!(Refusal::from_code(0), None);
    }
}
