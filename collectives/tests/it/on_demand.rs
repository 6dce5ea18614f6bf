//! Connections on demand (`TcpConfig::on_demand`, `QuicConfig::on_demand`)
//! over TCP, shared memory, TLS and QUIC: the collective grid; every algorithm's results bit for bit
//! those of the full mesh (inputs whose sums depend on the order of the
//! additions); only the links the collectives need (a ring's two, recursive
//! doubling's partners), one a pair even when both ends dial at once; a
//! lost peer reaching ranks never linked to it; a dead peer and another
//! job's key refused by name.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use collectives::{
    AllreduceAlgorithm, BroadcastAlgorithm, CollectiveError, CollectiveOptions, Communicator,
    DataPlane, Generation, QuicConfig, QuicEndpoint, QuicTransport, ReduceOp, ShmConfig, TcpConfig,
    TcpEndpoint, TlsEndpoint, TlsTransport, Transport, TransportError, bf16, f16,
};
use common::mesh::{self as mesh_checks, Granted};
use common::*;
use control::{DataKey, LeafPublicKey, TlsGrant};
use futures::future::join_all;

const LOCAL: &str = "127.0.0.1:0";
pub(crate) const KEY: [u8; 32] = [0xD3; 32];

/// TCP settings for the tests: the job's key, page-sized shared-memory
/// rings (large messages wrap them many times), on demand or not.
pub(crate) fn config(on_demand: bool, shm: bool) -> TcpConfig {
    TcpConfig {
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        job_key: DataKey::new(KEY),
        shared_memory: ShmConfig {
            enabled: shm,
            // Rings of a page: large messages wrap them many times.
            ring_bytes: 4096,
            busy_ring_bytes: 4096,
            ..Default::default()
        },
        on_demand,
        ..Default::default()
    }
}

async fn tcp(n: usize, g: Generation, cfg: &TcpConfig) -> Vec<DataPlane> {
    let ts = mesh_checks::tcp_world(&vec![cfg.clone(); n], g).await;
    ts.into_iter().map(DataPlane::from).collect()
}

/// The TLS endpoint, connecting on demand.
struct OnDemandTls(TlsEndpoint);

impl Granted for OnDemandTls {
    type T = TlsTransport;

    async fn bind() -> Self {
        let ep = TlsEndpoint::bind(LOCAL.parse().unwrap(), config(true, false));
        OnDemandTls(ep.await.unwrap())
    }

    fn addr(&self) -> SocketAddr {
        self.0.local_addr().unwrap()
    }

    fn key(&self) -> LeafPublicKey {
        self.0.public_key()
    }

    fn take(&mut self, grant: &TlsGrant) {
        let within = Duration::from_secs(10);
        self.0.prepare(DataKey::new(KEY), grant, within).unwrap();
    }

    async fn join(
        self,
        rank: usize,
        g: Generation,
        peers: &[SocketAddr],
    ) -> Result<TlsTransport, TransportError> {
        self.0.connect(rank, g, peers).await
    }
}

/// The QUIC endpoint, connecting on demand.
struct OnDemandQuic(QuicEndpoint);

impl Granted for OnDemandQuic {
    type T = QuicTransport;

    async fn bind() -> Self {
        let cfg = QuicConfig {
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(20),
            on_demand: true,
            ..Default::default()
        };
        OnDemandQuic(
            QuicEndpoint::bind(LOCAL.parse().unwrap(), cfg)
                .await
                .unwrap(),
        )
    }

    fn addr(&self) -> SocketAddr {
        self.0.local_addr().unwrap()
    }

    fn key(&self) -> LeafPublicKey {
        self.0.public_key()
    }

    fn take(&mut self, grant: &TlsGrant) {
        let within = Duration::from_secs(10);
        self.0.prepare(DataKey::new(KEY), grant, within).unwrap();
    }

    async fn join(
        self,
        rank: usize,
        g: Generation,
        peers: &[SocketAddr],
    ) -> Result<QuicTransport, TransportError> {
        self.0.connect(rank, g, peers).await
    }
}

/// The grid's world: TCP with shared memory between these ranks, on demand.
struct World;

impl common::grid::World for World {
    async fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<DataPlane>> {
        let ts = tcp(n, Generation(1), &config(true, true)).await;
        common::grid::communicators(ts, opts)
    }
}

crate::grid_tests!();

