//! In-process transport: every rank of a world lives in one process and messages are
//! copied between mailboxes. Used to test every collective at many world sizes with
//! no sockets. [`Transport::shutdown`] is a clean departure; dropping a rank's
//! transport (or [`MemTransport::kill`]) looks to the others like a crashed peer.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::end::{Breaker, Ends};
use super::mailbox::Mailbox;
use super::{Transport, check_peer};
use crate::error::{LossCause, TransportError};
use crate::tag::{Generation, Rank, Tag};

/// One rank's end of an in-memory world. Build a world with [`MemTransport::world`].
#[derive(Debug)]
pub struct MemTransport {
    rank: Rank,
    generation: Generation,
    boxes: Arc<Vec<Mailbox>>,
    timeout: Duration,
    departed: bool,
}

impl MemTransport {
    /// Builds `size` connected transports, rank `i` at index `i`. Every `recv` waits at
    /// most `timeout`.
    pub fn world(size: usize, generation: Generation, timeout: Duration) -> Vec<MemTransport> {
        let boxes = mailboxes(size, generation);
        (0..size)
            .map(|rank| MemTransport::of_world(rank, generation, boxes.clone(), timeout))
            .collect()
    }

    /// Rank `rank`'s end of the world whose mailboxes are `boxes`.
    pub(crate) fn of_world(
        rank: Rank,
        generation: Generation,
        boxes: Arc<Vec<Mailbox>>,
        timeout: Duration,
    ) -> MemTransport {
        MemTransport {
            rank,
            generation,
            boxes,
            timeout,
            departed: false,
        }
    }

    fn own(&self) -> &Mailbox {
        &self.boxes[self.rank]
    }

    /// Ends this rank as a crash would (same as dropping it): every other rank's
    /// pending and later waits fail with [`LossCause::Closed`].
    pub fn kill(self) {
        drop(self)
    }

    /// Delivers a message as if `from` had sent it with `tag`, whatever its
    /// generation: lets tests replay a message from an older generation.
    pub fn inject(&self, from: Rank, tag: Tag, payload: &[u8]) {
        self.own()
            .deliver(from, tag, Bytes::copy_from_slice(payload));
    }
}

/// The mailboxes of a world of `size` ranks.
pub(crate) fn mailboxes(size: usize, generation: Generation) -> Arc<Vec<Mailbox>> {
    Arc::new((0..size).map(|_| Mailbox::new(generation)).collect())
}

/// What a mem transport's [`Breaker`] ends: its rank's mailbox.
#[derive(Debug)]
struct OwnMailbox {
    boxes: Arc<Vec<Mailbox>>,
    rank: Rank,
}

impl Ends for OwnMailbox {
    fn end(&self, err: TransportError) {
        self.boxes[self.rank].fail(err);
    }
}

impl Transport for MemTransport {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> usize {
        self.boxes.len()
    }

    fn generation(&self) -> Generation {
        self.generation
    }

    async fn send(&self, to: Rank, tag: Tag, payload: &[u8]) -> Result<(), TransportError> {
        check_peer(self.size(), self.generation, to, tag)?;
        if let Some(e) = self.own().broken() {
            return Err(e);
        }
        self.boxes[to].deliver(self.rank, tag, Bytes::copy_from_slice(payload));
        Ok(())
    }

    async fn recv(&self, from: Rank, tag: Tag) -> Result<Bytes, TransportError> {
        check_peer(self.size(), self.generation, from, tag)?;
        self.own().recv(from, tag, self.timeout).await
    }

    fn arrival(
        &self,
        ops: std::ops::Range<u64>,
    ) -> Option<impl std::future::Future<Output = ()> + Send + '_> {
        Some(self.own().arrival(ops))
    }

    fn stale_refused(&self) -> u64 {
        self.own().stale_refused()
    }

    fn breaker(&self) -> Breaker {
        let own = OwnMailbox {
            boxes: self.boxes.clone(),
            rank: self.rank,
        };
        Breaker::new(self.generation, Arc::new(own))
    }

    async fn shutdown(mut self) {
        self.departed = true;
        for (rank, b) in self.boxes.iter().enumerate() {
            if rank != self.rank {
                b.depart(self.rank);
            }
        }
    }
}

impl Drop for MemTransport {
    fn drop(&mut self) {
        if self.departed {
            return;
        }
        for (rank, b) in self.boxes.iter().enumerate() {
            if rank != self.rank {
                b.peer_lost(self.rank, LossCause::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn messages_flow_between_ranks() {
        let w = MemTransport::world(3, Generation(1), T);
        let tag = Tag::new(Generation(1), 9, 0);
        w[0].send(2, tag, b"hello").await.unwrap();
        assert_eq!(w[2].recv(0, tag).await.unwrap(), "hello");
    }

    #[tokio::test]
    async fn wrong_generation_and_rank_are_refused_locally() {
        let w = MemTransport::world(2, Generation(4), T);
        let old = Tag::new(Generation(3), 0, 0);
        let e = w[0].send(1, old, b"x").await.unwrap_err();
        assert!(
            matches!(e, TransportError::GenerationMismatch { .. }),
            "{e:?}"
        );
        let e = w[0]
            .send(5, Tag::new(Generation(4), 0, 0), b"x")
            .await
            .unwrap_err();
        assert!(
            matches!(e, TransportError::InvalidRank { rank: 5, size: 2 }),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn killed_rank_is_reported_lost_to_every_wait() {
        let mut w = MemTransport::world(3, Generation(0), T);
        let tag = Tag::new(Generation(0), 0, 0);
        w.remove(1).kill();
        let e = w[0].recv(2, tag).await.unwrap_err();
        assert!(
            matches!(
                e,
                TransportError::PeerLost {
                    rank: 1,
                    cause: LossCause::Closed,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(w[1].send(0, tag, b"").await.is_err());
    }

    #[tokio::test]
    async fn ending_the_generation_fails_pending_and_later_calls() {
        let w = MemTransport::world(2, Generation(3), T);
        let tag = Tag::new(Generation(3), 0, 0);
        w[0].send(1, tag, b"early").await.unwrap();
        let pending = w[1].recv(0, Tag::new(Generation(3), 1, 0));
        let breaker = w[1].breaker();
        let (got, ()) = tokio::join!(pending, async {
            tokio::task::yield_now().await;
            breaker.end("peers failed");
        });
        let ended = |e: &TransportError| matches!(e, TransportError::Ended { generation: Generation(3), why } if &**why == "peers failed");
        let e = got.unwrap_err();
        assert!(ended(&e), "{e:?}");
        let e = w[1].send(0, tag, b"late").await.unwrap_err();
        assert!(ended(&e), "{e:?}");
        // Only this rank's generation ended: the peer is untouched.
        w[0].send(1, tag, b"still").await.unwrap();
    }

    #[tokio::test]
    async fn shut_down_rank_departs_cleanly() {
        let mut w = MemTransport::world(3, Generation(0), T);
        let tag = Tag::new(Generation(0), 0, 0);
        w[1].send(0, tag, b"bye").await.unwrap();
        w.remove(1).shutdown().await;
        assert_eq!(w[0].recv(1, tag).await.unwrap(), "bye");
        let e = w[0].recv(1, tag).await.unwrap_err();
        assert!(
            matches!(
                e,
                TransportError::PeerLost {
                    cause: LossCause::Departed,
                    ..
                }
            ),
            "{e:?}"
        );
        w[1].send(0, tag, b"still here").await.unwrap();
        assert_eq!(w[0].recv(2, tag).await.unwrap(), "still here");
    }
}
