//! The TCP mesh with shared memory between ranks of one host (here: one
//! process, so every pair qualifies): the collective grid through the rings,
//! rings far smaller than the messages, the off switch on either side, and
//! a peer lost with its segment mapped.

use crate::common;

use std::time::Duration;

use collectives::{
    AllreduceAlgorithm, CollectiveOptions, Communicator, DataPlane, Generation, LossCause,
    ReduceOp, ShmConfig, Tag, TcpConfig, TcpTransport, Transport, TransportError, bf16, f16,
};
use common::*;
use control::DataKey;
use futures::future::join_all;

/// Guards waits that must end by themselves; never a bound on their speed.
const HANG: Duration = Duration::from_secs(60);

fn config(shm: ShmConfig) -> TcpConfig {
    TcpConfig {
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        job_key: DataKey::new([0x5A; 32]),
        shared_memory: shm,
        ..Default::default()
    }
}

/// Rings of one page: every large message wraps them many times and waits
/// for room, and short spins make both sides sleep on the doorbell often.
fn tiny_rings() -> ShmConfig {
    ShmConfig {
        ring_bytes: 4096,
        spin: Duration::from_micros(2),
        busy_ring_bytes: 4096,
        ..Default::default()
    }
}

/// A mesh of `cfgs.len()` ranks, rank `r` with `cfgs[r]`.
async fn mesh(cfgs: &[TcpConfig], g: Generation) -> Vec<TcpTransport> {
    common::mesh::tcp_world(cfgs, g).await
}

fn others(n: usize, r: usize) -> Vec<usize> {
    (0..n).filter(|&p| p != r).collect()
}

struct World;

impl common::grid::World for World {
    async fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<DataPlane>> {
        let ts = mesh(&vec![config(tiny_rings()); n], Generation(1)).await;
        for (r, t) in ts.iter().enumerate() {
            assert_eq!(t.shared_memory_peers(), others(n, r), "rank {r}");
        }
        common::grid::communicators(ts, opts)
    }
}

crate::grid_tests!();

async fn sum_of_ranks(comms: &[Communicator<TcpTransport>], len: usize) -> Vec<Vec<f32>> {
    let runs = comms.iter().map(|c| async move {
        let mut b = vec![c.rank() as f32 + 1.0; len];
        c.allreduce(&mut b, ReduceOp::Sum).await.map(|()| b)
    });
    let res = tokio::time::timeout(HANG, join_all(runs))
        .await
        .expect("allreduce hung");
    res.into_iter().map(Result::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_mib_through_default_rings_gives_the_sum() {
    let ts = mesh(&vec![config(ShmConfig::default()); 3], Generation(2)).await;
    let comms: Vec<_> = ts
        .into_iter()
        .map(|t| Communicator::new(t, CollectiveOptions::default()))
        .collect();
    for out in sum_of_ranks(&comms, 4 << 20).await {
        assert!(out.iter().all(|&x| x == 6.0));
    }
    shutdown_all(comms).await;
}

/// A rank with shared memory off keeps its pairs on TCP; the others still
/// share memory among themselves, and the results are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_off_switch_on_one_rank_keeps_its_pairs_on_tcp() {
    let off = ShmConfig {
        enabled: false,
        ..Default::default()
    };
    let cfgs = [config(tiny_rings()), config(off), config(tiny_rings())];
    let ts = mesh(&cfgs, Generation(3)).await;
    assert_eq!(ts[0].shared_memory_peers(), [2]);
    assert!(ts[1].shared_memory_peers().is_empty());
    assert_eq!(ts[2].shared_memory_peers(), [0]);
    let comms: Vec<_> = ts
        .into_iter()
        .map(|t| Communicator::new(t, CollectiveOptions::default()))
        .collect();
    for out in sum_of_ranks(&comms, 100_003).await {
        assert!(out.iter().all(|&x| x == 6.0));
    }
    shutdown_all(comms).await;
}

/// A peer that goes without a goodbye (its process died: its socket closes
/// and its mappings go) fails every survivor's wait with `PeerLost` at once,
/// including ranks asleep on the doorbell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_peer_fails_every_survivor_through_the_doorbell() {
    let opts = CollectiveOptions {
        allreduce: AllreduceAlgorithm::Ring,
        ..Default::default()
    };
    let comms: Vec<_> = mesh(&vec![config(tiny_rings()); 4], Generation(1))
        .await
        .into_iter()
        .map(|t| Communicator::new(t, opts.clone()))
        .collect();
    let (res, _) = allreduce_while_one_dies(comms, 2, 1 << 20).await;
    assert_lost(res, 2, Generation(1));
}

/// What a rank sent before its goodbye is still received after it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_departed_peer_leaves_its_last_messages_behind() {
    let mut ts = mesh(&vec![config(tiny_rings()); 2], Generation(0)).await;
    let tag = Tag::new(Generation(0), 9, 0);
    let big = vec![7u8; 100_000];
    let leaver = ts.remove(1);
    leaver.send(0, tag, &big).await.unwrap();
    let (got, ()) = tokio::join!(ts[0].recv(1, tag), leaver.shutdown());
    assert_eq!(got.unwrap(), big);
    let e = tokio::time::timeout(HANG, ts[0].recv(1, Tag::new(Generation(0), 10, 0)))
        .await
        .expect("a wait on a departed peer hung")
        .unwrap_err();
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
}

/// Both sides of a pair write more than a ring holds at once, so each must
/// drain its incoming ring while its own send waits for room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_sends_larger_than_the_rings_do_not_deadlock() {
    let ts = mesh(&vec![config(tiny_rings()); 2], Generation(5)).await;
    let tag = Tag::new(Generation(5), 1, 0);
    let (a, b) = (vec![1u8; 1 << 20], vec![2u8; 1 << 20]);
    let run = async {
        tokio::join!(
            ts[0].send(1, tag, &a),
            ts[1].send(0, tag, &b),
            ts[0].recv(1, tag),
            ts[1].recv(0, tag)
        )
    };
    let (s0, s1, r0, r1) = tokio::time::timeout(HANG, run).await.expect("deadlock");
    s0.unwrap();
    s1.unwrap();
    assert_eq!(r0.unwrap(), b);
    assert_eq!(r1.unwrap(), a);
}
