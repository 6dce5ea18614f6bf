//! The collectives over real sockets on 127.0.0.1, and the TCP transport's answers
//! to bad input: foreign jobs, garbage, oversized and stale frames, dead and silent
//! peers.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use collectives::{
    AllreduceAlgorithm, BroadcastAlgorithm, CollectiveOptions, Communicator, DataPlane, Element,
    Generation, LossCause, ReduceOp, ShmConfig, Tag, TcpConfig, TcpEndpoint, TcpTransport,
    Transport, TransportError, bf16, schedule::even_counts,
};
use common::*;
use control::DataKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LOCAL: &str = "127.0.0.1:0";
/// Guards the waits that must end by themselves (a timeout firing, a refused
/// connect) against hanging; never a bound on their speed.
const HANG: Duration = Duration::from_secs(60);

/// The data-plane key of job `job`.
fn key(job: u8) -> DataKey {
    DataKey::new([job; 32])
}

fn config() -> TcpConfig {
    TcpConfig {
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        job_key: key(0xE1),
        // These tests are about the sockets; tests/shm.rs runs the same
        // mesh with shared memory between its ranks.
        shared_memory: ShmConfig {
            enabled: false,
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn mesh(n: usize, g: Generation, cfg: &TcpConfig) -> Vec<TcpTransport> {
    common::mesh::tcp_world(&vec![cfg.clone(); n], g).await
}

async fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<DataPlane>> {
    common::grid::communicators(mesh(n, Generation(1), &config()).await, opts)
}

/// The grid's worlds over plain sockets.
struct Sockets;

impl common::grid::World for Sockets {
    async fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<DataPlane>> {
        world(n, opts).await
    }
}

/// A fused group's messages go out as vectored frames from several tensors
/// and come in across them, over real sockets too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fused_groups_over_sockets_get_the_bits_they_get_alone() {
    common::grid::fused_grid::<f32, Sockets>().await;
}

fn variants() -> [CollectiveOptions; 3] {
    let d = CollectiveOptions::default();
    [
        CollectiveOptions {
            segment_bytes: 64,
            allreduce: AllreduceAlgorithm::Ring,
            broadcast: BroadcastAlgorithm::Chain,
            ..d.clone()
        },
        CollectiveOptions {
            allreduce: AllreduceAlgorithm::RecursiveDoubling,
            broadcast: BroadcastAlgorithm::Tree,
            ..d.clone()
        },
        d,
    ]
}

async fn allreduce_case<T: Element>(comms: &[Communicator<DataPlane>], len: usize, op: ReduceOp) {
    let n = comms.len();
    let ctx = format!("tcp allreduce {} {op} n={n} len={len}", T::DTYPE);
    let mut bufs = inputs::<T>(n, len, op);
    for r in with_buffers(comms, &mut bufs, |c, b| c.allreduce(b, op)).await {
        r.unwrap_or_else(|e| panic!("{ctx}: {e}"));
    }
    let want = reference(n, len, op, T::DTYPE.is_float());
    for b in &bufs {
        assert_matches(b, &want, op, &ctx);
    }
    assert_identical(&bufs, &ctx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collectives_over_tcp_match_the_reference() {
    for n in [2, 3, 4] {
        for opts in variants() {
            let comms = world(n, &opts).await;
            for len in [0, 1, n - 1, 5 * n + 3, 70_000] {
                for op in [ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max] {
                    allreduce_case::<f32>(&comms, len, op).await;
                    allreduce_case::<i32>(&comms, len, op).await;
                    allreduce_case::<bf16>(&comms, len, op).await;
                }
                // reduce-scatter
                let counts = even_counts(len, n);
                let mut bufs = inputs::<f64>(n, len, ReduceOp::Sum);
                let ranges = with_buffers(&comms, &mut bufs, |c, b| {
                    c.reducescatter(b, &counts, ReduceOp::Sum)
                })
                .await;
                let want = reference(n, len, ReduceOp::Sum, true);
                for (r, range) in ranges.into_iter().enumerate() {
                    let range = range.unwrap();
                    assert_matches(
                        &bufs[r][range.clone()],
                        &want[range],
                        ReduceOp::Sum,
                        "tcp reducescatter",
                    );
                }
                // allgather with per-rank sizes, one rank contributing nothing
                let ins: Vec<Vec<i64>> = (0..n)
                    .map(|r| vec![r as i64; if r == 1 { 0 } else { len + r }])
                    .collect();
                let want: Vec<i64> = ins.concat();
                for res in on_every_rank(&comms, |c| c.allgather(&ins[c.rank()])).await {
                    assert_eq!(res.unwrap().0, want, "tcp allgather n={n} len={len}");
                }
                // broadcast from the last rank
                let mut bufs: Vec<Vec<u8>> = (0..n).map(|r| vec![r as u8; len]).collect();
                for r in with_buffers(&comms, &mut bufs, |c, b| c.broadcast(b, n - 1)).await {
                    r.unwrap();
                }
                assert!(bufs.iter().all(|b| b.iter().all(|&v| v as usize == n - 1)));
                // alltoall: rank r sends (r, j) to j, len / n + j elements
                let sc = |j: usize| len / n + j;
                let ins: Vec<Vec<f32>> = (0..n)
                    .map(|r| {
                        (0..n)
                            .flat_map(|j| vec![(r * 10 + j) as f32; sc(j)])
                            .collect()
                    })
                    .collect();
                let counts: Vec<usize> = (0..n).map(sc).collect();
                for (r, res) in on_every_rank(&comms, |c| c.alltoall(&ins[c.rank()], &counts))
                    .await
                    .into_iter()
                    .enumerate()
                {
                    let (out, got) = res.unwrap();
                    assert_eq!(got, vec![sc(r); n]);
                    let want: Vec<f32> = (0..n)
                        .flat_map(|j| vec![(j * 10 + r) as f32; sc(r)])
                        .collect();
                    assert_eq!(out, want, "tcp alltoall n={n} len={len}");
                }
                for r in on_every_rank(&comms, |c| c.barrier()).await {
                    r.unwrap();
                }
            }
            shutdown_all(comms).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_peer_fails_every_survivor_quickly() {
    let opts = CollectiveOptions {
        allreduce: AllreduceAlgorithm::Ring,
        ..Default::default()
    };
    let comms = world(4, &opts).await;
    let (res, took) = allreduce_while_one_dies(comms, 1, 1 << 20).await;
    assert_lost(res, 1, Generation(1));
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_the_generation_fails_a_pending_receive_and_later_sends() {
    let ts = mesh(2, Generation(4), &config()).await;
    let breaker = ts[1].breaker();
    assert_eq!(breaker.generation(), Generation(4));
    let tag = Tag::new(Generation(4), 0, 0);
    let (got, ()) = tokio::join!(ts[1].recv(0, tag), async {
        tokio::task::yield_now().await;
        breaker.end("the coordinator reset the job");
    });
    let ended = |e: &TransportError| matches!(e, TransportError::Ended { generation: Generation(4), why } if why.contains("reset"));
    let e = got.unwrap_err();
    assert!(ended(&e), "{e:?}");
    // `Ended`, not a timeout (the i/o timeout is 20 s), failed it.
    let e = ts[1].send(0, tag, b"late").await.unwrap_err();
    assert!(ended(&e), "{e:?}");
    // Through the trait method, on the other rank.
    ts[0].end("done");
    let e = ts[0].recv(1, tag).await.unwrap_err();
    assert!(matches!(e, TransportError::Ended { .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_times_out() {
    let cfg = TcpConfig {
        io_timeout: Duration::from_millis(400),
        ..config()
    };
    let ts = mesh(2, Generation(0), &cfg).await;
    let started = Instant::now();
    let e = tokio::time::timeout(HANG, ts[0].recv(1, Tag::new(Generation(0), 0, 0)))
        .await
        .expect("the 400 ms i/o timeout never fired")
        .unwrap_err();
    assert!(
        matches!(e, TransportError::Timeout { rank: 1, .. }),
        "{e:?}"
    );
    assert!(
        started.elapsed() >= cfg.io_timeout,
        "gave up before its timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_peer_leaves_its_last_messages_behind() {
    let mut ts = mesh(3, Generation(0), &config()).await;
    let tag = Tag::new(Generation(0), 5, 0);
    let two = ts.pop().unwrap();
    let one = ts.pop().unwrap();
    one.send(0, tag, b"last").await.unwrap();
    one.shutdown().await;
    let deadline = Instant::now() + DEADLINE;
    assert_eq!(ts[0].recv(1, tag).await.unwrap(), "last");
    let e = ts[0].recv(1, tag).await.unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::PeerLost {
                rank: 1,
                cause: LossCause::Departed,
                ..
            }
        ),
        "{e:?}"
    );
    // Rank 2 is unaffected by rank 1's clean exit.
    two.send(0, tag, b"alive").await.unwrap();
    assert_eq!(ts[0].recv(2, tag).await.unwrap(), "alive");
    assert!(Instant::now() < deadline);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_jobs_rank_is_refused() {
    let cfg = TcpConfig {
        connect_timeout: Duration::from_secs(2),
        ..config()
    };
    let other = TcpConfig {
        job_key: key(7),
        ..cfg.clone()
    };
    let a = TcpEndpoint::bind(LOCAL.parse().unwrap(), cfg)
        .await
        .unwrap();
    let b = TcpEndpoint::bind(LOCAL.parse().unwrap(), other)
        .await
        .unwrap();
    let addrs = [a.local_addr().unwrap(), b.local_addr().unwrap()];
    let (ra, rb) = tokio::join!(
        a.connect(0, Generation(0), &addrs),
        b.connect(1, Generation(0), &addrs)
    );
    assert!(
        matches!(ra, Err(TransportError::SetupTimeout { ref missing, .. }) if missing == &[1]),
        "{ra:?}"
    );
    match rb {
        Err(TransportError::Handshake { rank: 0, reason }) => {
            assert!(reason.contains("job"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

/// The acceptor's nonce, from the challenge it opens the connection with.
async fn read_nonce(s: &mut TcpStream) -> [u8; 32] {
    let mut c = [0u8; 40];
    s.read_exact(&mut c).await.unwrap();
    assert_eq!(&c[..8], b"ERDP\x02\0\0\0", "the challenge's header");
    c[8..].try_into().unwrap()
}

/// The documented 88-byte hello, proven with `key` for the acceptor's nonce
/// `a`.
fn hello(key: &DataKey, a: &[u8; 32], rank: u32, size: u32, generation: u64) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(b"ERDP");
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(&generation.to_le_bytes());
    h.extend_from_slice(&rank.to_le_bytes());
    h.extend_from_slice(&size.to_le_bytes());
    h.extend_from_slice(&[9; 32]);
    let mac = key.mac(&[b"dial", a, &h]);
    h.extend_from_slice(&mac);
    h
}

/// Sends `bytes` as the hello on a new connection to `addr`; the answer
/// code (0: accepted, the acceptor's proof checked) and the connection.
async fn try_hello(addr: SocketAddr, bytes: impl FnOnce([u8; 32]) -> Vec<u8>) -> (u8, TcpStream) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let a = read_nonce(&mut s).await;
    let h = bytes(a);
    s.write_all(&h).await.unwrap();
    let code = s.read_u8().await.unwrap();
    if code == 0 {
        let mut proof = [0u8; 32];
        s.read_exact(&mut proof).await.unwrap();
        let h: [u8; 88] = h.try_into().unwrap();
        assert_eq!(proof, config().job_key.mac(&[b"accept", &a, &h]));
    }
    (code, s)
}

/// A hand-made peer of the job: the documented handshake, no shared-memory
/// offer (one zero byte, answered by one byte), then raw frames.
async fn fake_peer(addr: SocketAddr, rank: u32, size: u32, generation: u64) -> TcpStream {
    let k = config().job_key;
    let (code, mut s) = try_hello(addr, |a| hello(&k, &a, rank, size, generation)).await;
    assert_eq!(code, 0, "fake peer's hello refused");
    s.write_all(&[0]).await.unwrap();
    assert_eq!(s.read_u8().await.unwrap(), 0, "no offer is declined");
    s
}

fn frame(generation: u64, op: u64, step: u32, len: u32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&generation.to_le_bytes());
    h.extend_from_slice(&op.to_le_bytes());
    h.extend_from_slice(&step.to_le_bytes());
    h.extend_from_slice(&len.to_le_bytes());
    h
}

async fn rank0_with_fake_rank1(generation: u64) -> (TcpTransport, TcpStream) {
    let ep = TcpEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    let addr = ep.local_addr().unwrap();
    let addrs = [addr, "127.0.0.1:9".parse().unwrap()];
    let (t, s) = tokio::join!(
        ep.connect(0, Generation(generation), &addrs),
        fake_peer(addr, 1, 2, generation)
    );
    (t.unwrap(), s)
}

/// Connections from outside the job are refused before any payload is read,
/// and the mesh forms as if they had not come: garbage, a well-formed hello
/// proven with another job's key, and a recorded hello played again (proven
/// for another connection's nonce).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outsiders_are_refused_and_do_not_disturb_set_up() {
    let ep = TcpEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    let addr = ep.local_addr().unwrap();
    let addrs = [addr, "127.0.0.1:9".parse().unwrap()];
    let outsiders = async {
        let (code, _) = try_hello(addr, |_| vec![0x47; 88]).await;
        assert_eq!(code, 1, "garbage");
        let (code, _) = try_hello(addr, |a| hello(&key(7), &a, 1, 2, 4)).await;
        assert_eq!(code, 2, "another job's key");
        // Recorded on the wire from an earlier connection, played again.
        let mut earlier = TcpStream::connect(addr).await.unwrap();
        let recorded = hello(&config().job_key, &read_nonce(&mut earlier).await, 1, 2, 4);
        drop(earlier);
        let (code, _) = try_hello(addr, |_| recorded).await;
        assert_eq!(code, 2, "a replayed hello");
        // A payload sent straight away is never read as one.
        let mut eager = TcpStream::connect(addr).await.unwrap();
        let _ = read_nonce(&mut eager).await;
        eager.write_all(&frame(4, 0, 0, 5)).await.unwrap();
        eager.write_all(&[0x55; 120]).await.unwrap();
        assert_ne!(eager.read_u8().await.unwrap(), 0);
        fake_peer(addr, 1, 2, 4).await
    };
    let (t, mut peer) = tokio::join!(ep.connect(0, Generation(4), &addrs), outsiders);
    let t = t.unwrap();
    assert_eq!(t.size(), 2);
    let tag = Tag::new(Generation(4), 0, 0);
    peer.write_all(&frame(4, 0, 0, 5)).await.unwrap();
    peer.write_all(b"hello").await.unwrap();
    assert_eq!(t.recv(1, tag).await.unwrap(), "hello");
}

/// A dialer refuses an acceptor that cannot prove it belongs to the job,
/// even one that says it accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acceptor_without_the_key_is_refused_by_the_dialer() {
    let impostor = tokio::net::TcpListener::bind(LOCAL).await.unwrap();
    let addr = impostor.local_addr().unwrap();
    let fake = async {
        let (mut s, _) = impostor.accept().await.unwrap();
        let mut c = b"ERDP\x02\0\0\0".to_vec();
        c.extend_from_slice(&[1; 32]);
        s.write_all(&c).await.unwrap();
        let mut h = [0u8; 88];
        s.read_exact(&mut h).await.unwrap();
        s.write_u8(0).await.unwrap();
        s.write_all(&key(7).mac(&[b"accept", &[1; 32], &h]))
            .await
            .unwrap();
        s
    };
    let ep = TcpEndpoint::bind(LOCAL.parse().unwrap(), config())
        .await
        .unwrap();
    let addrs = [addr, ep.local_addr().unwrap()];
    let (r, _s) = tokio::join!(ep.connect(1, Generation(0), &addrs), fake);
    match r {
        Err(TransportError::Handshake { rank: 0, reason }) => {
            assert!(reason.contains("without proving"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_frame_breaks_the_connection_with_a_typed_error() {
    let (t, mut peer) = rank0_with_fake_rank1(2).await;
    peer.write_all(&frame(2, 0, 0, u32::MAX)).await.unwrap();
    let e = t.recv(1, Tag::new(Generation(2), 0, 0)).await.unwrap_err();
    match e {
        TransportError::PeerLost {
            rank: 1,
            cause: LossCause::FrameTooLarge { len, limit },
            ..
        } => {
            assert_eq!((len, limit), (u32::MAX as u64, 1 << 30));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_frame_is_a_lost_peer_not_a_hang() {
    let (t, mut peer) = rank0_with_fake_rank1(2).await;
    peer.write_all(&frame(2, 0, 0, 100)).await.unwrap();
    peer.write_all(&[1, 2, 3]).await.unwrap();
    drop(peer);
    let e = t.recv(1, Tag::new(Generation(2), 0, 0)).await.unwrap_err();
    assert!(
        matches!(e, TransportError::PeerLost { rank: 1, .. }),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_from_an_older_generation_is_refused() {
    let (t, mut peer) = rank0_with_fake_rank1(6).await;
    let mut wire = frame(5, 0, 0, 3);
    wire.extend_from_slice(b"old");
    wire.extend_from_slice(&frame(6, 0, 0, 3));
    wire.extend_from_slice(b"new");
    peer.write_all(&wire).await.unwrap();
    assert_eq!(
        t.recv(1, Tag::new(Generation(6), 0, 0)).await.unwrap(),
        "new"
    );
    assert_eq!(t.stale_refused(), 1);
}

/// Rank 1 of two whose rank 0's address is a port nobody listens on
/// (bound, then dropped), connecting within `connect_timeout`: the error,
/// and that address.
async fn connect_to_a_closed_port(
    connect_timeout: Duration,
    hang: &str,
) -> (TransportError, std::net::SocketAddr) {
    // Bound and never listening: connections are refused, and the port
    // stays this test's (a port merely closed again could be taken by a
    // listener of a test running beside this one).
    let reserved = tokio::net::TcpSocket::new_v4().unwrap();
    reserved.bind(LOCAL.parse().unwrap()).unwrap();
    let closed = reserved.local_addr().unwrap();
    let cfg = TcpConfig {
        connect_timeout,
        ..config()
    };
    let ep = TcpEndpoint::bind(LOCAL.parse().unwrap(), cfg)
        .await
        .unwrap();
    let addrs = [closed, ep.local_addr().unwrap()];
    let e = tokio::time::timeout(HANG, ep.connect(1, Generation(0), &addrs))
        .await
        .expect(hang)
        .unwrap_err();
    (e, closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_peer_is_a_connect_error_within_the_deadline() {
    let hang = "connecting to a closed port never gave up";
    let (e, _) = connect_to_a_closed_port(Duration::from_millis(500), hang).await;
    assert!(
        matches!(e, TransportError::Connect { rank: 0, .. }),
        "{e:?}"
    );
}

/// Peers listen before their address is published: one that keeps refusing
/// is not there, and the dialling rank says so, naming both ranks and the
/// address, instead of waiting out the whole set-up time.
#[tokio::test]
async fn a_refusing_peer_is_given_up_with_a_message_naming_both_ranks() {
    let hang = "a refusing peer was tried for the whole set-up time";
    let (e, closed) = connect_to_a_closed_port(Duration::from_secs(3600), hang).await;
    assert!(
        matches!(
            e,
            TransportError::Connect {
                from: 1,
                rank: 0,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    let want = format!("rank 1 cannot reach rank 0 at {closed}: Connection refused");
    assert!(text.starts_with(&want), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_payloads_are_received_in_place_and_the_stream_stays_in_step() {
    let (t, mut peer) = rank0_with_fake_rank1(3).await;
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut wire = frame(3, 1, 0, big.len() as u32);
    wire.extend_from_slice(&big);
    wire.extend_from_slice(&frame(3, 1, 1, 200_000));
    wire.extend_from_slice(&vec![9u8; 200_000]);
    wire.extend_from_slice(&frame(3, 1, 2, 2));
    wire.extend_from_slice(b"ok");
    let writer = tokio::spawn(async move {
        peer.write_all(&wire).await.unwrap();
        peer
    });
    let mut dst = vec![0u8; big.len()];
    t.recv_into(1, Tag::new(Generation(3), 1, 0), &mut dst)
        .await
        .unwrap();
    assert!(dst == big, "payload differs");
    // A disagreeing length is reported, and the payload is skipped, not misread.
    let mut small = vec![0u8; 100_000];
    let e = t
        .recv_into(1, Tag::new(Generation(3), 1, 1), &mut small)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::WrongLength {
                rank: 1,
                expected: 100_000,
                got: 200_000,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        t.recv(1, Tag::new(Generation(3), 1, 2)).await.unwrap(),
        "ok"
    );
    drop(writer.await.unwrap());
}

/// A fused collective's cells lie in several tensors: a message goes out from
/// its pieces as one frame and comes in across pieces cut elsewhere, both for
/// payloads read whole and for those read in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_in_pieces_travel_as_one_frame() {
    let (t, mut peer) = rank0_with_fake_rank1(3).await;
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let tag = |step| Tag::new(Generation(3), 1, step);
    t.send_parts(
        1,
        tag(0),
        &[b"ab", b"", &big[..300_000], b"z", &big[300_000..]],
    )
    .await
    .unwrap();
    let mut got = vec![0u8; 24 + 3 + big.len()];
    peer.read_exact(&mut got).await.unwrap();
    let mut want = frame(3, 1, 0, 3 + big.len() as u32);
    want.extend_from_slice(b"ab");
    want.extend_from_slice(&big[..300_000]);
    want.push(b'z');
    want.extend_from_slice(&big[300_000..]);
    assert!(
        got == want,
        "the frame differs from the pieces' concatenation"
    );

    let mut wire = frame(3, 1, 1, big.len() as u32);
    wire.extend_from_slice(&big);
    wire.extend_from_slice(&frame(3, 1, 2, 5));
    wire.extend_from_slice(b"hello");
    wire.extend_from_slice(&frame(3, 1, 3, 4));
    wire.extend_from_slice(b"four");
    wire.extend_from_slice(&frame(3, 1, 4, 2));
    wire.extend_from_slice(b"ok");
    let writer = tokio::spawn(async move {
        peer.write_all(&wire).await.unwrap();
        peer
    });
    let (mut a, mut b, mut c) = (vec![0u8; 7], vec![0u8; 0], vec![0u8; big.len() - 7]);
    t.recv_into_parts(1, tag(1), &mut [&mut a, &mut b, &mut c])
        .await
        .unwrap();
    assert!(a == big[..7] && c == big[7..], "payload differs");
    let (mut h, mut ello) = ([0u8; 1], [0u8; 4]);
    t.recv_into_parts(1, tag(2), &mut [&mut h, &mut ello])
        .await
        .unwrap();
    assert_eq!((&h, &ello), (b"h", b"ello"));
    // Parts of another total length: reported, and the stream stays in step.
    let (mut x, mut y) = ([0u8; 2], [0u8; 3]);
    let e = t
        .recv_into_parts(1, tag(3), &mut [&mut x, &mut y])
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::WrongLength {
                rank: 1,
                expected: 5,
                got: 4,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(t.recv(1, tag(4)).await.unwrap(), "ok");
    drop(writer.await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_abandoned_mid_payload_loses_the_peer() {
    let (t, mut peer) = rank0_with_fake_rank1(3).await;
    let mut wire = frame(3, 0, 0, 1 << 20);
    wire.extend_from_slice(&vec![1u8; 1 << 19]);
    let mut dst = vec![0u8; 1 << 20];
    {
        let mut recv = std::pin::pin!(t.recv_into(1, Tag::new(Generation(3), 0, 0), &mut dst));
        // The first poll posts the direct receive; only then does the frame arrive,
        // so the reader task lends the connection to this future.
        assert!(futures::poll!(recv.as_mut()).is_pending());
        peer.write_all(&wire).await.unwrap();
        let gave_up = tokio::time::timeout(Duration::from_millis(300), recv.as_mut()).await;
        assert!(
            gave_up.is_err(),
            "the payload is incomplete, the receive must still be waiting"
        );
        // Dropped here, half-way through the payload, holding the connection.
    }
    let e = t.recv(1, Tag::new(Generation(3), 0, 1)).await.unwrap_err();
    assert!(
        matches!(
            e,
            TransportError::PeerLost {
                rank: 1,
                cause: LossCause::AbandonedRecv,
                ..
            }
        ),
        "{e:?}"
    );
}
