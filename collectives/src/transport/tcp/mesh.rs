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

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout_at};
use tokio_util::either::Either;

use control::DataKey;

use super::on_demand::PeerAddrs;
use super::{LinkCarry, PolledRead, TcpConfig, TcpTransport};
use crate::error::TransportError;
use crate::tag::{Generation, Rank};
use crate::transport::shm::{self, ShmConfig, ShmRead, ShmWrite};
use crate::transport::stream::carry::Carried;
use crate::transport::stream::greet::{self, HELLO_TIMEOUT, prove};
use crate::transport::stream::handshake::{Dialers, Hello};
use crate::transport::stream::links::Link;
use crate::transport::stream::{StreamLimits, StreamTransport};

/// A bound, listening data-plane socket whose address can be handed to peers
/// before the mesh is built.
#[derive(Debug)]
pub struct TcpEndpoint {
    pub(super) listener: TcpListener,
    pub(super) config: TcpConfig,
}

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
        let (me, deadline) = self.start(rank, generation, peers.len())?;
        if self.config.on_demand {
            return Ok(self.on_demand(me, PeerAddrs::Listed(peers.to_vec()), Plain));
        }
        let proven = self.proven(me, deadline, peers, Plain).await?;
        self.linked::<Plain>(me, deadline, proven, local_ranks(me, peers))
            .await
    }

    /// Makes every proven connection a link (shared memory with a peer on
    /// this host, where both want it and the mesh's `local` ranks of this
    /// host fit: [`shm::for_full_mesh`]; the connection otherwise) and
    /// starts the transport.
    pub(crate) async fn linked<L: Layer>(
        &self,
        me: Hello,
        deadline: Instant,
        proven: Vec<(Rank, L::Stream, Side)>,
        local: usize,
    ) -> Result<LinkedTransport<L>, TransportError> {
        let (shm, host) =
            shm::for_full_mesh(spun(self.config.shared_memory, crowded(local)), local);
        let mut links = JoinSet::new();
        for (peer, s, side) in proven {
            let linking = link::<L>(me.rank, peer, s, side, shm, host);
            links.spawn(timeout_at(deadline, linking));
        }
        let mut made: Vec<Option<Link<_, _>>> = (0..me.size).map(|_| None).collect();
        while let Some(joined) = links.join_next().await {
            let link = match joined {
                Ok(Ok(linked)) => linked?,
                Ok(Err(_)) => return Err(setup_timeout(me, &self.config, &made)),
                Err(e) => return Err(TransportError::socket(std::io::Error::other(e))),
            };
            let peer = link.peer;
            made[peer] = Some(link);
        }
        let links = made.into_iter().flatten();
        Ok(StreamTransport::linked(
            me.rank,
            me.generation,
            me.size,
            links,
            self.limits(),
        ))
    }

    /// The hello of `rank` in a mesh of `size`, and set-up's deadline.
    pub(crate) fn start(
        &self,
        rank: Rank,
        generation: Generation,
        size: usize,
    ) -> Result<(Hello, Instant), TransportError> {
        let me = Hello::of(rank, generation, size)?;
        Ok((me, Instant::now() + self.config.connect_timeout))
    }

    /// Dials the ranks below `me`, accepts those above, and secures
    /// (`layer`) and proves each connection: every peer's stream, with
    /// which end of it this rank is.
    pub(crate) async fn proven<L: Layer>(
        &self,
        me: Hello,
        deadline: Instant,
        peers: &[SocketAddr],
        layer: L,
    ) -> Result<Vec<(Rank, L::Stream, Side)>, TransportError> {
        let mut dials = JoinSet::new();
        for (peer, &addr) in peers.iter().enumerate().take(me.rank) {
            let d = Dial {
                peer,
                addr,
                me,
                deadline,
            };
            dials.spawn(d.run(self.config.clone(), layer.clone()));
        }
        let accepting = accept_all(&self.listener, me, deadline, &self.config, layer);
        let (dialed, accepted) = tokio::try_join!(collect_dials(dials), accepting)?;
        let dialed = dialed.into_iter().map(|(p, s)| (p, s, Side::Dialer));
        let accepted = accepted.into_iter().map(|(p, s)| (p, s, Side::Acceptor));
        Ok(dialed.chain(accepted).collect())
    }

    /// The stream transport's limits, from this endpoint's settings.
    /// Whether this endpoint connects on demand ([`TcpConfig::on_demand`]).
    pub(crate) fn on_demand_set(&self) -> bool {
        self.config.on_demand
    }

    /// This process's links between generations, where they carry on
    /// ([`TcpConfig::carry`], with connections on demand).
    pub(crate) fn carries(&self) -> Option<&LinkCarry> {
        self.config.carry.as_ref().filter(|_| self.config.on_demand)
    }

    pub(crate) fn limits(&self) -> StreamLimits {
        StreamLimits {
            io_timeout: self.config.io_timeout,
            max_frame_bytes: self.config.max_frame_bytes,
        }
    }
}

