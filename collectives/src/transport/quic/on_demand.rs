//! Connections on demand over QUIC: as over TCP
//! ([`crate::transport::tcp`]'s `on_demand.rs`), a generation's transport
//! starts with no connection, dials a peer when a send first needs it and
//! accepts the peers that dial it for as long as the generation lasts.
//!
//! ```text
//!  send(to) ─> Links::dialed ─> QuicDialer::dial ─> QUIC + TLS handshake,
//!                                stream, magic, proof ─> Link
//!  endpoint.accept() ─> accept_link ─> TLS, stream, magic, hear ─> Pairing
//!                                      (one link a pair) ─> admit ─> Link
//! ```
//! Each connection is the full mesh's: mutual TLS under the job's
//! authority with the peer's exact leaf name, one stream opening with the
//! magic, the job key's proof inside. When both ends dial at once the
//! higher rank's dial carries the pair, as over TCP; the lower rank's
//! connection is refused as crossed and kept until its dialer closes it
//! (QUIC's close would otherwise overtake the refusal on the wire).

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use quinn::{Connection, Endpoint as QuinnEndpoint, Incoming, RecvStream, VarInt};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};

use super::mesh::{Accepting, Dial, QuicEndpoint, for_peer, opened};
use super::sender::Sender;
use super::{CLOSE_ABANDONED, QuicConfig, QuicTransport};
use crate::error::{LossCause, TransportError};
use crate::tag::Rank;
use crate::transport::book::PeerBook;
use crate::transport::endpoint::granted;
use crate::transport::stream::StreamTransport;
use crate::transport::stream::greet::{self, HELLO_TIMEOUT};
use crate::transport::stream::handshake::{Dialers, Hello};
use crate::transport::stream::links::{Dialer, Dialing, Link, Links};
use crate::transport::tcp::on_demand::PeerAddrs;
use control::PeerAddress;

/// The QUIC connections of a transport, made whenever a link is: closed
/// with it.
#[derive(Clone, Debug, Default)]
pub(super) struct Conns(Arc<Mutex<Vec<Connection>>>);

impl Conns {
    pub(super) fn from_vec(v: Vec<Connection>) -> Self {
        Self(Arc::new(Mutex::new(v)))
    }

    fn push(&self, c: Connection) {
        self.lock().push(c);
    }

    /// Every connection made so far, taken out.
    pub(super) fn take(&self) -> Vec<Connection> {
        std::mem::take(&mut *self.lock())
    }

    /// Closes every connection with `code` and `reason`.
    pub(super) fn close(&self, code: u32, reason: &[u8]) {
        for c in self.lock().iter() {
            c.close(VarInt::from_u32(code), reason);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

type QuicLinks = Links<RecvStream, Sender>;

/// Dials the peers at `peers`.
struct QuicDialer {
    endpoint: QuinnEndpoint,
    client: quinn::ClientConfig,
    config: QuicConfig,
    local: IpAddr,
    me: Hello,
    peers: PeerAddrs,
    conns: Conns,
}

impl std::fmt::Debug for QuicDialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicDialer")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl Dialer<RecvStream, Sender> for QuicDialer {
    fn dial(&self, peer: Rank) -> Dialing<'_, RecvStream, Sender> {
        Box::pin(async move {
            let addr = self.peers.of(peer).await?;
            let deadline = Instant::now() + self.config.connect_timeout;
            let dial = Dial {
                endpoint: self.endpoint.clone(),
                client: for_peer(&self.client, &self.config, self.local, addr),
                peer,
                addr,
                me: self.me,
            };
            let (peer, conn, (read, write)) =
                dial.run(self.config.job_key.clone(), deadline).await?;
            tracing::trace!(peer, %addr, "QUIC link dialed on demand");
            self.conns.push(conn);
            Ok(Link {
                peer,
                read,
                write: Sender::new(write),
                shared_memory: false,
            })
        })
    }

    fn patience(&self) -> Duration {
        self.config.connect_timeout
    }
}

impl QuicEndpoint {
    /// The transport of `me`'s generation with connections on demand, each
    /// peer's address found in `peers` when it is first dialled.
    /// [`QuicEndpoint::prepare`] must have been called.
    pub(crate) fn on_demand(
        self,
        me: Hello,
        peers: PeerAddrs,
    ) -> Result<QuicTransport, TransportError> {
        let client = granted(self.client.clone(), me.rank)?;
        let conns = Conns::default();
        let dialer = Arc::new(QuicDialer {
            endpoint: self.endpoint.clone(),
            client,
            config: self.config.clone(),
            local: self.local_ip(),
            me,
            peers,
            conns: conns.clone(),
        });
        let limits = self.config.limits();
        let taking = Taking {
            endpoint: self.endpoint.clone(),
            accepting: self.accepting(),
            me,
            conns: conns.clone(),
        };
        let accept = move |links| taking.run(links);
        let inner = StreamTransport::on_demand(
            (me.rank, me.generation, me.size),
            limits,
            (dialer, accept),
            None,
        );
        Ok(QuicTransport {
            inner: Some(inner),
            connections: conns,
            endpoint: self.endpoint,
        })
    }

