//! Message identity: every data-plane message carries a [`Tag`].

use std::fmt;

/// A rank: the position of a process in the current world, `0..size`.
pub type Rank = usize;

/// A membership epoch: the one type control messages, the membership core and
/// the data plane share (defined in `control`).
pub use control::Generation;

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
