//! Point-to-point byte messages between ranks.
//!
//! A [`Transport`] serves one generation of one world: `size` ranks, fully connected.
//! Every message is tagged ([`Tag`]); `recv(from, tag)` returns the next message that
//! `from` sent with that tag. Implementations: [`mem`] (in-process, for tests) and
//! [`tcp`] (tokio sockets). An [`Endpoint`](endpoint::Endpoint) builds a generation's transport
//! from the peers' addresses (gloo's `transport::Device`); a new transport is a pair
//! of them in a folder of its own, a variant of [`plane::DataPlane`] and of
//! [`plane_endpoint::PlaneEndpoint`] (what a worker binds, any transport
//! chosen at run time), and a [`control::DataEndpoint`] kind for its address.
//!
//! Failure model: when any peer is lost (connection closed without a goodbye, i/o
//! error, malformed frame, timeout), every pending and later `send`/`recv` fails
//! with that error, except that messages which had already arrived are still
//! handed out. A generation is all-or-nothing; the owner builds a new transport
//! for the next one. A peer that leaves with [`Transport::shutdown`] only fails
//! waits on itself. The owner ends a generation from outside with the
//! transport's [`Breaker`]: every pending and later call then fails with
//! [`TransportError::Ended`].

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::TransportError;
use crate::tag::{Generation, Rank, Tag};

/// Runs `$body` with `$t` bound to what `$value`, a value of `$kind` (an
/// enum with a variant per transport: [`plane::DataPlane`],
/// [`plane_endpoint::PlaneEndpoint`]), holds.
macro_rules! each_plane {
    ($kind:ident, $value:expr, $t:ident => $body:expr) => {
        match $value {
            $kind::Tcp($t) => $body,
            $kind::Quic($t) => $body,
            $kind::Tls($t) => $body,
            $kind::Mem($t) => $body,
        }
    };
}

pub(crate) mod book;
pub(crate) mod end;
pub(crate) mod endpoint;
pub(crate) mod group;
mod mailbox;
pub(crate) mod mem;
pub(crate) mod mem_fabric;
pub(crate) mod patience;
pub(crate) mod pieces;
pub(crate) mod plane;
pub(crate) mod plane_endpoint;
pub(crate) mod quic;
pub(crate) mod shm;
pub(crate) mod stream;
pub(crate) mod tcp;
pub(crate) mod tls;

use end::Breaker;

/// Point-to-point, tagged, ordered byte messages among the ranks of one generation.
pub trait Transport: Send + Sync {
    /// This process's rank.
    fn rank(&self) -> Rank;

    /// Number of ranks.
    fn size(&self) -> usize;

    /// The generation this transport serves; messages of any other are refused.
    fn generation(&self) -> Generation;

    /// The rank that `rank` of this transport has in the whole world: itself,
    /// except for a view of a sub-group. Errors name ranks this way.
    fn world_rank(&self, rank: Rank) -> Rank {
        rank
    }

    /// Sends `payload` to rank `to`. Completes when the bytes have been handed to the
    /// transport (not when the peer has read them).
    fn send(
        &self,
        to: Rank,
        tag: Tag,
        payload: &[u8],
    ) -> impl Future<Output = Result<(), TransportError>> + Send;

    /// Receives the next message from `from` with `tag`.
    fn recv(
        &self,
        from: Rank,
        tag: Tag,
    ) -> impl Future<Output = Result<Bytes, TransportError>> + Send;

    /// Receives the next message from `from` with `tag` into `dst`, which must be
    /// exactly its length ([`TransportError::WrongLength`] otherwise). Transports
    /// that can read a payload straight into `dst` override this copy.
    fn recv_into(
        &self,
        from: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        async move {
            let payload = self.recv(from, tag).await?;
            pieces::scatter_exact(from, tag, &payload, &mut [dst])
        }
    }

    /// Sends the concatenation of `parts` as one message. Transports that
    /// can write the parts one after another override this copy.
    fn send_parts(
        &self,
        to: Rank,
        tag: Tag,
        parts: &[&[u8]],
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        async move {
            match parts {
                [one] => self.send(to, tag, one).await,
                _ => self.send(to, tag, &parts.concat()).await,
            }
        }
    }

