//! [`Generation`]: the one membership-epoch type of control messages, the
//! membership core's commands and the data plane's message tags.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A membership epoch. Every membership change bumps it; a message from an
/// older generation is refused. Generation 0 is "not placed yet"; the first
/// assignment is generation 1. On the wire it is its number (serde
/// transparent), so its encoding is that of a `u64`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Generation(pub u64);

impl Generation {
    /// The one after this (saturating: a job never gets near 2^64 generations).
    pub fn next(self) -> Self {
        Generation(self.0.saturating_add(1))
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn encodes_as_its_number_and_counts_up() {
        let cfg = bincode::config::standard();
        let g = Generation(300);
        assert_eq!(
            bincode::serde::encode_to_vec(g, cfg).unwrap(),
            bincode::serde::encode_to_vec(300u64, cfg).unwrap()
        );
        assert_eq!(g.next(), Generation(301));
        assert_eq!(Generation(u64::MAX).next(), Generation(u64::MAX));
        assert_eq!(g.to_string(), "300");
    }
}
