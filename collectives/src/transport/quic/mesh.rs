//! Building the QUIC mesh of one generation: as the TCP mesh
//! ([`crate::transport::tcp`]), every rank accepts from the ranks above it
//! and dials the ranks below it, each connection carrying one stream that
//! opens with [`STREAM_MAGIC`] and the data-plane handshake.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use control::DataKey;
use control::pki::{LeafKey, leaf_name};
use control::{LeafPublicKey, TlsGrant};
use quinn::{
    Connection, ConnectionError, Endpoint as QuinnEndpoint, Incoming, RecvStream, SendStream,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout, timeout_at};

use super::on_demand::Conns;
use super::sender::Sender;
use super::{QuicConfig, QuicTransport, path, tls};
use crate::error::TransportError;
use crate::tag::{Generation, Rank};
use crate::transport::endpoint::granted;
use crate::transport::stream::StreamTransport;
use crate::transport::stream::greet::{self, HELLO_TIMEOUT, prove};
use crate::transport::stream::handshake::{Dialers, Hello};
use crate::transport::tcp::on_demand::PeerAddrs;
use crate::transport::tls::TlsSetupError;

/// The dialer's first bytes on its stream: a QUIC stream is announced to the
/// acceptor only by data, and the acceptor speaks first in the handshake.
const STREAM_MAGIC: &[u8; 4] = b"ERDQ";

/// Longest one dial attempt waits for an answer. A peer whose endpoint is
/// not yet granted ignores the attempt (as does an address where nothing
/// listens: UDP says nothing), so attempts are retried until set-up's
/// deadline, each waiting a little longer.
const ATTEMPT_MAX: Duration = Duration::from_secs(2);

/// What peers need to reach a QUIC endpoint: its address, and the public
/// key the coordinator certifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuicAddress {
    pub addr: SocketAddr,
    pub key: LeafPublicKey,
}

/// A bound QUIC endpoint whose address and public key can be handed out
/// before the mesh is built.
#[derive(Debug)]
pub struct QuicEndpoint {
    pub(super) endpoint: QuinnEndpoint,
    key: LeafKey,
    pub(super) config: QuicConfig,
    pub(super) client: Option<quinn::ClientConfig>,
    /// The server side's settings, each accepted connection's transport
    /// settings made for its peer's route ([`path`]).
    server: Option<Arc<quinn::ServerConfig>>,
}

pub(super) type Halves = (RecvStream, SendStream);
pub(super) type Link = (Rank, Connection, Halves);

fn udp_socket(addr: SocketAddr, bytes: usize) -> std::io::Result<std::net::UdpSocket> {
    use nix::sys::socket::{setsockopt, sockopt};
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Forcing passes `net.core.{r,w}mem_max` (root); otherwise ask, and get
    // what the system allows.
    let forced = setsockopt(&s, sockopt::SndBufForce, &bytes)
        .and_then(|()| setsockopt(&s, sockopt::RcvBufForce, &bytes));
    if forced.is_err() {
        let _ = s.set_send_buffer_size(bytes);
        let _ = s.set_recv_buffer_size(bytes);
    }
    s.bind(&addr.into())?;
    Ok(s.into())
}