    /// Receives the next message from `from` with `tag` across `dst`'s parts,
    /// in order; it must be exactly their total length. Transports that can
    /// read a payload straight into the parts override this copy.
    fn recv_into_parts(
        &self,
        from: Rank,
        tag: Tag,
        dst: &mut [&mut [u8]],
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        async move {
            if let [one] = dst {
                return self.recv_into(from, tag, one).await;
            }
            let payload = self.recv(from, tag).await?;
            pieces::scatter_exact(from, tag, &payload, dst)
        }
    }

    /// Resolves once a message of an operation numbered in `ops` has arrived
    /// here and waits to be received, or a receive would fail at once (a
    /// peer departed or was lost, the generation ended). `None` where this
    /// transport cannot tell: its owner must receive to find out. The
    /// engine waits on it while idle, so that a round another rank starts
    /// wakes it and no rank runs rounds of nothing on a timer.
    fn arrival(&self, ops: Range<u64>) -> Option<impl Future<Output = ()> + Send + '_> {
        let _ = ops;
        None::<std::future::Ready<()>>
    }

    /// Number of incoming messages refused because they carried an older generation.
    fn stale_refused(&self) -> u64;

    /// A handle that ends this generation from outside: every pending and later
    /// call of this rank fails with [`TransportError::Ended`].
    fn breaker(&self) -> Breaker;

    /// Ends this generation now (see [`Transport::breaker`]).
    fn end(&self, why: &str) {
        self.breaker().end(why);
    }

    /// Leaves the generation cleanly: what this rank sent stays receivable, and only
    /// waits on this rank fail. Dropping a transport without it looks like a crash
    /// to the peers (every wait of theirs fails), which is what an abandoned
    /// collective should look like.
    fn shutdown(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized;
}

/// A transport shared by several owners (a data communicator and the engine's
/// negotiation communicator over one mesh): the last owner to shut down says
/// goodbye for all.
impl<X: Transport> Transport for Arc<X> {
    fn rank(&self) -> Rank {
        (**self).rank()
    }

    fn size(&self) -> usize {
        (**self).size()
    }

    fn generation(&self) -> Generation {
        (**self).generation()
    }

    fn world_rank(&self, rank: Rank) -> Rank {
        (**self).world_rank(rank)
    }

    fn send(
        &self,
        to: Rank,
        tag: Tag,
        payload: &[u8],
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        (**self).send(to, tag, payload)
    }

    fn recv(
        &self,
        from: Rank,
        tag: Tag,
    ) -> impl Future<Output = Result<Bytes, TransportError>> + Send {
        (**self).recv(from, tag)
    }

    fn recv_into(
        &self,
        from: Rank,
        tag: Tag,
        dst: &mut [u8],
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        (**self).recv_into(from, tag, dst)
    }

    fn send_parts(
        &self,
        to: Rank,
        tag: Tag,
        parts: &[&[u8]],
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        (**self).send_parts(to, tag, parts)
    }

    fn recv_into_parts(
        &self,
        from: Rank,
        tag: Tag,
        dst: &mut [&mut [u8]],
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        (**self).recv_into_parts(from, tag, dst)
    }

    fn arrival(&self, ops: Range<u64>) -> Option<impl Future<Output = ()> + Send + '_> {
        (**self).arrival(ops)
    }

    fn stale_refused(&self) -> u64 {
        (**self).stale_refused()
    }

    fn breaker(&self) -> Breaker {
        (**self).breaker()
    }

    async fn shutdown(self) {
        if let Some(x) = Arc::into_inner(self) {
            x.shutdown().await;
        }
    }
}

/// Checks the arguments every transport validates the same way.
pub(crate) fn check_peer(
    size: usize,
    current: Generation,
    peer: Rank,
    tag: Tag,
) -> Result<(), TransportError> {
    if peer >= size {
        return Err(TransportError::InvalidRank { rank: peer, size });
    }
    if tag.generation != current {
        return Err(TransportError::GenerationMismatch {
            got: tag.generation,
            current,
        });
    }
    Ok(())
}
