//! Building the full TCP mesh of one generation.
//!
//! ```text
//!   rank 0 <──dial── rank 1 <──dial── rank 2
//!     ^                                 │
//!     └───────────────dial──────────────┘
//! ```
//! Every rank accepts from the ranks above it and dials the ranks below it, all at
//! once, retrying failed dials until the deadline; a peer that keeps refusing
//! (nothing listens at its address) is given up after [`REFUSED_GRACE`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use control::{Say, Throttle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout_at};

use control::DataKey;

use super::handshake::{
    CHALLENGE_LEN, HELLO_LEN, Hello, NOT_A_PEER, Refusal, UNPROVEN_ACCEPTOR, acceptor_proof,
    challenge, check_acceptor_proof, read_challenge,
};
use super::{TcpConfig, TcpTransport};
use crate::error::TransportError;
use crate::tag::{Generation, Rank};

/// A bound, listening data-plane socket whose address can be handed to peers
/// before the mesh is built.
#[derive(Debug)]
pub struct TcpEndpoint {
    listener: TcpListener,
    config: TcpConfig,
}

/// Longest time an accepted connection may take to introduce itself, so that a
/// silent stray connection cannot hold up set-up.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

fn new_socket(addr: SocketAddr, config: &TcpConfig) -> std::io::Result<TcpSocket> {
    let s = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(b) = config.socket_buffer_bytes {
        let b = u32::try_from(b).unwrap_or(u32::MAX);
        s.set_send_buffer_size(b)?;
        s.set_recv_buffer_size(b)?;
    }
    Ok(s)
}

impl TcpEndpoint {
    /// Binds and listens on `addr` (port 0 picks a free port).
    pub async fn bind(addr: SocketAddr, config: TcpConfig) -> Result<Self, TransportError> {
        let s = new_socket(addr, &config).map_err(TransportError::socket)?;
        s.set_reuseaddr(true).map_err(TransportError::socket)?;
        s.bind(addr).map_err(TransportError::socket)?;
        let listener = s.listen(1024).map_err(TransportError::socket)?;
        Ok(Self { listener, config })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        self.listener.local_addr().map_err(TransportError::socket)
    }

    /// Sets the key peers must prove they hold and how long
    /// [`TcpEndpoint::connect`] may take: often known only after the address
    /// has been published.
    pub fn prepare(&mut self, job_key: DataKey, connect_timeout: Duration) {
        self.config.job_key = job_key;
        self.config.connect_timeout = connect_timeout;
    }

    /// Connects to every peer (`peers[i]` is rank `i`'s endpoint address; this
    /// rank's own entry is ignored) and starts the transport.
    pub async fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[SocketAddr],
    ) -> Result<TcpTransport, TransportError> {
        let size = peers.len();
        if rank >= size {
            return Err(TransportError::InvalidRank { rank, size });
        }
        let me = Hello {
            generation,
            rank,
            size,
        };
        let deadline = Instant::now() + self.config.connect_timeout;
        let mut dials = JoinSet::new();
        for (peer, &addr) in peers.iter().enumerate().take(rank) {
            dials.spawn(dial(peer, addr, me, deadline, self.config.clone()));
        }
        let (dialed, accepted) = tokio::try_join!(
            collect_dials(dials),
            accept_all(&self.listener, me, deadline, &self.config)
        )?;
        let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
        for (peer, s) in dialed.into_iter().chain(accepted) {
            s.set_nodelay(true).map_err(TransportError::socket)?;
            streams[peer] = Some(s);
        }
        Ok(TcpTransport::start(rank, generation, streams, self.config))
    }
}

async fn collect_dials(
    mut dials: JoinSet<Result<(Rank, TcpStream), TransportError>>,
) -> Result<Vec<(Rank, TcpStream)>, TransportError> {
    let mut out = Vec::with_capacity(dials.len());
    while let Some(joined) = dials.join_next().await {
        match joined {
            Ok(r) => out.push(r?),
            Err(e) => return Err(TransportError::socket(std::io::Error::other(e))),
        }
    }
    Ok(out)
}

/// How long a dial keeps trying a peer that refuses connections. Peers bind
/// and listen before their address is published, so a refusal that lasts
/// means nothing listens there (a wrong address, or a dead peer): say so
/// instead of waiting out the whole set-up time.
const REFUSED_GRACE: Duration = Duration::from_secs(2);

