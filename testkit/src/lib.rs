//! Support for the property tests of every decoder that reads from the
//! network or from a user's file: [`check`] runs a property over [`CASES`]
//! inputs drawn from a seeded RNG whose seed it prints (and takes from
//! `ELASTICRUN_TEST_SEED` to replay a run); [`bytes`] and [`text`] draw those
//! inputs from random bytes and from valid encodings changed by a few
//! [`Mutation`]s (bit flips, truncation, forged length fields, inserted,
//! removed and repeated bytes).
//!
//! Only tests depend on this crate.

use std::fmt::Debug;
use std::time::Instant;

pub use proptest;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

/// Inputs each property is checked on.
pub const CASES: u32 = 100_000;

/// Names the seed of a run to replay.
pub const SEED_VAR: &str = "ELASTICRUN_TEST_SEED";

/// The seed when `ELASTICRUN_TEST_SEED` is not set: fixed, so that CI runs
/// the same cases every time.
const DEFAULT_SEED: u64 = 0x0e1a_571c_2026_1121;

/// The seed of this run.
pub fn seed() -> u64 {
    std::env::var(SEED_VAR)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

/// A runner of `cases` cases drawing from the RNG of [`seed`], which keeps
/// no files of failures.
pub fn runner(cases: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        ..Config::default()
    };
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&seed().to_le_bytes());
    }
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// Checks `property` on [`CASES`] values of `strategy`: a panic or an `Err`
/// fails the test with the smallest failing input proptest finds and the seed
/// that replays the run.
pub fn check<S>(name: &str, strategy: S, property: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let seed = seed();
    eprintln!("{name}: {CASES} cases, seed {seed} ({SEED_VAR}={seed} replays them)");
    let started = Instant::now();
    let result = runner(CASES).run(&strategy, property);
    eprintln!("{name}: took {:.2?}", started.elapsed());
    if let Err(e) = result {
        panic!("{name} ({SEED_VAR}={seed}): {e}");
    }
}

/// One change to a valid encoding. Positions are taken modulo the input's
/// length, so every mutation applies to any input.
#[derive(Clone, Debug)]
pub enum Mutation {
    FlipBit {
        at: usize,
        bit: u8,
    },
    SetByte {
        at: usize,
        value: u8,
    },
    /// Keeps the first `keep` bytes.
    Truncate {
        keep: usize,
    },
    /// Writes `value` over `width` bytes at `at`, little- or big-endian: a
    /// forged length or count.
    Length {
        at: usize,
        width: u8,
        value: u64,
        big_endian: bool,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Remove {
        at: usize,
        len: usize,
    },
    /// Copies `len` bytes from `from` to `to`.
    Repeat {
        from: usize,
        len: usize,
        to: usize,
    },
}

impl Mutation {
    pub fn apply(&self, b: &mut Vec<u8>) {
        let n = b.len();
        let at = |i: usize| if n == 0 { 0 } else { i % n };
        match *self {
            Mutation::FlipBit { at: i, bit } if n > 0 => b[at(i)] ^= 1 << (bit % 8),
            Mutation::SetByte { at: i, value } if n > 0 => b[at(i)] = value,
            Mutation::Truncate { keep } => b.truncate(keep % (n + 1)),
            Mutation::Length {
                at: i,
                width,
                value,
                big_endian,
            } => {
                let width = usize::from(width).clamp(1, 8);
                let all = if big_endian {
                    value.to_be_bytes()
                } else {
                    value.to_le_bytes()
                };
                let field = if big_endian {
                    &all[8 - width..]
                } else {
                    &all[..width]
                };
                let start = at(i);
                for (k, &byte) in field.iter().enumerate() {
                    match b.get_mut(start + k) {
                        Some(slot) => *slot = byte,
                        None => b.push(byte),
                    }
                }
            }
            Mutation::Insert { at: i, ref bytes } => {
                let start = if n == 0 { 0 } else { i % (n + 1) };
                b.splice(start..start, bytes.iter().copied());
            }
            Mutation::Remove { at: i, len } if n > 0 => {
                let start = at(i);
                let end = start + len.min(n - start);
                b.drain(start..end);
            }
            Mutation::Repeat { from, len, to } if n > 0 => {
                let start = at(from);
                let end = start + len.min(n - start);
                let copy: Vec<u8> = b[start..end].to_vec();
                let to = at(to);
                b.splice(to..to, copy);
            }
            _ => {}
        }
    }
}

/// Lengths and counts that find the edges: bincode's varint markers (251 to
/// 254), the largest values of each width, the control frame limit and
/// around it, and any value at all.
fn forged_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => select(vec![
            0,
            1,
            2,
            0x7f,
            0x80,
            250,
            251,
            252,
            253,
            254,
            255,
            u64::from(u16::MAX),
            u64::from(u32::MAX),
            u64::MAX,
            1 << 20,
            (1 << 20) + 1,
            1 << 31,
            1 << 40,
        ]),
        1 => any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    let flip = (at, any::<u8>()).prop_map(|(at, bit)| Mutation::FlipBit { at, bit });
    let set = (at, any::<u8>()).prop_map(|(at, value)| Mutation::SetByte { at, value });
    let truncate = at.prop_map(|keep| Mutation::Truncate { keep });
    let length = (
        at,
        select(vec![1u8, 2, 4, 8]),
        forged_value(),
        any::<bool>(),
    )
        .prop_map(|(at, width, value, big_endian)| Mutation::Length {
            at,
            width,
            value,
            big_endian,
        });
    let insert =
        (at, vec(any::<u8>(), 1..16)).prop_map(|(at, bytes)| Mutation::Insert { at, bytes });
    let remove = (at, 1usize..32).prop_map(|(at, len)| Mutation::Remove { at, len });
    let repeat =
        (at, 1usize..64, at).prop_map(|(from, len, to)| Mutation::Repeat { from, len, to });
    prop_oneof![
        3 => flip,
        2 => set,
        2 => truncate,
        3 => length,
        1 => insert,
        1 => remove,
        1 => repeat,
    ]
}