/// What a mesh's connections run over once TCP has connected them and
/// before the handshake: the socket itself ([`Plain`]), or a TLS session
/// over it ([`crate::transport::tls`]).
pub(crate) trait Layer: Clone + Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    type Read: AsyncRead + Unpin + Send + std::fmt::Debug + 'static;
    type Write: AsyncWrite + Unpin + Send + std::fmt::Debug + 'static;

    /// The dialer's (`me`) end of a connection to `peer` at `addr`.
    fn dial(
        &self,
        s: TcpStream,
        me: Hello,
        peer: Rank,
        addr: SocketAddr,
    ) -> impl Future<Output = Result<Self::Stream, TransportError>> + Send;

    /// The acceptor's end: `Err(why)` refuses the connection.
    fn accept(&self, s: TcpStream) -> impl Future<Output = Result<Self::Stream, String>> + Send;

    /// The socket under the stream.
    fn socket(s: &Self::Stream) -> &TcpStream;

    /// The stream's halves, for the stream transport, the reading half
    /// looking for its next bytes for up to `spin` before it sleeps.
    fn split(s: Self::Stream, spin: Duration) -> (Self::Read, Self::Write);

    /// The socket under the stream, once shared memory carries the pair's
    /// frames and nothing more is said on the stream: the socket is then
    /// only the pair's proof of life.
    fn into_socket(s: Self::Stream) -> TcpStream;

    /// Where this layer's links park between generations, if they may.
    fn carried(_c: &LinkCarry) -> Option<Arc<Carried<EitherRead<Self>, EitherWrite<Self>>>> {
        None
    }
}

type EitherRead<L> = Either<<L as Layer>::Read, ShmRead>;
type EitherWrite<L> = Either<<L as Layer>::Write, ShmWrite>;

/// A mesh's transport over `L`'s connections, some of them shared memory.
pub(crate) type LinkedTransport<L> =
    StreamTransport<Either<<L as Layer>::Read, ShmRead>, Either<<L as Layer>::Write, ShmWrite>>;

/// The socket itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plain;

impl Layer for Plain {
    type Stream = TcpStream;
    type Read = PolledRead;
    type Write = OwnedWriteHalf;

    async fn dial(
        &self,
        s: TcpStream,
        _: Hello,
        _: Rank,
        _: SocketAddr,
    ) -> Result<TcpStream, TransportError> {
        Ok(s)
    }

    async fn accept(&self, s: TcpStream) -> Result<TcpStream, String> {
        Ok(s)
    }

    fn socket(s: &TcpStream) -> &TcpStream {
        s
    }

    fn split(s: TcpStream, spin: Duration) -> (PolledRead, OwnedWriteHalf) {
        let (r, w) = s.into_split();
        (PolledRead::new(r, spin), w)
    }

    fn into_socket(s: TcpStream) -> TcpStream {
        s
    }

    fn carried(c: &LinkCarry) -> Option<Arc<Carried<EitherRead<Self>, EitherWrite<Self>>>> {
        Some(c.plain().clone())
    }
}

/// Whether `local` ranks of this host outnumber the CPUs this process may
/// run on: then a rank that yields and looks again only takes the CPU from
/// the peer it waits for (4 ranks on 2 cores: 4 KiB allreduces took 250 µs
/// spinning, 190 µs sleeping at once), so its links, shared memory or
/// sockets, sleep at once.
pub(crate) fn crowded(local: usize) -> bool {
    std::thread::available_parallelism().map_or(true, |n| local > n.get())
}

/// How many of `peers` (rank order) are on `me`'s host, itself included:
/// those published with its address.
pub(crate) fn local_ranks(me: Hello, peers: &[SocketAddr]) -> usize {
    let mine = peers.get(me.rank).map(SocketAddr::ip);
    peers.iter().filter(|a| Some(a.ip()) == mine).count()
}