async fn dial(
    peer: Rank,
    addr: SocketAddr,
    me: Hello,
    deadline: Instant,
    config: TcpConfig,
) -> Result<(Rank, TcpStream), TransportError> {
    let started = Instant::now();
    let connect_err = |e: std::io::Error| TransportError::Connect {
        from: me.rank,
        rank: peer,
        addr,
        after: started.elapsed(),
        source: Arc::new(e),
    };
    let give_up = deadline.min(started + REFUSED_GRACE);
    let mut backoff = Duration::from_millis(5);
    let mut stream = loop {
        let attempt = async { new_socket(addr, &config)?.connect(addr).await };
        match timeout_at(deadline, attempt).await {
            Ok(Ok(s)) => break s,
            Ok(Err(e)) if Instant::now() + backoff < retry_until(&e, deadline, give_up) => {
                tracing::trace!(peer, %addr, %e, "dial failed, retrying");
                sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
            Ok(Err(e)) => return Err(connect_err(e)),
            Err(_) => return Err(connect_err(std::io::ErrorKind::TimedOut.into())),
        }
    };
    match timeout_at(deadline, prove(&mut stream, me, &config.job_key)).await {
        Ok(Ok(Ok(()))) => Ok((peer, stream)),
        Ok(Ok(Err(reason))) => Err(TransportError::Handshake { rank: peer, reason }),
        Ok(Err(e)) => Err(connect_err(e)),
        Err(_) => Err(connect_err(std::io::ErrorKind::TimedOut.into())),
    }
}

/// The dialer's side of the handshake on `s`: `Ok(Err(why))` when the peer
/// refused, or is no proven member of the job.
async fn prove(
    s: &mut TcpStream,
    me: Hello,
    key: &DataKey,
) -> std::io::Result<Result<(), &'static str>> {
    let mut c = [0u8; CHALLENGE_LEN];
    s.read_exact(&mut c).await?;
    let Some(a) = read_challenge(&c) else {
        return Ok(Err(NOT_A_PEER));
    };
    let d = control::nonce().map_err(std::io::Error::other)?;
    let hello = me.encode(key, &a, &d);
    s.write_all(&hello).await?;
    match s.read_u8().await? {
        0 => {
            let mut proof = [0u8; 32];
            s.read_exact(&mut proof).await?;
            let proven = check_acceptor_proof(key, &a, &hello, &proof);
            Ok(if proven {
                Ok(())
            } else {
                Err(UNPROVEN_ACCEPTOR)
            })
        }
        code => Ok(Err(
            Refusal::from_code(code).map_or("unknown refusal code", Refusal::reason)
        )),
    }
}

/// Until when a dial that failed with `e` is tried again.
fn retry_until(e: &std::io::Error, deadline: Instant, refused_until: Instant) -> Instant {
    if e.kind() == std::io::ErrorKind::ConnectionRefused {
        refused_until
    } else {
        deadline
    }
}

async fn accept_all(
    listener: &TcpListener,
    me: Hello,
    deadline: Instant,
    config: &TcpConfig,
) -> Result<Vec<(Rank, TcpStream)>, TransportError> {
    let expected = me.size - me.rank - 1;
    let mut got: Vec<(Rank, TcpStream)> = Vec::with_capacity(expected);
    let mut hellos = JoinSet::new();
    while got.len() < expected {
        tokio::select! {
            acc = listener.accept() => match acc {
                Ok((s, from)) => {
                    hellos.spawn(answer_hello(s, me, config.job_key.clone()));
                    tracing::trace!(%from, "data-plane connection accepted");
                }
                Err(e) => tracing::debug!(%e, "accept failed"),
            },
            Some(joined) = hellos.join_next(), if !hellos.is_empty() => {
                if let Ok(Some((peer, s))) = joined
                    && got.iter().all(|(p, _)| *p != peer)
                {
                    got.push((peer, s));
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                let missing = ((me.rank + 1)..me.size)
                    .filter(|r| got.iter().all(|(p, _)| p != r))
                    .collect();
                return Err(TransportError::SetupTimeout {
                    generation: me.generation,
                    after: config.connect_timeout,
                    missing,
                });
            }
        }
    }
    Ok(got)
}

/// Refused data-plane connections said per 10 s; the rest are counted into
/// the next line said.
static REFUSALS: Mutex<Throttle> = Mutex::new(Throttle::new(Duration::from_secs(10), 5));

/// Says that a connection was refused, and why (a few times per window).
fn refused(why: &str) {
    let say = REFUSALS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .note(std::time::Instant::now());
    match say {
        Say::Now { held: 0 } => tracing::warn!(why, "data-plane connection refused"),
        Say::Now { held } => tracing::warn!(
            why,
            "data-plane connection refused ({held} more refused since the last such line)"
        ),
        Say::Hold => {}
    }
}

/// Challenges a dialer, reads its hello and answers it; `None` for anything
/// that is not a proven peer of this generation (said, connection closed).
async fn answer_hello(mut s: TcpStream, me: Hello, key: DataKey) -> Option<(Rank, TcpStream)> {
    let a = match control::nonce() {
        Ok(a) => a,
        Err(e) => {
            refused(&e.to_string());
            return None;
        }
    };
    let mut buf = [0u8; HELLO_LEN];
    let read = tokio::time::timeout(HELLO_TIMEOUT, async {
        s.write_all(&challenge(&a)).await?;
        s.read_exact(&mut buf).await
    })
    .await;
    if !matches!(read, Ok(Ok(_))) {
        refused(&format!("no hello within {HELLO_TIMEOUT:?}"));
        return None;
    }
    let verdict = Hello::decode(&buf, &key, &a).and_then(|h| h.check_against(&me).map(|()| h));
    let mut answer = vec![0u8];
    match verdict {
        Ok(_) => answer.extend_from_slice(&acceptor_proof(&key, &a, &buf)),
        Err(r) => answer[0] = r as u8,
    }
    let answered = tokio::time::timeout(HELLO_TIMEOUT, s.write_all(&answer)).await;
    match (verdict, answered) {
        (Ok(h), Ok(Ok(()))) => Some((h.rank, s)),
        (Err(r), _) => {
            refused(r.reason());
            None
        }
        _ => None,
    }
}