/// How a world of `n` is made, for the comparisons.
#[derive(Clone, Copy, Debug)]
enum Plane {
    Tcp { on_demand: bool, shm: bool },
    Tls,
    Quic,
}

async fn world(plane: Plane, n: usize, opts: &CollectiveOptions) -> Vec<Communicator<DataPlane>> {
    common::grid::communicators(planes(plane, n, Generation(7)).await, opts)
}

/// The transports of a world of `n` in generation `g`.
async fn planes(plane: Plane, n: usize, g: Generation) -> Vec<DataPlane> {
    match plane {
        Plane::Tcp { on_demand, shm } => tcp(n, g, &config(on_demand, shm)).await,
        Plane::Tls => {
            let ts = mesh_checks::mesh::<OnDemandTls>(n, g).await;
            ts.into_iter().map(DataPlane::from).collect()
        }
        Plane::Quic => {
            let ts = mesh_checks::mesh::<OnDemandQuic>(n, g).await;
            ts.into_iter().map(DataPlane::from).collect()
        }
    }
}

/// Every rank's results of the collectives under `opts`, in one vector
/// per rank: allreduce (sum, both lengths), reducescatter, allgather,
/// broadcast from the last rank, alltoall.
async fn results(comms: &[Communicator<DataPlane>]) -> Vec<Vec<f32>> {
    let n = comms.len();
    let input =
        |r: usize, len: usize| -> Vec<f32> { (0..len).map(|i| noisy(r, i) as f32).collect() };
    let mut out: Vec<Vec<f32>> = vec![Vec::new(); n];
    for len in [1000, 100_003] {
        let mut bufs: Vec<Vec<f32>> = (0..n).map(|r| input(r, len)).collect();
        let res = with_buffers(comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
        res.into_iter().for_each(|r| r.expect("allreduce"));
        out.iter_mut().zip(bufs).for_each(|(o, b)| o.extend(b));
    }
    let counts = collectives::schedule::even_counts(5003, n);
    let mut bufs: Vec<Vec<f32>> = (0..n).map(|r| input(r, 5003)).collect();
    let res = with_buffers(comms, &mut bufs, |c, b| {
        c.reducescatter(b, &counts, ReduceOp::Sum)
    });
    let mine: Vec<_> = res
        .await
        .into_iter()
        .map(|r| r.expect("reducescatter"))
        .collect();
    for ((o, b), mine) in out.iter_mut().zip(&bufs).zip(mine) {
        o.extend(&b[mine]);
    }
    let ins: Vec<Vec<f32>> = (0..n).map(|r| input(r, 777)).collect();
    for got in on_every_rank(comms, |c| c.allgather(&ins[c.rank()])).await {
        out[0].extend(got.expect("allgather").0);
    }
    let mut bufs: Vec<Vec<f32>> = (0..n).map(|r| input(r, 30_001)).collect();
    let res = with_buffers(comms, &mut bufs, |c, b| c.broadcast(b, n - 1)).await;
    res.into_iter().for_each(|r| r.expect("broadcast"));
    out.iter_mut().zip(bufs).for_each(|(o, b)| o.extend(b));
    let sends = vec![3; n];
    let ins: Vec<Vec<f32>> = (0..n).map(|r| input(r, 3 * n)).collect();
    let got = on_every_rank(comms, |c| c.alltoall(&ins[c.rank()], &sends)).await;
    for (o, g) in out.iter_mut().zip(got) {
        o.extend(g.expect("alltoall").0);
    }
    out
}

fn bits(v: &[Vec<f32>]) -> Vec<Vec<u32>> {
    v.iter()
        .map(|r| r.iter().map(|x| x.to_bits()).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_gives_the_full_meshs_bits() {
    let full = Plane::Tcp {
        on_demand: false,
        shm: false,
    };
    let planes = [
        Plane::Tcp {
            on_demand: true,
            shm: false,
        },
        Plane::Tcp {
            on_demand: true,
            shm: true,
        },
        Plane::Tls,
        Plane::Quic,
    ];
    for n in [3, 5] {
        for (name, opts) in common::grid::variants() {
            let comms = world(full, n, &opts).await;
            let want = bits(&results(&comms).await);
            shutdown_all(comms).await;
            for plane in planes {
                let comms = world(plane, n, &opts).await;
                let got = bits(&results(&comms).await);
                assert!(got == want, "{plane:?}, {n} ranks, {name}: other bits");
                shutdown_all(comms).await;
            }
        }
    }
}

async fn links_after_allreduce(
    n: usize,
    algorithm: AllreduceAlgorithm,
    plane: Plane,
) -> Vec<usize> {
    let opts = CollectiveOptions {
        allreduce: algorithm,
        broadcast: BroadcastAlgorithm::Chain,
        ..Default::default()
    };
    let comms = world(plane, n, &opts).await;
    for len in [10, 100_000] {
        let mut bufs = vec![vec![1.0f32; len]; n];
        let res = with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
        res.into_iter().for_each(|r| r.expect("allreduce"));
        assert!(bufs.iter().flatten().all(|&x| x == n as f32));
    }
    let links = comms.iter().map(|c| link_count(c.transport())).collect();
    shutdown_all(comms).await;
    links
}

fn link_count(t: &DataPlane) -> usize {
    match t {
        DataPlane::Tcp(t) => t.link_count(),
        DataPlane::Quic(t) => t.link_count(),
        other => panic!("not TCP or QUIC: {other:?}"),
    }
}

/// The planes whose links are counted: TCP with and without shared
/// memory, and QUIC.
const COUNTED: [Plane; 3] = [
    Plane::Tcp {
        on_demand: true,
        shm: false,
    },
    Plane::Tcp {
        on_demand: true,
        shm: true,
    },
    Plane::Quic,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_links_each_rank_to_its_two_neighbours_only() {
    for plane in COUNTED {
        let links = links_after_allreduce(8, AllreduceAlgorithm::Ring, plane).await;
        assert_eq!(links, vec![2; 8], "{plane:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_doubling_links_each_rank_to_its_partners_only() {
    for plane in COUNTED {
        let links = links_after_allreduce(16, AllreduceAlgorithm::RecursiveDoubling, plane).await;
        // Four partners, each exchanging with this rank at once (the two
        // dials cross, one link is kept); the full mesh holds 15.
        assert_eq!(links, vec![4; 16], "{plane:?}");
    }
}

/// Rank 0 is dropped (its process died); a ring allreduce of the others
/// fails on every one of them with a loss, not a timeout, though only
/// ranks 1 and 3 were ever linked to it: the loss travels along the links.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_peer_reaches_ranks_never_linked_to_it() {
    for plane in [COUNTED[0], Plane::Quic] {
        a_lost_peer_reaches_the_others(plane).await;
    }
}

async fn a_lost_peer_reaches_the_others(plane: Plane) {
    let n = 4;
    let opts = CollectiveOptions {
        allreduce: AllreduceAlgorithm::Ring,
        ..Default::default()
    };
    let mut comms = common::grid::communicators(planes(plane, n, Generation(3)).await, &opts);
    let mut bufs = vec![vec![1.0f32; 1000]; n];
    let res = with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
    res.into_iter().for_each(|r| r.expect("first allreduce"));
    drop(comms.remove(0));
    let mut bufs = vec![vec![1.0f32; 1000]; n - 1];
    let res = with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
    for (r, got) in res.into_iter().enumerate() {
        match got {
            Err(CollectiveError::Transport(TransportError::PeerLost { .. })) => {}
            other => panic!("{plane:?}, rank {}: {other:?}", r + 1),
        }
    }
}

/// A peer where nothing listens is a connect error naming both ranks,
/// once a send needs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_peer_is_a_connect_error_when_first_needed() {
    let cfg = config(true, false);
    let alive = TcpEndpoint::bind(LOCAL.parse().unwrap(), cfg.clone())
        .await
        .unwrap();
    // A port held without listening: dials to it are refused, and no
    // other process can take it meanwhile.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind(LOCAL.parse().unwrap()).unwrap();
    let addrs = [held.local_addr().unwrap(), alive.local_addr().unwrap()];
    let t = alive
        .connect(1, Generation(4), &addrs)
        .await
        .expect("no set-up to fail");
    let tag = collectives::Tag::new(Generation(4), 1, 0);
    let err = tokio::time::timeout(DEADLINE, t.send(0, tag, b"x"))
        .await
        .expect("hung");
    match err {
        Err(TransportError::Connect {
            from: 1, rank: 0, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let later = t.recv(0, tag).await;
    assert!(later.is_err(), "the generation is broken: {later:?}");
}

/// A rank with another job's key is refused at its first dial, and says so
/// naming the peer; the acceptor's other links are undisturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_jobs_rank_is_refused_at_its_first_dial() {
    let ours = config(true, false);
    let theirs = TcpConfig {
        job_key: DataKey::new([0x01; 32]),
        ..ours.clone()
    };
    let mut eps = Vec::new();
    for cfg in [&ours, &ours, &theirs] {
        eps.push(
            TcpEndpoint::bind(LOCAL.parse().unwrap(), cfg.clone())
                .await
                .unwrap(),
        );
    }
    let addrs: Vec<SocketAddr> = eps.iter().map(|e| e.local_addr().unwrap()).collect();
    let mut ts = Vec::new();
    for (r, e) in eps.into_iter().enumerate() {
        ts.push(Arc::new(e.connect(r, Generation(5), &addrs).await.unwrap()));
    }
    let tag = collectives::Tag::new(Generation(5), 1, 0);
    match ts[2].send(0, tag, b"x").await {
        Err(TransportError::Handshake { rank: 0, .. }) => {}
        other => panic!("{other:?}"),
    }
    let (sent, got) = tokio::join!(ts[1].send(0, tag, b"ours"), ts[0].recv(1, tag));
    sent.unwrap();
    assert_eq!(&got.unwrap()[..], b"ours");
}

/// Two ranks that send to each other at once dial each other at once: one
/// link is kept (the higher rank's), and a peer leaving cleanly departs
/// after its last message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossed_dials_keep_one_link_and_a_clean_leave_departs() {
    for round in 0..21u64 {
        let plane = COUNTED[round as usize % COUNTED.len()];
        let mut ts = planes(plane, 2, Generation(6)).await;
        let (b, a) = (ts.pop().unwrap(), ts.pop().unwrap());
        let tag = collectives::Tag::new(Generation(6), round, 0);
        let (x, y) = tokio::join!(a.send(1, tag, b"a"), b.send(0, tag, b"b"));
        x.unwrap();
        y.unwrap();
        for t in [&a, &b] {
            assert_eq!(link_count(t), 1, "round {round}, {plane:?}");
        }
        let last = collectives::Tag::new(Generation(6), round, 1);
        b.send(0, last, b"last").await.unwrap();
        b.shutdown().await;
        assert_eq!(&a.recv(1, tag).await.unwrap()[..], b"b");
        assert_eq!(&a.recv(1, last).await.unwrap()[..], b"last");
        let more = a
            .recv(1, collectives::Tag::new(Generation(6), round, 2))
            .await;
        match more {
            Err(TransportError::PeerLost { rank: 1, cause, .. }) => {
                assert_eq!(
                    cause,
                    collectives::LossCause::Departed,
                    "round {round}, {plane:?}"
                );
            }
            other => panic!("round {round}, {plane:?}: {other:?}"),
        }
        a.shutdown().await;
    }
}

/// A generation its owner ends (a reset: the breaker) keeps its links: its
/// peers see no loss from it, only its goodbye once it shuts down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_generation_keeps_its_links() {
    let g = Generation(8);
    let opts = CollectiveOptions {
        allreduce: AllreduceAlgorithm::Ring,
        ..Default::default()
    };
    let comms = common::grid::communicators(tcp(3, g, &config(true, false)).await, &opts);
    let mut bufs = vec![vec![1.0f32; 100]; 3];
    let res = with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
    res.into_iter().for_each(|r| r.expect("allreduce"));
    let mut ts: Vec<DataPlane> = comms
        .into_iter()
        .map(Communicator::into_transport)
        .collect();
    let ended = ts.remove(1);
    ended.end("the next generation");
    let tag = collectives::Tag::new(g, 1 << 20, 0);
    let (sent, got) = tokio::join!(ts[1].send(0, tag, b"still"), ts[0].recv(2, tag));
    sent.unwrap();
    assert_eq!(
        &got.unwrap()[..],
        b"still",
        "rank 2 to rank 0 after rank 1 ended"
    );
    ended.shutdown().await;
    match ts[0].recv(1, collectives::Tag::new(g, 1 << 20, 1)).await {
        Err(TransportError::PeerLost { rank: 1, cause, .. }) => {
            assert_eq!(cause, collectives::LossCause::Departed);
        }
        other => panic!("{other:?}"),
    }
    join_all(ts.into_iter().map(Transport::shutdown)).await;
}
