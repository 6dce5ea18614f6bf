//! The TLS-over-TCP data plane on 127.0.0.1: the collective grid over it,
//! mutual TLS under the job's authority (certificates of another job,
//! expired or missing are refused and the job is undisturbed), a plain TCP
//! peer and garbage refused, and a lost peer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use collectives::{
    CollectiveOptions, Communicator, Generation, ReduceOp, TcpConfig, TcpEndpoint, TlsEndpoint,
    TlsTransport, Transport, TransportError, bf16, f16,
};
use control::pki::JobCa;
use control::{DataKey, Secret};
use futures::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCAL: &str = "127.0.0.1:0";
/// Guards waits that must end by themselves; never a bound on their speed.
const HANG: Duration = Duration::from_secs(60);
const KEY: [u8; 32] = [0xE2; 32];

fn secret(job: u8) -> Secret {
    Secret::from_hex(&format!("{job:02x}").repeat(32)).unwrap()
}

fn config() -> TcpConfig {
    TcpConfig {
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        job_key: DataKey::new(KEY),
        ..Default::default()
    }
}

async fn endpoints(n: usize) -> (Vec<TlsEndpoint>, Vec<SocketAddr>) {
    let mut eps = Vec::new();
    for _ in 0..n {
        eps.push(
            TlsEndpoint::bind(LOCAL.parse().unwrap(), config())
                .await
                .unwrap(),
        );
    }
    let addrs = eps.iter().map(|e| e.local_addr().unwrap()).collect();
    (eps, addrs)
}

/// Grants rank `rank` of generation `g` its leaf from `ca`.
fn grant(ep: &mut TlsEndpoint, ca: &JobCa, rank: usize, g: Generation) {
    let grant = ca.grant(&ep.public_key(), rank, g).unwrap();
    ep.prepare(DataKey::new(KEY), &grant, Duration::from_secs(10))
        .unwrap();
}

/// The endpoints of a job of `n` ranks in generation `g`, granted.
async fn granted(n: usize, g: Generation) -> (Vec<TlsEndpoint>, Vec<SocketAddr>) {
    let ca = JobCa::from_secret(&secret(1)).unwrap();
    let (mut eps, addrs) = endpoints(n).await;
    for (r, ep) in eps.iter_mut().enumerate() {
        grant(ep, &ca, r, g);
    }
    (eps, addrs)
}

async fn connect_all(
    eps: Vec<TlsEndpoint>,
    addrs: &[SocketAddr],
    g: Generation,
) -> Vec<Result<TlsTransport, TransportError>> {
    join_all(
        eps.into_iter()
            .enumerate()
            .map(|(r, e)| e.connect(r, g, addrs)),
    )
    .await
}

async fn mesh(n: usize, g: Generation) -> Vec<TlsTransport> {
    let (eps, addrs) = granted(n, g).await;
    let ts = connect_all(eps, &addrs, g).await;
    ts.into_iter().map(|t| t.expect("mesh set-up")).collect()
}

struct World;

impl common::grid::World for World {
    type T = TlsTransport;

    async fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<TlsTransport>> {
        mesh(n, Generation(1))
            .await
            .into_iter()
            .map(|t| Communicator::new(t, opts.clone()))
            .collect()
    }
}

crate::grid_tests!();

/// Each rank allreduces `len` copies of its rank + 1; every result must be
/// the sum of the ranks + 1.
async fn assert_sums_over(ts: &[Arc<TlsTransport>], len: usize) {
    let comms: Vec<_> = ts
        .iter()
        .map(|t| Communicator::new(t.clone(), CollectiveOptions::default()))
        .collect();
    let runs = comms.iter().map(|c| async move {
        let mut b = vec![c.rank() as f32 + 1.0; len];
        c.allreduce(&mut b, ReduceOp::Sum).await.map(|()| b)
    });
    let res = tokio::time::timeout(HANG, join_all(runs))
        .await
        .expect("allreduce hung");
    let n = res.len();
    let want = (n * (n + 1) / 2) as f32;
    for r in res {
        assert!(r.unwrap().iter().all(|&x| x == want));
    }
}

