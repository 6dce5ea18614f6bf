//! The TLS-over-TCP data plane on 127.0.0.1: the collective grid over it,
//! mutual TLS under the job's authority (certificates of another job,
//! expired or missing are refused and the job is undisturbed), a plain TCP
//! peer and garbage refused, and a lost peer. These ranks share one host,
//! so shared memory is off (every byte over TLS) except where the tests
//! check it: peers that share memory inside their sessions.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use collectives::{
    Generation, ShmConfig, TcpConfig, TcpEndpoint, TlsEndpoint, TlsTransport, TransportError, bf16,
    f16,
};
use common::mesh as mesh_checks;
use common::mesh::{Granted, arcs, assert_sums, connect_all, grant, job_ca};
use control::{DataKey, LeafPublicKey, TlsGrant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCAL: &str = "127.0.0.1:0";
/// Guards waits that must end by themselves; never a bound on their speed.
const HANG: Duration = Duration::from_secs(60);
const KEY: [u8; 32] = [0xE2; 32];

/// The test's settings, shared memory off: peers on this host talk TLS.
fn config() -> TcpConfig {
    let on = shared_config();
    TcpConfig {
        shared_memory: ShmConfig {
            enabled: false,
            ..on.shared_memory
        },
        ..on
    }
}

/// The test's settings with shared memory on.
fn shared_config() -> TcpConfig {
    TcpConfig {
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        job_key: DataKey::new(KEY),
        ..Default::default()
    }
}

impl Granted for TlsEndpoint {
    type T = TlsTransport;

    async fn bind() -> Self {
        TlsEndpoint::bind(LOCAL.parse().unwrap(), config())
            .await
            .unwrap()
    }

    fn addr(&self) -> SocketAddr {
        self.local_addr().unwrap()
    }

    fn key(&self) -> LeafPublicKey {
        self.public_key()
    }

    fn take(&mut self, grant: &TlsGrant) {
        self.prepare(DataKey::new(KEY), grant, Duration::from_secs(10))
            .unwrap();
    }

    async fn join(
        self,
        rank: usize,
        g: Generation,
        peers: &[SocketAddr],
    ) -> Result<TlsTransport, TransportError> {
        self.connect(rank, g, peers).await
    }
}

async fn mesh(n: usize, g: Generation) -> Vec<TlsTransport> {
    mesh_checks::mesh::<TlsEndpoint>(n, g).await
}

async fn granted(n: usize, g: Generation) -> (Vec<TlsEndpoint>, Vec<SocketAddr>) {
    mesh_checks::granted::<TlsEndpoint>(n, g).await
}

type World = mesh_checks::MeshWorld<TlsEndpoint>;

crate::grid_tests!();

/// Every rank's allreduce of `len` copies of its rank + 1 gives the sum.
async fn assert_sums_over(ts: &[Arc<TlsTransport>], len: usize) {
    assert_sums(mesh_checks::sums_of_ranks(ts, len).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_of_another_job_and_expired_ones_are_refused() {
    mesh_checks::other_jobs_and_expired_leaves_are_refused::<TlsEndpoint>().await;
}

/// A dialer that is granted rank 1's leaf but dials as rank 0's peer of
/// another generation is refused: by its own check of rank 0's name, or,
/// when rank 0's check of its leaf comes first, by rank 0 resetting the
/// connection mid-handshake (which side checks first is a race).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_generation_is_refused_by_name() {
    let (eps, addrs) = granted(2, Generation(7)).await;
    let ca = job_ca(1);
    let mut stale = TlsEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    grant(&mut stale, &ca, 1, Generation(6));
    let a = &addrs;
    let (refused, ts) = tokio::join!(
        stale.connect(1, Generation(6), a),
        connect_all(eps, a, Generation(7))
    );
    let refused = refused.unwrap_err();
    let reset_by_rank_0 = matches!(&refused, TransportError::Connect { rank: 0, source, .. }
        if source.kind() == std::io::ErrorKind::ConnectionReset);
    assert!(
        matches!(&refused, TransportError::Tls { rank: 0, .. }) || reset_by_rank_0,
        "{refused:?}"
    );
    assert_sums_over(&arcs(ts), 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_a_certificate_is_refused() {
    let g = Generation(6);
    let ca = job_ca(1);
    let (eps, addrs) = granted(2, g).await;
    // Trusts the job's authority, so the server's leaf passes; shows none.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.certificate().to_vec().into()).unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![b"elasticrun-data/1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let probe = async {
        let s = tokio::net::TcpStream::connect(addrs[0]).await?;
        let name = "r0.g6.elasticrun".try_into().unwrap();
        // TLS 1.3: the client's handshake completes before the server has
        // checked its certificate; the refusal is the first thing it reads.
        let mut s = connector.connect(name, s).await?;
        let mut challenge = [0u8; 40];
        s.read_exact(&mut challenge).await.map(|_| challenge)
    };
    let a = &addrs;
    let (refused, ts) = tokio::join!(tokio::time::timeout(HANG, probe), connect_all(eps, a, g));
    // Refused: the acceptor ends the session (with TLS's alert, or
    // without, if the connection closes before the alert is read).
    let refused = refused.expect("hung").unwrap_err();
    println!("refused: {refused}");
    assert_sums_over(&arcs(ts), 300_000).await;
}

/// A peer of the plain TCP data plane (right job key, no TLS) and a
/// connection that sends garbage are refused; the job trains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_tcp_and_garbage_are_refused() {
    let seed: u64 = 0x5eed_0020;
    println!("seed {seed:#x}");
    let g = Generation(8);
    let (eps, addrs) = granted(2, g).await;
    let plain = TcpEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    let garbage = async {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut junk = vec![0u8; 4096];
        rng.fill(&mut junk[..]);
        let mut s = tokio::net::TcpStream::connect(addrs[0]).await.unwrap();
        let _ = s.write_all(&junk).await;
        // The acceptor closes the connection: reads end.
        let mut sink = Vec::new();
        tokio::time::timeout(HANG, s.read_to_end(&mut sink))
            .await
            .expect("a garbage connection was kept open")
    };
    let a = &addrs;
    let (refused, _, ts) = tokio::join!(plain.connect(1, g, a), garbage, connect_all(eps, a, g));
    let refused = refused.unwrap_err();
    assert!(
        !matches!(refused, TransportError::InvalidRank { .. }),
        "{refused:?}"
    );
    println!("plain TCP peer: {refused}");
    assert_sums_over(&arcs(ts), 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_peer_is_lost_to_the_others_at_once() {
    mesh_checks::survivors_lose_the_dropped_peer(mesh(3, Generation(2)).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_mib_and_a_clean_leave_get_through() {
    let ts: Vec<Arc<TlsTransport>> = mesh(2, Generation(3))
        .await
        .into_iter()
        .map(Arc::new)
        .collect();
    assert_sums_over(&ts, 4 << 20).await;
    let [a, b]: [Arc<TlsTransport>; 2] = ts.try_into().unwrap();
    let leaver = Arc::into_inner(b).unwrap();
    mesh_checks::a_clean_leave_delivers_its_last_message(&*a, leaver, Generation(3)).await;
}

/// A TLS endpoint with shared memory on.
struct Shared(TlsEndpoint);

impl Granted for Shared {
    type T = TlsTransport;

    async fn bind() -> Self {
        let ep = TlsEndpoint::bind(LOCAL.parse().unwrap(), shared_config());
        Shared(ep.await.unwrap())
    }

    fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    fn key(&self) -> LeafPublicKey {
        self.0.key()
    }

    fn take(&mut self, grant: &TlsGrant) {
        self.0.take(grant);
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

/// Ranks of one host agree on shared memory inside their TLS sessions
/// (every pair of 3), sum exactly over it, and 16 MiB and a clean leave
/// get through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_on_one_host_share_memory_inside_their_sessions() {
    let ts: Vec<Arc<TlsTransport>> = mesh_checks::mesh::<Shared>(3, Generation(4))
        .await
        .into_iter()
        .map(Arc::new)
        .collect();
    for (r, t) in ts.iter().enumerate() {
        let others: Vec<usize> = (0..3).filter(|&p| p != r).collect();
        assert_eq!(t.shared_memory_peers(), &others[..], "rank {r}");
    }
    assert_sums_over(&ts, 1000).await;
    assert_sums_over(&ts, 4 << 20).await;
    let mut ts = ts;
    let leaver = Arc::into_inner(ts.remove(1)).unwrap();
    mesh_checks::a_clean_leave_delivers_its_last_message(&*ts[0], leaver, Generation(4)).await;
}

/// A peer on shared memory that is dropped is lost to the others at once:
/// its socket, kept under the ended TLS session, is the proof of life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_peer_on_shared_memory_is_lost_at_once() {
    let ts = mesh_checks::mesh::<Shared>(3, Generation(5)).await;
    assert_eq!(ts[0].shared_memory_peers(), &[1, 2]);
    mesh_checks::survivors_lose_the_dropped_peer(ts).await;
}

/// An outsider with another job's leaf is refused by peers that share
/// memory: the offer is made only inside a proven session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_sharing_memory_still_refuse_other_jobs() {
    mesh_checks::other_jobs_and_expired_leaves_are_refused::<Shared>().await;
}
