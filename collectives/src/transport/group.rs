//! A sub-group of the world seen as a world of its own, over the world's
//! transport: group rank `i` is world rank `members[i]`.
//!
//! ```text
//!  world ranks     0   1   2   3   4   5
//!  group {1, 3, 5}     0       1       2      send(to: 2) -> world send(to: 5)
//! ```
//! The view maps ranks only; tags pass through unchanged. Keeping a group's
//! messages apart from the world's and from other groups' is the caller's part:
//! the hierarchical collectives give every sub-collective its own op id
//! ([`part_op_id`]). Errors from the world transport name world ranks.

use bytes::Bytes;

use super::Transport;
use crate::error::{CollectiveError, Result, TransportError};
use crate::tag::{Generation, Rank, Tag};

/// A view of `members` (world ranks, each once, this rank among them) of a
/// world transport.
#[derive(Debug)]
pub(crate) struct GroupView<'a, X> {
    world: &'a X,
    members: Vec<Rank>,
    rank: Rank,
}

impl<'a, X: Transport> GroupView<'a, X> {
    /// The view of `members` in that order; `None` when this rank is not one of
    /// them or a member is outside the world.
    pub(crate) fn new(world: &'a X, members: Vec<Rank>) -> Option<Self> {
        if members.iter().any(|&m| m >= world.size()) {
            return None;
        }
        let rank = members.iter().position(|&m| m == world.rank())?;
        Some(Self {
            world,
            members,
            rank,
        })
    }

    fn member(&self, rank: Rank) -> Result<Rank, TransportError> {
        self.members
            .get(rank)
            .copied()
            .ok_or(TransportError::InvalidRank {
                rank,
                size: self.members.len(),
            })
    }
}

impl<X: Transport> Transport for GroupView<'_, X> {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    fn generation(&self) -> Generation {
        self.world.generation()
    }

    fn world_rank(&self, rank: Rank) -> Rank {
        self.members
            .get(rank)
            .map_or(rank, |&m| self.world.world_rank(m))
    }

    async fn send(&self, to: Rank, tag: Tag, payload: &[u8]) -> Result<(), TransportError> {
        let to = self.member(to)?;
        self.world.send(to, tag, payload).await
    }

    async fn recv(&self, from: Rank, tag: Tag) -> Result<Bytes, TransportError> {
        let from = self.member(from)?;
        self.world.recv(from, tag).await
    }

    async fn recv_into(&self, from: Rank, tag: Tag, dst: &mut [u8]) -> Result<(), TransportError> {
        let from = self.member(from)?;
        self.world.recv_into(from, tag, dst).await
    }

    async fn send_parts(&self, to: Rank, tag: Tag, parts: &[&[u8]]) -> Result<(), TransportError> {
        let to = self.member(to)?;
        self.world.send_parts(to, tag, parts).await
    }

    async fn recv_into_parts(
        &self,
        from: Rank,
        tag: Tag,
        dst: &mut [&mut [u8]],
    ) -> Result<(), TransportError> {
        let from = self.member(from)?;
        self.world.recv_into_parts(from, tag, dst).await
    }

    fn stale_refused(&self) -> u64 {
        self.world.stale_refused()
    }

    fn breaker(&self) -> super::end::Breaker {
        self.world.breaker()
    }

    /// Leaves nothing: the world's transport belongs to its owner, who shuts it
    /// down.
    async fn shutdown(self) {}
}

/// Bits of an op id above which a composite operation numbers its parts.
const PART_SHIFT: u32 = 56;

/// The op id of part `part` (1 to 127) of the world operation `op_id`: the
/// part number in the top byte, under the sign bit, so that it never meets a
/// world op id (below 2^56, which a job never exhausts) nor the transports'
/// reserved `u64::MAX`.
pub(crate) fn part_op_id(op_id: u64, part: u8) -> Result<u64> {
    if op_id >> PART_SHIFT != 0 || part == 0 || part > 127 {
        return Err(CollectiveError::OpIdSpace { op_id });
    }
    Ok(op_id | u64::from(part) << PART_SHIFT)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::transport::mem::MemTransport;

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn group_ranks_map_to_world_ranks() {
        let w = MemTransport::world(6, Generation(2), T);
        let members = vec![5, 1, 3];
        let views: Vec<_> = [5, 1, 3]
            .iter()
            .map(|&r| GroupView::new(&w[r], members.clone()).unwrap())
            .collect();
        assert_eq!(
            views.iter().map(Transport::rank).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(views.iter().all(|v| v.size() == 3));
        let tag = Tag::new(Generation(2), 7, 0);
        views[0].send(2, tag, b"to world 3").await.unwrap();
        assert_eq!(w[3].recv(5, tag).await.unwrap(), "to world 3");
        w[1].send(3, tag, b"from world 1").await.unwrap();
        assert_eq!(views[2].recv(1, tag).await.unwrap(), "from world 1");
        assert_eq!(views[1].world_rank(2), 3);
        let e = views[0].send(3, tag, b"").await.unwrap_err();
        assert!(
            matches!(e, TransportError::InvalidRank { rank: 3, size: 3 }),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn a_view_needs_this_rank_and_ranks_of_the_world() {
        let w = MemTransport::world(3, Generation(0), T);
        assert!(GroupView::new(&w[0], vec![1, 2]).is_none());
        assert!(GroupView::new(&w[0], vec![0, 3]).is_none());
        assert!(GroupView::new(&w[0], vec![2, 0]).is_some());
    }

    #[test]
    fn part_op_ids_never_meet_world_ones() {
        let id = part_op_id(41, 1).unwrap();
        assert_ne!(id, 41);
        assert_ne!(part_op_id(41, 2).unwrap(), id);
        assert_ne!(part_op_id(40, 1).unwrap(), id);
        assert!(part_op_id(41, 127).unwrap() < u64::MAX >> 1);
        assert!(part_op_id(1 << 56, 1).is_err());
        assert!(part_op_id(0, 0).is_err());
        assert!(part_op_id(0, 128).is_err());
    }
}
