//! The QUIC data plane on 127.0.0.1: the collective grid over it, mutual TLS
//! under the job's authority (certificates of another job, expired or
//! missing are refused and the job is undisturbed), garbage datagrams and
//! handshake floods at its port, and a lost peer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use collectives::{
    CollectiveOptions, Communicator, Generation, QuicConfig, QuicEndpoint, QuicTransport, ReduceOp,
    Transport, TransportError, bf16, f16,
};
use control::pki::JobCa;
use control::{DataKey, Secret};
use futures::future::join_all;

const LOCAL: &str = "127.0.0.1:0";
/// Guards waits that must end by themselves; never a bound on their speed.
const HANG: Duration = Duration::from_secs(60);

fn secret(job: u8) -> Secret {
    Secret::from_hex(&format!("{job:02x}").repeat(32)).unwrap()
}

fn config() -> QuicConfig {
    QuicConfig {
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        job_key: DataKey::new([0xE1; 32]),
        ..Default::default()
    }
}

async fn endpoints(n: usize) -> (Vec<QuicEndpoint>, Vec<SocketAddr>) {
    let mut eps = Vec::new();
    for _ in 0..n {
        eps.push(
            QuicEndpoint::bind(LOCAL.parse().unwrap(), config())
                .await
                .unwrap(),
        );
    }
    let addrs = eps.iter().map(|e| e.local_addr().unwrap()).collect();
    (eps, addrs)
}

/// Grants rank `rank` of generation `g` its leaf from `ca`.
fn grant(ep: &mut QuicEndpoint, ca: &JobCa, rank: usize, g: Generation) {
    let grant = ca.grant(&ep.public_key(), rank, g).unwrap();
    ep.prepare(DataKey::new([0xE1; 32]), &grant, Duration::from_secs(10))
        .unwrap();
}

async fn mesh(n: usize, g: Generation) -> Vec<QuicTransport> {
    let ca = JobCa::from_secret(&secret(1)).unwrap();
    let (mut eps, addrs) = endpoints(n).await;
    for (r, ep) in eps.iter_mut().enumerate() {
        grant(ep, &ca, r, g);
    }
    let addrs = &addrs;
    let ts = join_all(
        eps.into_iter()
            .enumerate()
            .map(|(r, e)| e.connect(r, g, addrs)),
    )
    .await;
    ts.into_iter().map(|t| t.expect("mesh set-up")).collect()
}

struct World;

impl common::grid::World for World {
    type T = QuicTransport;

    async fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<QuicTransport>> {
        mesh(n, Generation(1))
            .await
            .into_iter()
            .map(|t| Communicator::new(t, opts.clone()))
            .collect()
    }
}

crate::grid_tests!();

async fn sum_of_ranks(
    ts: &[Arc<QuicTransport>],
) -> Vec<Result<Vec<f32>, collectives::CollectiveError>> {
    sum_of_ranks_over(ts, 300_000).await
}

/// Each rank allreduces `len` copies of its rank + 1.
async fn sum_of_ranks_over(
    ts: &[Arc<QuicTransport>],
    len: usize,
) -> Vec<Result<Vec<f32>, collectives::CollectiveError>> {
    let comms: Vec<_> = ts
        .iter()
        .map(|t| Communicator::new(t.clone(), CollectiveOptions::default()))
        .collect();
    let runs = comms.iter().map(|c| async move {
        let mut b = vec![c.rank() as f32 + 1.0; len];
        c.allreduce(&mut b, ReduceOp::Sum).await.map(|()| b)
    });
    tokio::time::timeout(HANG, join_all(runs))
        .await
        .expect("allreduce hung")
}

fn assert_sums(res: Vec<Result<Vec<f32>, collectives::CollectiveError>>) {
    let n = res.len();
    let want = (n * (n + 1) / 2) as f32;
    for r in res {
        assert!(r.unwrap().iter().all(|&x| x == want));
    }
}

