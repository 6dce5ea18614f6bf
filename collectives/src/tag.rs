//! Message identity: every data-plane message carries a [`Tag`].

use std::fmt;

/// A rank: the position of a process in the current world, `0..size`.
pub type Rank = usize;

/// A membership epoch. Every membership change bumps it; a message from an older
/// generation is refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Generation(pub u64);

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Identity of one point-to-point message: which membership epoch, which collective
/// operation, and which message of that operation's schedule.
///
/// Messages between one pair of ranks with the same tag are delivered in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    pub generation: Generation,
    pub op_id: u64,
    pub step: u32,
}

impl Tag {
    pub fn new(generation: Generation, op_id: u64, step: u32) -> Self {
        Self {
            generation,
            op_id,
            step,
        }
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "generation {} op {} step {}",
            self.generation, self.op_id, self.step
        )
    }
}