impl QuicEndpoint {
    /// Binds a UDP socket on `addr` (port 0 picks a free port) and makes this
    /// endpoint's TLS key.
    pub async fn bind(addr: SocketAddr, config: QuicConfig) -> Result<Self, TransportError> {
        let socket =
            udp_socket(addr, config.socket_buffer_bytes).map_err(TransportError::socket)?;
        let mut ep = quinn::EndpointConfig::default();
        ep.max_udp_payload_size(config.max_udp_payload)
            .map_err(|e| TransportError::socket(std::io::Error::other(e)))?;
        let endpoint = QuinnEndpoint::new(ep, None, socket, Arc::new(quinn::TokioRuntime))
            .map_err(TransportError::socket)?;
        let key =
            LeafKey::generate().map_err(|e| TransportError::socket(std::io::Error::other(e)))?;
        Ok(Self {
            endpoint,
            key,
            config,
            client: None,
            server: None,
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        self.endpoint.local_addr().map_err(TransportError::socket)
    }

    /// The address this endpoint listens on (unspecified when it listens on
    /// every interface).
    pub(super) fn local_ip(&self) -> IpAddr {
        self.endpoint
            .local_addr()
            .map_or(IpAddr::from([0, 0, 0, 0]), |a| a.ip())
    }

    pub(super) fn accepting(&self) -> Accepting {
        Accepting {
            server: self.server.clone(),
            local: self.local_ip(),
            config: self.config.clone(),
        }
    }

    /// The public half of this endpoint's TLS key, for the coordinator to
    /// certify.
    pub fn public_key(&self) -> LeafPublicKey {
        self.key.public()
    }

    /// Sets the job key the handshake proves, the coordinator's `grant` and
    /// how long [`QuicEndpoint::connect`] may take; from now on peers of the
    /// job may connect.
    pub fn prepare(
        &mut self,
        job_key: DataKey,
        grant: &TlsGrant,
        connect_timeout: Duration,
    ) -> Result<(), TlsSetupError> {
        self.config.job_key = job_key;
        self.config.connect_timeout = connect_timeout;
        let server = tls::server(grant, self.key.private_der(), &self.config)?;
        self.client = Some(tls::client(grant, self.key.private_der(), &self.config)?);
        self.endpoint.set_server_config(Some(server.clone()));
        self.server = Some(Arc::new(server));
        Ok(())
    }

    /// Connects to every peer (`peers[i]` is rank `i`'s address) and starts
    /// the transport. [`QuicEndpoint::prepare`] must have been called.
    pub async fn connect(
        self,
        rank: Rank,
        generation: Generation,
        peers: &[SocketAddr],
    ) -> Result<QuicTransport, TransportError> {
        let size = peers.len();
        let me = Hello::of(rank, generation, size)?;
        if self.config.on_demand {
            return self.on_demand(me, PeerAddrs::Listed(peers.to_vec()));
        }
        let client = granted(self.client.clone(), rank)?;
        let deadline = Instant::now() + self.config.connect_timeout;
        let mut dials = JoinSet::new();
        for (peer, &addr) in peers.iter().enumerate().take(rank) {
            let d = Dial {
                endpoint: self.endpoint.clone(),
                client: for_peer(&client, &self.config, self.local_ip(), addr),
                peer,
                addr,
                me,
            };
            dials.spawn(d.run(self.config.job_key.clone(), deadline));
        }
        let (dialed, accepted) = tokio::try_join!(
            collect(dials),
            accept_all(&self.endpoint, me, deadline, &self.config, self.accepting())
        )?;
        // The mesh is complete: later handshakes are refused by QUIC itself.
        self.endpoint.set_server_config(None);
        let mut streams: Vec<Option<(RecvStream, Sender)>> = (0..size).map(|_| None).collect();
        let mut connections = Vec::with_capacity(size);
        for (peer, conn, halves) in dialed.into_iter().chain(accepted) {
            streams[peer] = Some((halves.0, Sender::new(halves.1)));
            connections.push(conn);
        }
        let limits = self.config.limits();
        Ok(QuicTransport {
            inner: Some(StreamTransport::start(rank, generation, streams, limits)),
            connections: Conns::from_vec(connections),
            endpoint: self.endpoint,
        })
    }
}

/// `client` with transport settings made for the route to `peer`.
pub(super) fn for_peer(
    client: &quinn::ClientConfig,
    config: &QuicConfig,
    local: IpAddr,
    peer: SocketAddr,
) -> quinn::ClientConfig {
    let mut c = client.clone();
    c.transport_config(path::for_peer(config, local, peer));
    c
}

async fn collect(
    mut dials: JoinSet<Result<Link, TransportError>>,
) -> Result<Vec<Link>, TransportError> {
    let mut out = Vec::with_capacity(dials.len());
    while let Some(joined) = dials.join_next().await {
        match joined {
            Ok(r) => out.push(r?),
            Err(e) => return Err(TransportError::socket(std::io::Error::other(e))),
        }
    }
    Ok(out)
}

/// Whether a QUIC error is TLS refusing a certificate (QUIC's crypto error
/// codes, 0x100 + the TLS alert).
fn is_tls(e: &ConnectionError) -> bool {
    let code = match e {
        ConnectionError::TransportError(t) => t.code,
        ConnectionError::ConnectionClosed(c) => c.error_code,
        _ => return false,
    };
    (0x100..0x200).contains(&u64::from(code))
}

/// One dial of a peer (of a lower rank, in the full mesh).
pub(super) struct Dial {
    pub(super) endpoint: QuinnEndpoint,
    pub(super) client: quinn::ClientConfig,
    pub(super) peer: Rank,
    pub(super) addr: SocketAddr,
    pub(super) me: Hello,
}

impl Dial {
    pub(super) async fn run(self, key: DataKey, deadline: Instant) -> Result<Link, TransportError> {
        let conn = self.connection(deadline).await?;
        let (mut send, recv) = match timeout_at(deadline, conn.open_bi()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(self.lost(&conn, e.into())),
            Err(_) => return Err(self.failed(std::io::ErrorKind::TimedOut.into())),
        };
        let handshake = async {
            send.write_all(STREAM_MAGIC).await?;
            let mut s = tokio::io::join(recv, send);
            let proven = prove(&mut s, self.me, &key).await?;
            Ok::<_, std::io::Error>(proven.map(|()| s.into_inner()))
        };
        match timeout_at(deadline, handshake).await {
            Ok(Ok(Ok(halves))) => Ok((self.peer, conn, halves)),
            Ok(Ok(Err(reason))) => Err(TransportError::Handshake {
                rank: self.peer,
                reason,
            }),
            Ok(Err(e)) => Err(self.lost(&conn, e)),
            Err(_) => Err(self.failed(std::io::ErrorKind::TimedOut.into())),
        }
    }

    /// A connection that completed QUIC's handshake, retried while the peer
    /// refuses or does not answer (its endpoint not yet granted).
    async fn connection(&self, deadline: Instant) -> Result<Connection, TransportError> {
        let name = leaf_name(self.peer, self.me.generation);
        let mut wait = Duration::from_millis(250);
        loop {
            let connecting = self
                .endpoint
                .connect_with(self.client.clone(), self.addr, &name)
                .map_err(|e| self.failed(std::io::Error::other(e)))?;
            let until = deadline.min(Instant::now() + wait);
            let e: std::io::Error = match timeout_at(until, connecting).await {
                Ok(Ok(c)) => return Ok(c),
                Ok(Err(e)) if is_tls(&e) => return Err(self.tls(&e)),
                Ok(Err(e)) => std::io::Error::other(e),
                Err(_) => std::io::ErrorKind::TimedOut.into(),
            };
            if Instant::now() >= deadline {
                return Err(self.failed(e));
            }
            tracing::trace!(peer = self.peer, addr = %self.addr, %e, "QUIC dial failed, retrying");
            sleep(Duration::from_millis(20)).await;
            wait = (wait * 2).min(ATTEMPT_MAX);
        }
    }

    fn failed(&self, e: std::io::Error) -> TransportError {
        TransportError::Connect {
            from: self.me.rank,
            rank: self.peer,
            addr: self.addr,
            after: Duration::ZERO,
            source: Arc::new(e),
        }
    }

    fn tls(&self, e: &ConnectionError) -> TransportError {
        TransportError::Tls {
            rank: self.peer,
            addr: self.addr,
            reason: e.to_string(),
        }
    }

    /// The stream failed: TLS's refusal of this rank's certificate shows
    /// only now (a client's certificate is checked after its handshake
    /// completes), otherwise an i/o failure.
    fn lost(&self, conn: &Connection, e: std::io::Error) -> TransportError {
        match conn.close_reason() {
            Some(reason) if is_tls(&reason) => self.tls(&reason),
            _ => self.failed(e),
        }
    }
}

/// How an incoming connection is taken: the server settings, this
/// endpoint's address, and the configuration the transport settings come from.
#[derive(Clone)]
pub(super) struct Accepting {
    server: Option<Arc<quinn::ServerConfig>>,
    local: IpAddr,
    pub(super) config: QuicConfig,
}

impl Accepting {
    /// Accepts `inc` with transport settings made for its peer's route.
    fn accept(&self, inc: Incoming) -> Result<quinn::Connecting, ConnectionError> {
        let Some(mut server) = self.server.as_deref().cloned() else {
            return inc.accept();
        };
        let peer = inc.remote_address();
        server.transport_config(path::for_peer(&self.config, self.local, peer));
        inc.accept_with(Arc::new(server))
    }
}

async fn accept_all(
    endpoint: &QuinnEndpoint,
    me: Hello,
    deadline: Instant,
    config: &QuicConfig,
    accepting: Accepting,
) -> Result<Vec<Link>, TransportError> {
    let expected = me.size - me.rank - 1;
    let mut got: Vec<Link> = Vec::with_capacity(expected);
    let mut hellos = JoinSet::new();
    while got.len() < expected {
        tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(inc) => {
                    hellos.spawn(answer(accepting.clone(), inc, me, config.job_key.clone()));
                }
                None => return Err(TransportError::socket(std::io::Error::other("the QUIC endpoint closed"))),
            },
            Some(joined) = hellos.join_next(), if !hellos.is_empty() => {
                if let Ok(Some(link)) = joined
                    && got.iter().all(|(p, _, _)| *p != link.0)
                {
                    got.push(link);
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                let missing = ((me.rank + 1)..me.size)
                    .filter(|r| got.iter().all(|(p, _, _)| p != r))
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

/// Completes an incoming connection's TLS handshake, takes its stream and
/// answers its hello: `None` (said, connection closed) for anything that is
/// not a proven peer of this generation.
async fn answer(accepting: Accepting, inc: Incoming, me: Hello, key: DataKey) -> Option<Link> {
    let (from, conn, halves) = opened(&accepting, inc).await?;
    let mut s = tokio::io::join(halves.0, halves.1);
    match greet::answer(&mut s, from, (me, Dialers::Above), &key).await {
        Some(rank) => {
            let mut halves = s.into_inner();
            let _ = halves.1.flush().await;
            Some((rank, conn, halves))
        }
        None => {
            conn.close(quinn::VarInt::from_u32(super::CLOSE_ABANDONED), b"refused");
            None
        }
    }
}

/// Completes an incoming connection's TLS handshake and takes the stream
/// its dialer opened: where it came from, the connection and the stream;
/// `None` (said, connection closed) where either fails.
pub(super) async fn opened(
    accepting: &Accepting,
    inc: Incoming,
) -> Option<(SocketAddr, Connection, Halves)> {
    let from = inc.remote_address();
    let conn = match timeout(HELLO_TIMEOUT, async { accepting.accept(inc)?.await }).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            greet::refused(from, &format!("TLS: {e}"));
            return None;
        }
        Err(_) => {
            greet::refused(from, "no TLS handshake in time");
            return None;
        }
    };
    let opened = timeout(HELLO_TIMEOUT, async {
        let (send, mut recv) = conn.accept_bi().await?;
        let mut magic = [0u8; 4];
        AsyncReadExt::read_exact(&mut recv, &mut magic).await?;
        Ok::<_, std::io::Error>((magic == *STREAM_MAGIC).then_some((recv, send)))
    })
    .await;
    let Ok(Ok(Some(halves))) = opened else {
        greet::refused(from, "no data-plane stream opened");
        conn.close(quinn::VarInt::from_u32(super::CLOSE_ABANDONED), b"refused");
        return None;
    };
    Some((from, conn, halves))
}