    /// Whether it connects on demand ([`QuicConfig::on_demand`]).
    pub(crate) fn on_demand_set(&self) -> bool {
        self.config.on_demand
    }

    /// Connects `rank` of `generation` on demand, each peer's address found
    /// in `book` (looked up if need be) when it is first dialled.
    pub(crate) fn on_demand_book(
        self,
        rank: Rank,
        generation: crate::tag::Generation,
        book: Arc<PeerBook>,
    ) -> Result<QuicTransport, TransportError> {
        let me = Hello::of(rank, generation, book.size())?;
        let pick = |p: &PeerAddress| p.quic_addr().map(|(a, _)| a);
        self.on_demand(me, PeerAddrs::Book { book, pick })
    }
}

/// What the accept task of a generation on demand needs.
struct Taking {
    endpoint: QuinnEndpoint,
    accepting: Accepting,
    me: Hello,
    conns: Conns,
}

impl Taking {
    /// Accepts the peers' dials for as long as the generation lasts (the
    /// task is stopped with its transport), each in a task of its own.
    async fn run(self, links: Arc<QuicLinks>) {
        let mut hellos = JoinSet::new();
        loop {
            tokio::select! {
                incoming = self.endpoint.accept() => match incoming {
                    Some(inc) => {
                        let (a, c, l) = (self.accepting.clone(), self.conns.clone(), links.clone());
                        hellos.spawn(accept_link(a, inc, self.me, c, l));
                    }
                    None => return,
                },
                Some(_) = hellos.join_next(), if !hellos.is_empty() => {}
            }
        }
    }
}

/// Answers one dial and, for a proven peer whose link this rank is to
/// accept ([`Links::accepting`]), hands over its link; a link that fails
/// once accepted breaks the generation (the peer is lost).
async fn accept_link(
    accepting: Accepting,
    inc: Incoming,
    me: Hello,
    conns: Conns,
    links: Arc<QuicLinks>,
) {
    let key = accepting.config.job_key.clone();
    let Some((from, conn, (recv, send))) = opened(&accepting, inc).await else {
        return;
    };
    let mut s = tokio::io::join(recv, send);
    let Some(heard) = greet::hear(&mut s, from, (me, Dialers::Any), &key).await else {
        return linger(conn).await;
    };
    let peer = heard.rank;
    let verdict = links.accepting(peer);
    let admitted = greet::admit(&mut s, from, &heard, &key, verdict).await;
    match (verdict, admitted) {
        (Ok(()), true) => {}
        (Ok(()), false) => return links.mailbox.peer_lost(peer, LossCause::Closed),
        (Err(_), _) => return linger(conn).await,
    }
    let (recv, mut send) = s.into_inner();
    if send.flush().await.is_err() {
        return links.mailbox.peer_lost(peer, LossCause::Closed);
    }
    conns.push(conn);
    links.install(Link {
        peer,
        read: recv,
        write: Sender::new(send),
        shared_memory: false,
    });
}

/// Keeps a refused connection until its dialer, having read the refusal,
/// closes it (at most [`HELLO_TIMEOUT`]), then closes it.
async fn linger(conn: Connection) {
    let _ = timeout(HELLO_TIMEOUT, conn.closed()).await;
    conn.close(VarInt::from_u32(CLOSE_ABANDONED), b"refused");
}