/// A link of a mesh over `L`'s connections, some of them shared memory.
pub(crate) type MeshLink<L> =
    Link<Either<<L as Layer>::Read, ShmRead>, Either<<L as Layer>::Write, ShmWrite>>;

/// `cfg` for the links of a host whose ranks are `crowded` (see
/// [`crowded`]): they sleep at once. Links told to sleep at once (a zero
/// `spin`: the Python package's `ELASTICRUN_SPIN_US=0`) take rings of at
/// least [`ShmConfig::busy_ring_bytes`]; a crowded host's keep theirs.
pub(crate) fn spun(cfg: ShmConfig, crowded: bool) -> ShmConfig {
    let ring_bytes = cfg.told_ring_bytes();
    let spin = if crowded { Duration::ZERO } else { cfg.spin };
    ShmConfig {
        spin,
        ring_bytes,
        ..cfg
    }
}

/// Which end of a connection this rank is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Dialer,
    Acceptor,
}

/// Makes a proven connection to `peer` into its link: shared memory when
/// both sides are on one host (`host`: this process's host key, `None` with
/// shared memory off) and want it, the connection otherwise. The offer and
/// answer travel on the connection (inside its TLS session, if any).
pub(crate) async fn link<L: Layer>(
    rank: Rank,
    peer: Rank,
    mut s: L::Stream,
    side: Side,
    cfg: ShmConfig,
    host: Option<[u8; 32]>,
) -> Result<MeshLink<L>, TransportError> {
    let started = std::time::Instant::now();
    let addr = L::socket(&s).peer_addr().map_err(TransportError::socket)?;
    let failed = |e: std::io::Error| TransportError::Connect {
        from: rank,
        rank: peer,
        addr,
        after: started.elapsed(),
        source: Arc::new(e),
    };
    let segment = match side {
        Side::Dialer => shm::offer(&mut s, &cfg, host).await,
        Side::Acceptor => shm::answer(&mut s, host).await,
    }
    .map_err(failed)?;
    let Some(mut segment) = segment else {
        let (r, w) = L::split(s, cfg.spin);
        return Ok(Link {
            peer,
            read: Either::Left(r),
            write: Either::Left(w),
            shared_memory: false,
        });
    };
    let tx = if side == Side::Dialer { 0 } else { 1 };
    let (r, w) = shm::link::halves(&mut segment, tx, L::into_socket(s), cfg.spin)
        .ok_or_else(|| failed(shm::ring::corrupt()))?;
    tracing::debug!(peer, "data-plane link over shared memory");
    Ok(Link {
        peer,
        read: Either::Right(r),
        write: Either::Right(w),
        shared_memory: true,
    })
}

/// The error of a set-up whose links were not all made by the deadline.
fn setup_timeout<T>(me: Hello, config: &TcpConfig, streams: &[Option<T>]) -> TransportError {
    let missing = (0..me.size)
        .filter(|&r| r != me.rank && streams[r].is_none())
        .collect();
    TransportError::SetupTimeout {
        generation: me.generation,
        after: config.connect_timeout,
        missing,
    }
}

