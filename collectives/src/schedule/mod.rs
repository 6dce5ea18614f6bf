//! Which bytes go to whom at each step: pure functions of (world size, rank, ...),
//! with no I/O, tested by simulating every rank.

mod doubling;
mod hierarchical;
mod partition;
mod ring;
mod tree;

pub use doubling::{DoublingPlan, Fold, recursive_doubling};
pub use hierarchical::{CrossStep, HierarchicalLayout};
pub use partition::{block_ranges, even_counts, segment, segment_count};
pub use ring::{RingStep, allgather_ring, allreduce_ring, reducescatter_ring};
pub use tree::{Links, binomial_tree, chain, dissemination_rounds, pairwise_exchange};

#[cfg(test)]
pub(crate) const TEST_WORLDS: [usize; 8] = [1, 2, 3, 4, 5, 7, 8, 13];
