//! How a hierarchical allreduce cuts its buffer: first into one block per local
//! rank (the block that local rank owns after the intra-host reduce-scatter),
//! then each block into one piece per host (the piece's block in the cross-host
//! ring among the ranks with that local rank).
//!
//! ```text
//!  2 local ranks x 3 hosts, 14 elements:
//!  local blocks      [        7         |        7         ]   even_counts(14, 2)
//!  cross pieces      [  3  |  2  |  2   |  3  |  2  |  2   ]   even_counts(7, 3) each
//! ```
//! An element's reduction order depends only on the local block and cross
//! piece it falls in, so a fused buffer that puts piece (c, d) of every tensor
//! where piece (c, d) of a lone tensor would be gives each element the value it
//! gets alone.

use super::partition::even_counts;

/// The cross-host step of a hierarchical allreduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossStep {
    /// Ring reduce-scatter + allgather over the pieces.
    Ring,
    /// Recursive doubling over the whole block (the pieces only add up).
    Doubling,
}

/// `pieces[c][d]`: elements that local rank `c` owns after the intra-host step
/// and that cross rank `d` owns half-way through the cross-host ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HierarchicalLayout {
    pub pieces: Vec<Vec<usize>>,
    pub cross: CrossStep,
}

impl HierarchicalLayout {
    /// `len` elements as a lone tensor cuts them: `even_counts` at both levels.
    pub fn even(len: usize, local_size: usize, cross_size: usize, cross: CrossStep) -> Self {
        Self {
            pieces: even_counts(len, local_size)
                .into_iter()
                .map(|c| even_counts(c, cross_size))
                .collect(),
            cross,
        }
    }

    /// Elements of each local rank's block.
    pub fn local_counts(&self) -> Vec<usize> {
        self.pieces.iter().map(|p| p.iter().sum()).collect()
    }

    /// Elements in all.
    pub fn len(&self) -> usize {
        self.pieces.iter().flatten().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example() {
        let l = HierarchicalLayout::even(14, 2, 3, CrossStep::Ring);
        assert_eq!(l.pieces, vec![vec![3, 2, 2], vec![3, 2, 2]]);
        assert_eq!(l.local_counts(), [7, 7]);
        assert_eq!(l.len(), 14);
    }

    #[test]
    fn pieces_cover_the_buffer_at_every_size() {
        for len in [0, 1, 2, 5, 6, 7, 100, 4099] {
            for (local, cross) in [(2, 2), (3, 2), (2, 3), (4, 5)] {
                let l = HierarchicalLayout::even(len, local, cross, CrossStep::Doubling);
                assert_eq!(l.pieces.len(), local);
                assert!(l.pieces.iter().all(|p| p.len() == cross));
                assert_eq!(l.len(), len, "{len} over {local}x{cross}");
                assert_eq!(l.local_counts(), even_counts(len, local));
            }
        }
    }
}
