//! A generation's peer addresses as its data plane reads them: every
//! rank's (a small generation's assignment carries them all), or those the
//! assignment carried and a [`Lookup`] for the rest, each looked up once,
//! when first needed, and kept. A mesh of every rank asks for all of them
//! at once (in lookups of at most [`MAX_LOOKUP`] ranks); a mesh on demand
//! asks for a peer when it first dials it.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use control::{MAX_LOOKUP, PeerAddress};
use futures::future::BoxFuture;

use crate::error::TransportError;
use crate::tag::Rank;

/// Where the addresses an assignment left out are found: the coordinator,
/// asked over the worker's control connection.
pub trait Lookup: Send + Sync + Debug {
    /// The addresses of `ranks` (at most [`MAX_LOOKUP`]); those it does not
    /// know are left out; `Err` says why none could be had.
    fn look_up(
        &self,
        ranks: Vec<Rank>,
    ) -> BoxFuture<'static, Result<Vec<(Rank, PeerAddress)>, String>>;
}

/// The peers' addresses of one generation.
#[derive(Debug)]
pub struct PeerBook {
    size: usize,
    known: Mutex<HashMap<Rank, PeerAddress>>,
    lookup: Option<Arc<dyn Lookup>>,
}

impl PeerBook {
    /// Every rank's address, `peers[i]` rank `i`'s.
    pub fn whole(peers: &[PeerAddress]) -> Self {
        Self {
            size: peers.len(),
            known: Mutex::new(peers.iter().cloned().enumerate().collect()),
            lookup: None,
        }
    }

    /// The addresses `given` of a generation of `size` ranks; the rest are
    /// asked of `lookup`.
    pub fn partial(
        size: usize,
        given: impl IntoIterator<Item = (Rank, PeerAddress)>,
        lookup: Option<Arc<dyn Lookup>>,
    ) -> Self {
        let known = given.into_iter().filter(|(r, _)| *r < size).collect();
        Self {
            size,
            known: Mutex::new(known),
            lookup,
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Rank `rank`'s address if it is known already.
    pub fn known(&self, rank: Rank) -> Option<PeerAddress> {
        self.lock().get(&rank).cloned()
    }

    /// How many known addresses `same` says are alike (this host's, by IP).
    pub fn count_known(&self, same: impl Fn(&PeerAddress) -> bool) -> usize {
        self.lock().values().filter(|a| same(a)).count()
    }

    /// Rank `rank`'s address, looked up if it is not known yet.
    pub async fn get(&self, rank: Rank) -> Result<PeerAddress, TransportError> {
        if rank >= self.size {
            return Err(TransportError::InvalidRank {
                rank,
                size: self.size,
            });
        }
        if let Some(a) = self.known(rank) {
            return Ok(a);
        }
        self.fetch(vec![rank]).await?;
        self.known(rank)
            .ok_or_else(|| unknown(rank, "the coordinator does not know it"))
    }

    /// Every rank's address, by rank, the unknown ones looked up first.
    pub async fn all(&self) -> Result<Vec<PeerAddress>, TransportError> {
        let missing: Vec<Rank> = {
            let known = self.lock();
            (0..self.size).filter(|r| !known.contains_key(r)).collect()
        };
        for chunk in missing.chunks(MAX_LOOKUP) {
            self.fetch(chunk.to_vec()).await?;
        }
        let known = self.lock();
        (0..self.size)
            .map(|r| {
                known
                    .get(&r)
                    .cloned()
                    .ok_or_else(|| unknown(r, "the coordinator does not know it"))
            })
            .collect()
    }

    async fn fetch(&self, ranks: Vec<Rank>) -> Result<(), TransportError> {
        let first = ranks.first().copied().unwrap_or_default();
        let Some(lookup) = &self.lookup else {
            return Err(unknown(
                first,
                "its address was not given and cannot be looked up",
            ));
        };
        let found = lookup
            .look_up(ranks)
            .await
            .map_err(|why| TransportError::Lookup {
                rank: first,
                reason: why,
            })?;
        let mut known = self.lock();
        known.extend(found.into_iter().filter(|(r, _)| *r < self.size));
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Rank, PeerAddress>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn unknown(rank: Rank, reason: &str) -> TransportError {
    TransportError::Lookup {
        rank,
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Answers from a table of `n` addresses, counting the lookups.
    #[derive(Debug)]
    struct Table {
        n: usize,
        asked: AtomicUsize,
    }

    fn addr(r: Rank) -> PeerAddress {
        PeerAddress::tcp(([10, 0, (r >> 8) as u8, r as u8], 9000).into())
    }

    impl Lookup for Table {
        fn look_up(
            &self,
            ranks: Vec<Rank>,
        ) -> BoxFuture<'static, Result<Vec<(Rank, PeerAddress)>, String>> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            assert!(
                ranks.len() <= MAX_LOOKUP,
                "{} ranks in one lookup",
                ranks.len()
            );
            let n = self.n;
            Box::pin(async move {
                Ok(ranks
                    .into_iter()
                    .filter(|&r| r < n)
                    .map(|r| (r, addr(r)))
                    .collect())
            })
        }
    }

    #[tokio::test]
    async fn a_missing_address_is_looked_up_once_and_kept() {
        let table = Arc::new(Table {
            n: 10_000,
            asked: AtomicUsize::new(0),
        });
        let book = PeerBook::partial(10_000, [(0, addr(0)), (1, addr(1))], Some(table.clone()));
        assert_eq!(book.get(1).await.unwrap(), addr(1));
        assert_eq!(table.asked.load(Ordering::SeqCst), 0, "given: no lookup");
        assert_eq!(book.get(7777).await.unwrap(), addr(7777));
        assert_eq!(book.get(7777).await.unwrap(), addr(7777));
        assert_eq!(table.asked.load(Ordering::SeqCst), 1, "looked up once");
        assert!(matches!(
            book.get(10_000).await,
            Err(TransportError::InvalidRank {
                rank: 10_000,
                size: 10_000
            })
        ));
    }

    #[tokio::test]
    async fn every_address_comes_in_bounded_lookups() {
        let table = Arc::new(Table {
            n: 10_000,
            asked: AtomicUsize::new(0),
        });
        let book = PeerBook::partial(10_000, [(5, addr(5))], Some(table.clone()));
        let all = book.all().await.unwrap();
        assert_eq!(all.len(), 10_000);
        assert!(all.iter().enumerate().all(|(r, a)| *a == addr(r)));
        assert_eq!(
            table.asked.load(Ordering::SeqCst),
            10_000_usize.div_ceil(MAX_LOOKUP)
        );
    }

    #[tokio::test]
    async fn what_cannot_be_looked_up_is_an_error_naming_the_rank() {
        let book = PeerBook::partial(4, [(0, addr(0))], None);
        let e = book.get(3).await.unwrap_err().to_string();
        assert!(
            e.contains("rank 3") && e.contains("cannot be looked up"),
            "{e}"
        );
        // The coordinator knows only 2 ranks of the 4 it said there were.
        let short = Arc::new(Table {
            n: 2,
            asked: AtomicUsize::new(0),
        });
        let book = PeerBook::partial(4, [], Some(short));
        let e = book.all().await.unwrap_err().to_string();
        assert!(e.contains("rank 2") && e.contains("does not know"), "{e}");
    }
}
