//! Connections on demand: a generation's TCP (or TLS) transport that starts
//! with no connection, dials a peer when a send first needs it, and accepts
//! the peers that dial it for as long as the generation lasts.
//!
//! ```text
//!  rank 3: send(to 4) ──dial──> rank 4 (accepts; may send back on it)
//!  rank 4: send(to 3) ── the link rank 3 dialed, if it got there first;
//!                        else a dial of its own (both ends at once: rank
//!                        4's dial carries the pair, `stream/pairing.rs`)
//! ```
//! A ring allreduce then holds two links per rank, recursive doubling
//! log2(n), the hierarchical paths the host's ranks and the leaders,
//! where the full mesh holds n - 1 ([`super::mesh`]). Each link is made as
//! the full mesh's are: the same dial with its retries and refusal grace,
//! the same proof of membership, shared memory with a peer on this host,
//! within `connect_timeout` of the send that needed it.

use std::net::SocketAddr;
use std::sync::Arc;

use control::PeerAddress;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout_at};

use super::mesh::{
    Dial, Layer, LinkedTransport, MeshLink, Side, crowded, link, local_ranks, secured, spun,
};
use super::{TcpConfig, TcpEndpoint};
use crate::error::{LossCause, TransportError};
use crate::tag::Rank;
use crate::transport::book::PeerBook;
use crate::transport::endpoint::no_address;
use crate::transport::shm::{self, ShmConfig, ShmRead, ShmWrite};
use crate::transport::stream::StreamTransport;
use crate::transport::stream::greet::{self, HELLO_TIMEOUT};
use crate::transport::stream::handshake::{Dialers, Hello};
use crate::transport::stream::links::{Boxed, Dialer, Dialing, Links};

type EitherRead<L> = tokio_util::either::Either<<L as Layer>::Read, ShmRead>;
type EitherWrite<L> = tokio_util::either::Either<<L as Layer>::Write, ShmWrite>;

/// What dialing and accepting a link needs, shared by the two.
#[derive(Clone)]
struct Linker<L> {
    me: Hello,
    config: TcpConfig,
    layer: L,
    /// This process's host key (`None` with shared memory off).
    host: Option<[u8; 32]>,
    /// The shared-memory settings of this host's links: sleeping at once
    /// where its ranks, judged from the peers' addresses, outnumber its
    /// CPUs, and rings as large as such pairs can have ([`spun`],
    /// [`shm::for_pairs`]).
    shm: ShmConfig,
}

impl<L: Layer> Linker<L> {
    /// Makes a proven connection `s` with `peer` its link.
    async fn link(
        &self,
        peer: Rank,
        s: L::Stream,
        side: Side,
        deadline: Instant,
    ) -> Result<MeshLink<L>, TransportError> {
        let linking = link::<L>(self.me.rank, peer, s, side, self.shm, self.host);
        match timeout_at(deadline, linking).await {
            Ok(made) => made,
            Err(_) => Err(TransportError::SetupTimeout {
                generation: self.me.generation,
                after: self.config.connect_timeout,
                missing: vec![peer],
            }),
        }
    }
}

/// Where an on-demand mesh finds the peer it dials.
#[derive(Debug)]
pub(crate) enum PeerAddrs {
    /// Every rank's socket address, by rank.
    Listed(Vec<SocketAddr>),
    /// A generation's book (some addresses given, the rest looked up when
    /// first dialled), read by `pick` (the TCP or the TLS address).
    Book {
        book: Arc<PeerBook>,
        pick: fn(&PeerAddress) -> Option<SocketAddr>,
    },
}

impl PeerAddrs {
    pub(crate) fn size(&self) -> usize {
        match self {
            PeerAddrs::Listed(all) => all.len(),
            PeerAddrs::Book { book, .. } => book.size(),
        }
    }

    pub(crate) async fn of(&self, peer: Rank) -> Result<SocketAddr, TransportError> {
        let size = self.size();
        match self {
            PeerAddrs::Listed(all) => all
                .get(peer)
                .copied()
                .ok_or(TransportError::InvalidRank { rank: peer, size }),
            PeerAddrs::Book { book, pick } => {
                pick(&book.get(peer).await?).ok_or_else(|| no_address(peer))
            }
        }
    }

    /// This host's ranks, `me` among them, judged by the IP of the
    /// addresses known (a book holds its host's ranks from the start).
    fn local(&self, me: Hello) -> usize {
        match self {
            PeerAddrs::Listed(all) => local_ranks(me, all),
            PeerAddrs::Book { book, pick } => {
                let Some(mine) = book.known(me.rank).as_ref().and_then(*pick) else {
                    return 1;
                };
                book.count_known(|a| pick(a).is_some_and(|a| a.ip() == mine.ip()))
            }
        }
    }
}

/// Dials the peers at `peers`.
struct TcpDialer<L> {
    linker: Linker<L>,
    peers: PeerAddrs,
}

impl<L> std::fmt::Debug for TcpDialer<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpDialer")
            .field("me", &self.linker.me)
            .field("peers", &self.peers.size())
            .finish_non_exhaustive()
    }
}

