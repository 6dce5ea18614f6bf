//! Endpoints of the in-memory transport: a [`MemFabric`] stands for the
//! network between ranks that live in one process, and hands out
//! [`MemEndpoint`]s that build generations the way TCP endpoints do, so tests
//! (and an in-process cluster) go through the same set-up path as a job.
//!
//! ```text
//!  fabric ─endpoint()─> MemEndpoint { address: MemAddress(7) }
//!  every rank: connect(rank, generation, [addresses by rank]) ─> MemTransport
//! ```
//! The ranks that connect with the same generation and the same address list
//! share one world's mailboxes; the first to connect creates them. Messages to
//! a rank that has not connected yet wait in its mailbox.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use control::PeerAddress;

use super::endpoint::{Admission, Endpoint};
use super::mailbox::Mailbox;
use super::mem::{MemTransport, mailboxes};
use crate::error::TransportError;
use crate::tag::{Generation, Rank};

/// The address of a [`MemEndpoint`]: unique within its fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemAddress(pub u64);

/// A world being connected: its mailboxes and how many ranks took theirs.
#[derive(Debug)]
struct Forming {
    boxes: Arc<Vec<Mailbox>>,
    joined: Vec<bool>,
}

type Key = (Generation, Vec<MemAddress>);

#[derive(Debug, Default)]
struct Shared {
    next: AtomicU64,
    forming: Mutex<HashMap<Key, Forming>>,
}

/// The in-process "network": cheap to clone, every clone the same fabric.
#[derive(Clone, Debug, Default)]
pub struct MemFabric {
    shared: Arc<Shared>,
    timeout: Option<Duration>,
}

impl MemFabric {
    /// A fabric whose transports wait at most `timeout` for a message.
    pub fn new(timeout: Duration) -> Self {
        Self {
            shared: Arc::default(),
            timeout: Some(timeout),
        }
    }

    /// A new endpoint with an address of its own.
    pub fn endpoint(&self) -> MemEndpoint {
        let id = self.shared.next.fetch_add(1, Ordering::Relaxed);
        MemEndpoint {
            fabric: self.clone(),
            address: MemAddress(id),
        }
    }
}

/// One rank's endpoint on a [`MemFabric`].
#[derive(Debug)]
pub struct MemEndpoint {
    fabric: MemFabric,
    address: MemAddress,
}

/// How long a mem transport waits for a message when its fabric says nothing.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl MemEndpoint {
    /// Joins the generation of `peers` (`peers[i]` is rank `i`'s address,
    /// this rank's its own) once every rank has.
    pub async fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[MemAddress],
    ) -> Result<MemTransport, TransportError> {
        let boxes = self.take_world(rank, generation, peers)?;
        let timeout = self.fabric.timeout.unwrap_or(DEFAULT_TIMEOUT);
        Ok(MemTransport::of_world(rank, generation, boxes, timeout))
    }

    fn take_world(
        &self,
        rank: Rank,
        generation: Generation,
        peers: &[MemAddress],
    ) -> Result<Arc<Vec<Mailbox>>, TransportError> {
        let size = peers.len();
        if rank >= size {
            return Err(TransportError::InvalidRank { rank, size });
        }
        if peers[rank] != self.address {
            return Err(TransportError::Handshake {
                rank,
                reason: "this endpoint's address is not the one listed for its rank",
            });
        }
        let mut forming = self
            .fabric
            .shared
            .forming
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (generation, peers.to_vec());
        let world = forming.entry(key.clone()).or_insert_with(|| Forming {
            boxes: mailboxes(size, generation),
            joined: vec![false; size],
        });
        if std::mem::replace(&mut world.joined[rank], true) {
            return Err(TransportError::Handshake {
                rank,
                reason: "a second endpoint connected as this rank",
            });
        }
        let boxes = world.boxes.clone();
        if world.joined.iter().all(|&j| j) {
            forming.remove(&key);
        }
        Ok(boxes)
    }
}

impl Endpoint for MemEndpoint {
    type Address = MemAddress;
    type Transport = MemTransport;

    fn address(&self) -> Result<MemAddress, TransportError> {
        Ok(self.address)
    }

    /// The fabric's address: `ip` means nothing in one process.
    fn published(&self, _ip: std::net::IpAddr) -> Result<PeerAddress, TransportError> {
        Ok(PeerAddress::mem(self.address.0))
    }

    fn pick(peer: &PeerAddress) -> Option<MemAddress> {
        peer.mem_addr().map(MemAddress)
    }

    /// Connects within the fabric: nothing to prove, nothing to wait for.
    async fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[MemAddress],
        _admission: Admission<'_>,
    ) -> Result<MemTransport, TransportError> {
        MemEndpoint::connect(self, rank, generation, peers).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::Tag;
    use crate::transport::Transport;

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn endpoints_build_a_connected_generation() {
        let fabric = MemFabric::new(T);
        let eps: Vec<MemEndpoint> = (0..3).map(|_| fabric.endpoint()).collect();
        let peers: Vec<MemAddress> = eps.iter().map(|e| e.address().unwrap()).collect();
        let mut world = Vec::new();
        for (rank, ep) in eps.into_iter().enumerate() {
            world.push(ep.connect(rank, Generation(5), &peers).await.unwrap());
        }
        let tag = Tag::new(Generation(5), 0, 0);
        world[2].send(0, tag, b"from 2").await.unwrap();
        assert_eq!(world[0].recv(2, tag).await.unwrap(), "from 2");
        assert!(world.iter().all(|t| t.size() == 3));
        assert!(fabric.shared.forming.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_rank_must_connect_with_its_own_address_once() {
        let fabric = MemFabric::new(T);
        let (a, b) = (fabric.endpoint(), fabric.endpoint());
        let peers = [a.address().unwrap(), b.address().unwrap()];
        let e = fabric
            .endpoint()
            .connect(0, Generation(1), &peers)
            .await
            .unwrap_err();
        assert!(
            matches!(e, TransportError::Handshake { rank: 0, .. }),
            "{e:?}"
        );
        let e = a.connect(2, Generation(1), &peers).await.unwrap_err();
        assert!(matches!(
            e,
            TransportError::InvalidRank { rank: 2, size: 2 }
        ));
        let _t = b.connect(1, Generation(1), &peers).await.unwrap();
    }
}