async fn collect_dials<S: 'static>(
    mut dials: JoinSet<Result<(Rank, S), TransportError>>,
) -> Result<Vec<(Rank, S)>, TransportError> {
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

/// One dial of a lower rank.
pub(crate) struct Dial {
    pub(crate) peer: Rank,
    pub(crate) addr: SocketAddr,
    pub(crate) me: Hello,
    pub(crate) deadline: Instant,
}

impl Dial {
    pub(crate) async fn run<L: Layer>(
        self,
        config: TcpConfig,
        layer: L,
    ) -> Result<(Rank, L::Stream), TransportError> {
        let started = Instant::now();
        let (peer, addr, deadline) = (self.peer, self.addr, self.deadline);
        let connect_err = |e: std::io::Error| failure(self.me.rank, peer, addr, started, e);
        let give_up = deadline.min(started + REFUSED_GRACE);
        let mut backoff = Duration::from_millis(5);
        let stream = loop {
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
        stream.set_nodelay(true).map_err(connect_err)?;
        let secured = layer.dial(stream, self.me, peer, addr);
        let mut stream = match timeout_at(deadline, secured).await {
            Ok(s) => s?,
            Err(_) => return Err(connect_err(std::io::ErrorKind::TimedOut.into())),
        };
        match timeout_at(deadline, prove(&mut stream, self.me, &config.job_key)).await {
            Ok(Ok(Ok(()))) => Ok((peer, stream)),
            Ok(Ok(Err(reason))) => Err(TransportError::Handshake { rank: peer, reason }),
            Ok(Err(e)) => Err(connect_err(e)),
            Err(_) => Err(connect_err(std::io::ErrorKind::TimedOut.into())),
        }
    }
}

/// The error of a dial from `from` to `peer` at `addr` that failed with `e`:
/// TLS's refusal (whose alert a TLS 1.3 client of a refused certificate
/// reads only after its own handshake completed) or an i/o failure.
pub(crate) fn failure(
    from: Rank,
    peer: Rank,
    addr: SocketAddr,
    started: Instant,
    e: std::io::Error,
) -> TransportError {
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return TransportError::Tls {
            rank: peer,
            addr,
            reason: tls.to_string(),
        };
    }
    TransportError::Connect {
        from,
        rank: peer,
        addr,
        after: started.elapsed(),
        source: Arc::new(e),
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

async fn accept_all<L: Layer>(
    listener: &TcpListener,
    me: Hello,
    deadline: Instant,
    config: &TcpConfig,
    layer: L,
) -> Result<Vec<(Rank, L::Stream)>, TransportError> {
    let expected = me.size - me.rank - 1;
    let mut got: Vec<(Rank, L::Stream)> = Vec::with_capacity(expected);
    let mut hellos = JoinSet::new();
    while got.len() < expected {
        tokio::select! {
            acc = listener.accept() => match acc {
                Ok((s, from)) => {
                    let me = (me, Dialers::Above);
                    hellos.spawn(answer_hello(s, from, me, config.job_key.clone(), layer.clone()));
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

/// Secures a stream from `from` and runs the acceptor's side of the
/// handshake on it: `None` (said) for anything that is not a proven peer.
async fn answer_hello<L: Layer>(
    s: TcpStream,
    from: SocketAddr,
    me: (Hello, Dialers),
    key: DataKey,
    layer: L,
) -> Option<(Rank, L::Stream)> {
    let mut s = secured(s, from, &layer).await?;
    greet::answer(&mut s, from, me, &key)
        .await
        .map(|rank| (rank, s))
}

/// An accepted connection from `from` under `layer` (its TLS session, if
/// any): `None` (said) where it does not make one in time.
pub(crate) async fn secured<L: Layer>(
    s: TcpStream,
    from: SocketAddr,
    layer: &L,
) -> Option<L::Stream> {
    let _ = s.set_nodelay(true);
    match tokio::time::timeout(HELLO_TIMEOUT, layer.accept(s)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(why)) => {
            greet::refused(from, &why);
            None
        }
        Err(_) => {
            greet::refused(from, "no TLS handshake in time");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_of_a_host_with_more_ranks_than_cpus_sleep_at_once_and_told_ones_on_larger_rings() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(!crowded(1));
        assert!(!crowded(cpus));
        assert!(crowded(cpus + 1));
        let cfg = ShmConfig {
            ring_bytes: 1 << 16,
            ..ShmConfig::default()
        };
        let calm = spun(cfg, false);
        assert_eq!((calm.spin, calm.ring_bytes), (cfg.spin, cfg.ring_bytes));
        // A crowded host's links sleep at once on the rings they had
        // (a new pair's segment, allocated whole, costs a reset of many
        // ranks little); links told to sleep at once get room for a bucket.
        let packed = spun(cfg, true);
        assert_eq!(packed.spin, Duration::ZERO);
        assert_eq!(
            (packed.ring_bytes, packed.enabled),
            (cfg.ring_bytes, cfg.enabled)
        );
        let told = ShmConfig {
            spin: Duration::ZERO,
            ..cfg
        };
        assert_eq!(spun(told, false).ring_bytes, cfg.busy_ring_bytes);
        assert_eq!(spun(told, true).ring_bytes, cfg.busy_ring_bytes);
        // A ring asked larger stays so.
        let large = ShmConfig {
            ring_bytes: 64 << 20,
            ..told
        };
        assert_eq!(spun(large, true).ring_bytes, 64 << 20);
    }
}