impl<L: Layer> Dialer<EitherRead<L>, EitherWrite<L>> for TcpDialer<L> {
    fn dial(&self, peer: Rank) -> Dialing<'_, EitherRead<L>, EitherWrite<L>> {
        Box::pin(async move {
            let addr = self.peers.of(peer).await?;
            let me = self.linker.me;
            let deadline = Instant::now() + self.linker.config.connect_timeout;
            let dial = Dial {
                peer,
                addr,
                me,
                deadline,
            };
            let (_, s) = dial
                .run(self.linker.config.clone(), self.linker.layer.clone())
                .await?;
            tracing::trace!(peer, %addr, "data-plane link dialed on demand");
            self.linker.link(peer, s, Side::Dialer, deadline).await
        })
    }

    fn patience(&self) -> std::time::Duration {
        self.linker.config.connect_timeout
    }

    fn process(&self, peer: Rank) -> Boxed<'_, Option<u64>> {
        Box::pin(async move {
            Ok(match &self.peers {
                PeerAddrs::Book { book, .. } => book.get(peer).await?.process(),
                PeerAddrs::Listed(_) => None,
            })
        })
    }
}

impl TcpEndpoint {
    /// Connects `rank` of `generation` on demand, each peer's address found
    /// in `book` (looked up if need be) when it is first dialled.
    /// [`TcpEndpoint::prepare`] must have been called, and
    /// [`TcpConfig::on_demand`] set.
    pub(crate) fn on_demand_book(
        self,
        rank: Rank,
        generation: crate::tag::Generation,
        book: Arc<PeerBook>,
    ) -> Result<super::TcpTransport, TransportError> {
        let (me, _) = self.start(rank, generation, book.size())?;
        let pick = PeerAddress::tcp_addr;
        Ok(self.on_demand(me, PeerAddrs::Book { book, pick }, super::mesh::Plain))
    }

    /// The transport of `me`'s generation with connections on demand over
    /// `layer`: no connection yet; this endpoint's listener goes to the
    /// task that accepts the peers' dials.
    pub(crate) fn on_demand<L: Layer>(
        self,
        me: Hello,
        peers: PeerAddrs,
        layer: L,
    ) -> LinkedTransport<L> {
        let cfg = self.config.shared_memory;
        let local = peers.local(me);
        let linker = Linker {
            me,
            config: self.config.clone(),
            layer,
            host: cfg.enabled.then(shm::host_key).flatten(),
            shm: shm::for_pairs(spun(cfg, crowded(local)), local),
        };
        let dialer = Arc::new(TcpDialer {
            linker: linker.clone(),
            peers,
        });
        let limits = self.limits();
        let carried = self.carries().and_then(L::carried);
        let listener = self.listener;
        let accept = move |links| accept_links(listener, linker, links);
        let place = (me.rank, me.generation, me.size);
        StreamTransport::on_demand(place, limits, (dialer, accept), carried)
    }
}

/// Accepts the peers' dials for as long as the generation lasts (the task
/// is stopped with its transport), each in a task of its own.
async fn accept_links<L: Layer>(
    listener: TcpListener,
    linker: Linker<L>,
    links: Arc<Links<EitherRead<L>, EitherWrite<L>>>,
) {
    let mut hellos = JoinSet::new();
    loop {
        tokio::select! {
            acc = listener.accept() => match acc {
                Ok((s, from)) => {
                    tracing::trace!(%from, "data-plane connection accepted");
                    hellos.spawn(accept_link(s, from, linker.clone(), links.clone()));
                }
                Err(e) => tracing::debug!(%e, "accept failed"),
            },
            Some(_) = hellos.join_next(), if !hellos.is_empty() => {}
        }
    }
}

/// Answers one dial and, for a proven peer whose link this rank is to
/// accept ([`Links::accepting`]), makes and hands over its link; a link
/// that fails once accepted breaks the generation (the peer is lost).
async fn accept_link<L: Layer>(
    s: TcpStream,
    from: SocketAddr,
    linker: Linker<L>,
    links: Arc<Links<EitherRead<L>, EitherWrite<L>>>,
) {
    let Some(mut s) = secured(s, from, &linker.layer).await else {
        return;
    };
    let key = &linker.config.job_key;
    let Some(heard) = greet::hear(&mut s, from, (linker.me, Dialers::Any), key).await else {
        return;
    };
    let peer = heard.rank;
    let verdict = links.accepting(peer);
    let admitted = greet::admit(&mut s, from, &heard, key, verdict).await;
    match (verdict, admitted) {
        (Ok(()), true) => {}
        (Ok(()), false) => return links.mailbox.peer_lost(peer, LossCause::Closed),
        (Err(_), _) => return,
    }
    let deadline = Instant::now() + HELLO_TIMEOUT.max(linker.config.connect_timeout);
    match linker.link(peer, s, Side::Acceptor, deadline).await {
        Ok(made) => links.install(made),
        Err(e) => {
            tracing::debug!(peer, %e, "data-plane link from a peer failed");
            links.mailbox.fail(e);
        }
    }
}