/// One of `corpus` (valid encodings), changed by one to five mutations.
pub fn mutated(corpus: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (select(corpus), vec(mutation(), 1..6)).prop_map(|(mut b, ms)| {
        for m in &ms {
            m.apply(&mut b);
        }
        b
    })
}

/// Random bytes (a quarter of the cases) or mutated valid encodings.
pub fn bytes(corpus: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => vec(any::<u8>(), 0..300),
        3 => mutated(corpus),
    ]
}

/// Text for parsers of users' files: any string, strings of the characters
/// the format uses (`alphabet`), and valid texts of `corpus` mutated as
/// bytes (read back lossily, as invalid UTF-8 never reaches a text parser).
pub fn text(corpus: Vec<String>, alphabet: &str) -> impl Strategy<Value = String> {
    let chars: Vec<char> = alphabet.chars().collect();
    let corpus: Vec<Vec<u8>> = corpus.into_iter().map(String::into_bytes).collect();
    prop_oneof![
        1 => any::<String>(),
        2 => vec(select(chars), 0..120).prop_map(|cs| cs.into_iter().collect()),
        4 => mutated(corpus).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use proptest::strategy::ValueTree;

    use super::*;

    #[test]
    fn mutations_apply_to_any_input() {
        let all = [
            Mutation::FlipBit { at: 9, bit: 3 },
            Mutation::SetByte { at: 1, value: 7 },
            Mutation::Truncate { keep: 2 },
            Mutation::Length {
                at: 2,
                width: 4,
                value: 0x0102_0304,
                big_endian: true,
            },
            Mutation::Insert {
                at: 100,
                bytes: vec![1, 2],
            },
            Mutation::Remove { at: 1, len: 100 },
            Mutation::Repeat {
                from: 0,
                len: 100,
                to: 1,
            },
        ];
        for m in &all {
            let mut empty = Vec::new();
            m.apply(&mut empty);
            let mut some = vec![0u8, 1, 2, 3];
            m.apply(&mut some);
        }
        let mut b = vec![0u8; 4];
        all[3].apply(&mut b);
        assert_eq!(b, [0, 0, 1, 2, 3, 4]);
        let mut b = vec![0u8, 1, 2, 3];
        all[0].apply(&mut b);
        assert_eq!(b, [0, 9, 2, 3]);
    }

    #[test]
    fn the_same_seed_draws_the_same_inputs() {
        let draw = || {
            let mut bytes = [0u8; 32];
            bytes[0] = 1;
            let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
            let mut runner = TestRunner::new_with_rng(Config::default(), rng);
            let s = mutated(vec![b"hello".to_vec()]);
            (0..20)
                .map(|_| s.new_tree(&mut runner).map(|t| t.current()).ok())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(), draw());
    }
}
