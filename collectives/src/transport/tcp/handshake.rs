//! The first bytes on every data-plane connection: the dialing rank introduces
//! itself and the accepting rank answers with one status byte.
//!
//! ```text
//! hello (32 bytes, little-endian):
//! 0      4     6     8          16          24     28     32
//! | ERDP | ver | 0   | job token | generation | rank | size |
//! answer: 1 byte, 0 = accepted, else a `Refusal` code
//! ```

use crate::tag::{Generation, Rank};

pub(crate) const HELLO_LEN: usize = 32;
const MAGIC: &[u8; 4] = b"ERDP";
const VERSION: u16 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) job_token: u64,
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
}

impl Refusal {
    pub(crate) fn from_code(code: u8) -> Option<Self> {
        [
            Refusal::NotOurProtocol,
            Refusal::WrongJob,
            Refusal::WrongGeneration,
            Refusal::WrongWorld,
            Refusal::UnexpectedRank,
        ]
        .into_iter()
        .find(|r| *r as u8 == code)
    }

    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::NotOurProtocol => "not an elasticrun data-plane hello (magic or version)",
            Refusal::WrongJob => "job token differs: the peer belongs to another job",
            Refusal::WrongGeneration => "peer is in another generation",
            Refusal::WrongWorld => "peer has another world size",
            Refusal::UnexpectedRank => "peer rank is not one this rank accepts",
        }
    }
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.job_token.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.0.to_le_bytes());
        b[24..28].copy_from_slice(&(self.rank as u32).to_le_bytes());
        b[28..32].copy_from_slice(&(self.size as u32).to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8; HELLO_LEN]) -> Result<Hello, Refusal> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        if &b[0..4] != MAGIC || u16::from_le_bytes([b[4], b[5]]) != VERSION {
            return Err(Refusal::NotOurProtocol);
        }
        Ok(Hello {
            job_token: u64_at(8),
            generation: Generation(u64_at(16)),
            rank: u32_at(24) as Rank,
            size: u32_at(28) as usize,
        })
    }

    /// What the acceptor `me` answers to `peer`'s hello. Only higher ranks dial.
    pub(crate) fn check_against(&self, me: &Hello) -> Result<(), Refusal> {
        if self.job_token != me.job_token {
            Err(Refusal::WrongJob)
        } else if self.generation != me.generation {
            Err(Refusal::WrongGeneration)
        } else if self.size != me.size {
            Err(Refusal::WrongWorld)
        } else if self.rank <= me.rank || self.rank >= me.size {
            Err(Refusal::UnexpectedRank)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(rank: Rank) -> Hello {
        Hello {
            job_token: 42,
            generation: Generation(3),
            rank,
            size: 4,
        }
    }

    #[test]
    fn round_trip() {
        let h = hello(2);
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn garbage_is_not_our_protocol() {
        assert_eq!(
            Hello::decode(&[b'G'; HELLO_LEN]),
            Err(Refusal::NotOurProtocol)
        );
    }

    #[test]
    fn acceptor_checks_job_generation_world_and_rank() {
        let me = hello(1);
        assert_eq!(hello(2).check_against(&me), Ok(()));
        assert_eq!(hello(1).check_against(&me), Err(Refusal::UnexpectedRank));
        assert_eq!(hello(0).check_against(&me), Err(Refusal::UnexpectedRank));
        assert_eq!(hello(4).check_against(&me), Err(Refusal::UnexpectedRank));
        let other_job = Hello {
            job_token: 1,
            ..hello(2)
        };
        assert_eq!(other_job.check_against(&me), Err(Refusal::WrongJob));
        let old = Hello {
            generation: Generation(2),
            ..hello(2)
        };
        assert_eq!(old.check_against(&me), Err(Refusal::WrongGeneration));
        let wider = Hello {
            size: 5,
            ..hello(2)
        };
        assert_eq!(wider.check_against(&me), Err(Refusal::WrongWorld));
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