/// Rank 0 and 1 of a job; an outsider granted by `outsider_ca` with
/// validity `valid` tries to join as rank 1 as well. The outsider must fail
/// with a TLS error naming rank 0's address, and the job must train.
async fn outsider_refused(outsider_ca: &JobCa, valid: Option<(SystemTime, SystemTime)>) -> String {
    let g = Generation(4);
    let ca = JobCa::from_secret(&secret(1)).unwrap();
    let (mut eps, addrs) = endpoints(2).await;
    let mut outsider = QuicEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    let og = match valid {
        Some((from, to)) => outsider_ca.grant_valid(&outsider.public_key(), 1, g, from, to),
        None => outsider_ca.grant(&outsider.public_key(), 1, g),
    };
    outsider
        .prepare(
            DataKey::new([0xE1; 32]),
            &og.unwrap(),
            Duration::from_secs(10),
        )
        .unwrap();
    for (r, ep) in eps.iter_mut().enumerate() {
        grant(ep, &ca, r, g);
    }
    let a = &addrs;
    let (refused, ts) = tokio::join!(
        outsider.connect(1, g, a),
        join_all(eps.into_iter().enumerate().map(|(r, e)| e.connect(r, g, a)))
    );
    let refused = refused.unwrap_err();
    let TransportError::Tls { rank, addr, reason } = &refused else {
        panic!("the outsider got {refused:?}, not a TLS refusal");
    };
    assert_eq!((*rank, *addr), (0, addrs[0]), "{refused}");
    let ts: Vec<_> = ts
        .into_iter()
        .map(|t| Arc::new(t.expect("the job's own mesh")))
        .collect();
    assert_sums(sum_of_ranks(&ts).await);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_peer_is_lost_to_the_others_at_once() {
    let mut ts = mesh(3, Generation(2)).await;
    let dead = ts.pop().unwrap();
    drop(dead);
    let comms: Vec<_> = ts
        .into_iter()
        .map(|t| Communicator::new(t, CollectiveOptions::default()))
        .collect();
    // A world of 3 whose rank 2 is gone: every survivor's allreduce fails.
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

/// A mesh's first collective is a large one: the connections go at once to
/// the largest packets the path allows, and every packet must still get
/// through (with UDP segmentation offload batching two 65,000-byte packets,
/// the kernel refused every batch and the connection idled out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_collective_of_16_mib_gets_through() {
    let ts: Vec<Arc<QuicTransport>> = mesh(2, Generation(4))
        .await
        .into_iter()
        .map(Arc::new)
        .collect();
    assert_sums(sum_of_ranks_over(&ts, 4 << 20).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_leaves_cleanly_leaves_its_last_messages() {
    let mut ts = mesh(2, Generation(3)).await;
    let leaver = ts.pop().unwrap();
    let tag = collectives::Tag::new(Generation(3), 9, 0);
    let big = vec![7u8; 3 << 20];
    leaver.send(0, tag, &big).await.unwrap();
    leaver.shutdown().await;
    let got = tokio::time::timeout(HANG, ts[0].recv(1, tag))
        .await
        .expect("hung");
    assert_eq!(got.unwrap().len(), big.len());
    let e = tokio::time::timeout(
        HANG,
        ts[0].recv(1, collectives::Tag::new(Generation(3), 9, 1)),
    )
    .await
    .expect("hung")
    .unwrap_err();
    assert!(matches!(e, TransportError::PeerLost { .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_datagrams_and_a_handshake_flood_leave_the_job_training() {
    let seed: u64 = 0x5eed_0015;
    println!("seed {seed:#x}");
    let g = Generation(5);
    let ca = JobCa::from_secret(&secret(1)).unwrap();
    let (mut eps, addrs) = endpoints(2).await;
    for (r, ep) in eps.iter_mut().enumerate() {
        grant(ep, &ca, r, g);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let noise = tokio::spawn(flood(addrs.clone(), seed, stop.clone()));
    let a = &addrs;
    let ts: Vec<_> = join_all(eps.into_iter().enumerate().map(|(r, e)| e.connect(r, g, a)))
        .await
        .into_iter()
        .map(|t| Arc::new(t.expect("mesh set-up under noise")))
        .collect();
    for _ in 0..3 {
        assert_sums(sum_of_ranks(&ts).await);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = noise.await.unwrap();
    assert!(sent > 100, "only {sent} noise datagrams were sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_a_certificate_is_refused_after_its_handshake() {
    let g = Generation(6);
    let ca = JobCa::from_secret(&secret(1)).unwrap();
    let (mut eps, addrs) = endpoints(2).await;
    for (r, ep) in eps.iter_mut().enumerate() {
        grant(ep, &ca, r, g);
    }
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
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let client = quinn::Endpoint::client(LOCAL.parse().unwrap()).unwrap();
    let cfg = quinn::ClientConfig::new(Arc::new(crypto));
    let probe = async {
        // QUIC reports the connection established before the server has
        // checked the client's certificate: the refusal comes after.
        let conn = client
            .connect_with(cfg, addrs[0], "r0.g6.elasticrun")
            .unwrap()
            .await?;
        let (mut send, mut recv) = conn.open_bi().await?;
        let lost = |_| conn.close_reason().unwrap();
        send.write_all(b"ERDQ").await.map_err(lost)?;
        let mut challenge = [0u8; 40];
        recv.read_exact(&mut challenge)
            .await
            .map_err(|_| conn.close_reason().unwrap())?;
        Ok::<_, quinn::ConnectionError>(challenge)
    };
    let a = &addrs;
    let (refused, ts) = tokio::join!(
        tokio::time::timeout(HANG, probe),
        join_all(eps.into_iter().enumerate().map(|(r, e)| e.connect(r, g, a)))
    );
    let refused = refused.expect("hung").unwrap_err();
    assert!(
        refused.to_string().contains("certificate"),
        "refused for another reason: {refused}"
    );
    let ts: Vec<_> = ts
        .into_iter()
        .map(|t| Arc::new(t.expect("the job's own mesh")))
        .collect();
    assert_sums(sum_of_ranks(&ts).await);
}

/// Sends random datagrams and QUIC handshakes of clients with no
/// certificate at `addrs` until told to stop; returns the datagrams sent.
async fn flood(addrs: Vec<SocketAddr>, seed: u64, stop: Arc<std::sync::atomic::AtomicBool>) -> u64 {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let udp = tokio::net::UdpSocket::bind(LOCAL).await.unwrap();
    let client = no_cert_client();
    let mut sent = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for &to in &addrs {
            let len = rng.random_range(1..1500);
            let bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let _ = udp.send_to(&bytes, to).await;
            sent += 1;
            if sent.is_multiple_of(16) {
                let c = client.clone();
                tokio::spawn(async move {
                    if let Ok(conn) = c.connect(to, "r0.g5.elasticrun") {
                        let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
                    }
                });
            }
        }
        tokio::task::yield_now().await;
    }
    sent
}

/// A QUIC client that trusts nothing and presents no certificate.
fn no_cert_client() -> quinn::Endpoint {
    let mut ep = quinn::Endpoint::client(LOCAL.parse().unwrap()).unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    ep
}

/// Rank 1 of `a_rank_killed_with_sigkill_mid_collective_is_lost_within_the_idle_timeout`,
/// run as a child process of that test (ignored on its own): joins rank 0
/// at `QUIC_TEST_RANK0` and allreduces until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of another test"]
async fn quic_child_rank() {
    let rank0: SocketAddr = std::env::var("QUIC_TEST_RANK0").unwrap().parse().unwrap();
    let mut ep = QuicEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    let me = ep.local_addr().unwrap();
    grant(
        &mut ep,
        &JobCa::from_secret(&secret(1)).unwrap(),
        1,
        Generation(9),
    );
    println!("ADDR {me}");
    let t = ep.connect(1, Generation(9), &[rank0, me]).await.unwrap();
    let c = Communicator::new(t, CollectiveOptions::default());
    loop {
        let mut b = vec![1.0f32; 1 << 20];
        if c.allreduce(&mut b, ReduceOp::Sum).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_killed_with_sigkill_mid_collective_is_lost_within_the_idle_timeout() {
    use std::io::BufRead;
    let mut ep = QuicEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    let me = ep.local_addr().unwrap();
    grant(
        &mut ep,
        &JobCa::from_secret(&secret(1)).unwrap(),
        0,
        Generation(9),
    );
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "quic_child_rank", "--nocapture"])
        .env("QUIC_TEST_RANK0", me.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let peer = tokio::task::spawn_blocking(move || {
        let lines = std::io::BufReader::new(stdout).lines();
        lines.map_while(Result::ok).find_map(|l| {
            l.strip_prefix("ADDR ")
                .map(|a| a.parse::<SocketAddr>().unwrap())
        })
    });
    let peer = tokio::time::timeout(HANG, peer)
        .await
        .expect("the child's address")
        .unwrap();
    let peer = peer.expect("the child printed no address");
    let t = ep.connect(0, Generation(9), &[me, peer]).await.unwrap();
    let c = Communicator::new(t, CollectiveOptions::default());
    let mut b = vec![1.0f32; 1 << 20];
    c.allreduce(&mut b, ReduceOp::Sum).await.unwrap();
    assert!(b.iter().all(|&x| x == 2.0));
    let idle = config().idle_timeout;
    // Killed while its next collectives run: the kernel says nothing to
    // the survivor over UDP, so the loss is noticed by the idle timeout.
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        child.kill().unwrap();
        let killed_at = std::time::Instant::now();
        child.wait().unwrap();
        killed_at
    });
    let e = loop {
        let mut b = vec![1.0f32; 1 << 20];
        match tokio::time::timeout(HANG, c.allreduce(&mut b, ReduceOp::Sum)).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => break e,
            Err(_) => panic!("the survivor hung"),
        }
    };
    let lost_after = killer.join().unwrap().elapsed();
    println!("rank 1 killed; rank 0 lost it after {lost_after:.2?}: {e}");
    assert!(
        matches!(
            e,
            collectives::CollectiveError::Transport(TransportError::PeerLost { rank: 1, .. })
        ),
        "{e:?}"
    );
    assert!(
        lost_after < config().io_timeout,
        "noticed only after {lost_after:?} (idle timeout {idle:?})"
    );
}
