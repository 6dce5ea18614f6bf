//! The chaos tests' random choices (which worker dies, how long a host list
//! lasts) come from one seed per test, printed when the test starts:
//!
//! ```text
//! chaos seed: 6150407914571018443 (ELASTICRUN_TEST_SEED=6150407914571018443 to replay)
//! ```
//!
//! The seed is `ELASTICRUN_TEST_SEED` when set, a fresh one otherwise, so a
//! failure seen once can be run again with the same choices (the timing of
//! the processes still varies from run to run).

use std::hash::BuildHasher;

/// The variable that fixes the seed.
pub const SEED_VAR: &str = "ELASTICRUN_TEST_SEED";

/// A seeded source of choices (SplitMix64: small, and the same numbers on
/// every platform).
#[derive(Clone, Debug)]
pub struct Chaos {
    seed: u64,
    state: u64,
}

impl Chaos {
    /// The seed from [`SEED_VAR`], or a fresh one; prints it on stderr (shown
    /// with the output of a failing test).
    ///
    /// # Panics
    ///
    /// When [`SEED_VAR`] is set to something other than a number.
    pub fn from_env() -> Self {
        let seed = match std::env::var(SEED_VAR) {
            Ok(text) => text
                .trim()
                .parse()
                .unwrap_or_else(|e| panic!("{SEED_VAR}={text:?} is not a u64 seed: {e}")),
            Err(_) => fresh_seed(),
        };
        eprintln!("chaos seed: {seed} ({SEED_VAR}={seed} to replay)");
        Self::with_seed(seed)
    }

    /// Choices from `seed`, printing nothing.
    pub fn with_seed(seed: u64) -> Self {
        Self { seed, state: seed }
    }

    /// The seed these choices come from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next number of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    ///
    /// # Panics
    ///
    /// When `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "a choice among no options");
        self.next_u64() % n
    }
}

/// A seed that changes from run to run and from process to process.
fn fresh_seed() -> u64 {
    std::collections::hash_map::RandomState::new()
        .hash_one((std::process::id(), std::time::SystemTime::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_choices() {
        let (mut a, mut b) = (Chaos::with_seed(123), Chaos::with_seed(123));
        let first: Vec<u64> = (0..16).map(|_| a.below(1000)).collect();
        let again: Vec<u64> = (0..16).map(|_| b.below(1000)).collect();
        assert_eq!(first, again);
        assert_eq!(a.seed(), 123);
        let other: Vec<u64> = {
            let mut c = Chaos::with_seed(124);
            (0..16).map(|_| c.below(1000)).collect()
        };
        assert_ne!(first, other);
    }

    #[test]
    fn choices_stay_below_the_bound_and_reach_each_value() {
        let mut c = Chaos::with_seed(7);
        let mut seen = [0u32; 3];
        for _ in 0..300 {
            let v = c.below(3);
            seen[usize::try_from(v).unwrap()] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }
}