fn arcs(ts: Vec<Result<TlsTransport, TransportError>>) -> Vec<Arc<TlsTransport>> {
    ts.into_iter()
        .map(|t| Arc::new(t.expect("the job's own mesh")))
        .collect()
}

/// Rank 0 and 1 of a job; an outsider granted by `outsider_ca` with
/// validity `valid` tries to join as rank 1 as well. The outsider must fail
/// with a TLS error naming rank 0's address, and the job must train.
async fn outsider_refused(outsider_ca: &JobCa, valid: Option<(SystemTime, SystemTime)>) -> String {
    let g = Generation(4);
    let (eps, addrs) = granted(2, g).await;
    let mut outsider = TlsEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    let og = match valid {
        Some((from, to)) => outsider_ca.grant_valid(&outsider.public_key(), 1, g, from, to),
        None => outsider_ca.grant(&outsider.public_key(), 1, g),
    };
    outsider
        .prepare(DataKey::new(KEY), &og.unwrap(), Duration::from_secs(10))
        .unwrap();
    let a = &addrs;
    let (refused, ts) = tokio::join!(outsider.connect(1, g, a), connect_all(eps, a, g));
    let refused = refused.unwrap_err();
    let TransportError::Tls { rank, addr, reason } = &refused else {
        panic!("the outsider got {refused:?}, not a TLS refusal");
    };
    assert_eq!((*rank, *addr), (0, addrs[0]), "{refused}");
    assert_sums_over(&arcs(ts), 300_000).await;
    reason.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_another_job_is_refused() {
    let other = JobCa::from_secret(&secret(2)).unwrap();
    let reason = outsider_refused(&other, None).await;
    println!("refused: {reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused() {
    let ca = JobCa::from_secret(&secret(1)).unwrap();
    let day = Duration::from_secs(86_400);
    let now = SystemTime::now();
    let reason = outsider_refused(&ca, Some((now - 3 * day, now - day))).await;
    println!("refused: {reason}");
}

/// A dialer that is granted rank 1's leaf but dials as rank 0's peer of
/// another generation is refused by its own check of rank 0's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_another_generation_is_refused_by_name() {
    let (eps, addrs) = granted(2, Generation(7)).await;
    let ca = JobCa::from_secret(&secret(1)).unwrap();
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
    assert!(
        matches!(&refused, TransportError::Tls { rank: 0, .. }),
        "{refused:?}"
    );
    assert_sums_over(&arcs(ts), 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_a_certificate_is_refused() {
    let g = Generation(6);
    let ca = JobCa::from_secret(&secret(1)).unwrap();
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
    let mut ts = mesh(3, Generation(2)).await;
    drop(ts.pop().unwrap());
    let comms: Vec<_> = ts
        .into_iter()
        .map(|t| Communicator::new(t, CollectiveOptions::default()))
        .collect();
    let runs = comms.iter().map(|c| async move {
        let mut b = vec![1.0f32; 1000];
        c.allreduce(&mut b, ReduceOp::Sum).await
    });
    let res = tokio::time::timeout(HANG, join_all(runs))
        .await
        .expect("hung");
    for r in res {
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                collectives::CollectiveError::Transport(TransportError::PeerLost { .. })
            ),
            "{e:?}"
        );
    }
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
    let tag = collectives::Tag::new(Generation(3), 9, 0);
    let big = vec![7u8; 3 << 20];
    leaver.send(0, tag, &big).await.unwrap();
    leaver.shutdown().await;
    let got = tokio::time::timeout(HANG, a.recv(1, tag))
        .await
        .expect("hung");
    assert_eq!(got.unwrap().len(), big.len());
    let next = collectives::Tag::new(Generation(3), 9, 1);
    let e = tokio::time::timeout(HANG, a.recv(1, next))
        .await
        .expect("hung")
        .unwrap_err();
    assert!(matches!(e, TransportError::PeerLost { .. }), "{e:?}");
}
