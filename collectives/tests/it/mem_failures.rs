//! What ranks see when a peer dies, goes silent, or disagrees, over the in-memory
//! transport: typed errors within the configured time, never a hang.

use crate::common;

use std::time::{Duration, Instant};

use collectives::{
    AllreduceAlgorithm, CollectiveError, CollectiveOptions, Communicator, Generation, LossCause,
    MemTransport, ReduceOp, Tag, Transport, TransportError,
};
use common::*;
use futures::future::join_all;

fn world(n: usize, timeout: Duration, opts: CollectiveOptions) -> Vec<Communicator<MemTransport>> {
    MemTransport::world(n, Generation(3), timeout)
        .into_iter()
        .map(|t| Communicator::new(t, opts.clone()))
        .collect()
}

fn ring() -> CollectiveOptions {
    CollectiveOptions {
        allreduce: AllreduceAlgorithm::Ring,
        segment_bytes: 4096,
        ..Default::default()
    }
}

/// Survivors are mid-allreduce when `victim` dies; all of them must report it.
async fn killed_peer(n: usize, victim: usize) {
    let comms = world(n, Duration::from_secs(30), ring());
    // The loss must come from the closed connection (LossCause::Closed), not
    // from waiting out the 30 s timeout, which would be a Timeout error.
    let (results, _took) = allreduce_while_one_dies(comms, victim, 1 << 16).await;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Err(CollectiveError::Transport(TransportError::PeerLost {
                rank,
                generation,
                cause,
            })) => {
                assert_eq!(
                    (rank, generation, cause),
                    (victim, Generation(3), LossCause::Closed),
                    "survivor {i}"
                );
            }
            other => panic!("survivor {i}: expected PeerLost {{ rank: {victim} }}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_killed_peer_fails_every_survivor_with_peer_lost() {
    killed_peer(4, 2).await;
    killed_peer(4, 0).await;
    killed_peer(7, 6).await;
    killed_peer(2, 1).await;
}

#[tokio::test]
async fn a_silent_peer_gives_a_timeout_within_the_configured_time() {
    let timeout = Duration::from_millis(300);
    let comms = world(3, timeout, ring());
    let started = Instant::now();
    let mut bufs = vec![vec![2i64; 100]; 2];
    // Rank 2 stays alive but never takes part.
    let res = tokio::time::timeout(
        DEADLINE,
        join_all(
            comms[..2]
                .iter()
                .zip(bufs.iter_mut())
                .map(|(c, b)| c.allreduce(b, ReduceOp::Max)),
        ),
    )
    .await
    .expect("no timeout fired");
    for r in res {
        assert!(
            matches!(
                r,
                Err(CollectiveError::Transport(TransportError::Timeout { .. }))
            ),
            "{r:?}"
        );
    }
    // It waited the configured time (DEADLINE above only guards against a hang).
    let took = started.elapsed();
    assert!(
        took >= timeout,
        "gave up after {took:?}, before the {timeout:?} timeout"
    );
}

#[tokio::test]
async fn ranks_disagreeing_on_length_get_a_length_mismatch() {
    let opts = CollectiveOptions {
        allreduce: AllreduceAlgorithm::RecursiveDoubling,
        ..Default::default()
    };
    let comms = world(2, Duration::from_secs(5), opts);
    let mut bufs = vec![vec![1.0f64; 10], vec![1.0f64; 12]];
    let res = with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
    for (r, res) in res.into_iter().enumerate() {
        match res {
            Err(CollectiveError::LengthMismatch {
                from,
                expected,
                got,
                ..
            }) => {
                assert_eq!(from, 1 - r);
                assert_eq!((expected, got), if r == 0 { (80, 96) } else { (96, 80) });
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_message_from_an_older_generation_is_refused() {
    let opts = CollectiveOptions {
        allreduce: AllreduceAlgorithm::RecursiveDoubling,
        ..Default::default()
    };
    let comms = world(2, Duration::from_secs(5), opts);
    // What rank 1 would have sent for op 0, step 1 one generation ago, with junk.
    let stale = Tag::new(Generation(2), 0, 1);
    comms[0]
        .transport()
        .inject(1, stale, bytemuck::cast_slice(&[1000i32; 4]));
    let mut bufs = vec![vec![1i32; 4], vec![2i32; 4]];
    for r in with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await {
        r.unwrap();
    }
    assert_eq!(bufs, vec![vec![3; 4]; 2]);
    assert_eq!(comms[0].transport().stale_refused(), 1);
    let e = comms[0].transport().send(1, stale, b"").await.unwrap_err();
    assert!(
        matches!(e, TransportError::GenerationMismatch { .. }),
        "{e:?}"
    );
    shutdown_all(comms).await;
}

#[tokio::test]
async fn bad_arguments_are_refused_before_any_message() {
    let comms = world(3, Duration::from_secs(5), CollectiveOptions::default());
    let res = on_every_rank(&comms, |c| async move {
        let mut b = vec![0u8; 6];
        let root = c.broadcast(&mut b, 3).await.unwrap_err();
        let len = c
            .reducescatter(&mut b, &[3, 3], ReduceOp::Sum)
            .await
            .unwrap_err();
        let sum = c
            .reducescatter(&mut b, &[1, 1, 1], ReduceOp::Sum)
            .await
            .unwrap_err();
        let scale = collectives::Scaling {
            prescale: 2.0,
            postscale: 1.0,
        };
        let int = c
            .allreduce_scaled(&mut b, ReduceOp::Sum, scale)
            .await
            .unwrap_err();
        let a2a = c.alltoall(&b, &[1, 2]).await.unwrap_err();
        (root, len, sum, int, a2a)
    })
    .await;
    for (root, len, sum, int, a2a) in res {
        assert!(
            matches!(root, CollectiveError::InvalidRoot { root: 3, size: 3 }),
            "{root:?}"
        );
        assert!(
            matches!(
                len,
                CollectiveError::CountsLength {
                    got: 2,
                    size: 3,
                    ..
                }
            ),
            "{len:?}"
        );
        assert!(
            matches!(sum, CollectiveError::CountsSum { sum: 3, len: 6, .. }),
            "{sum:?}"
        );
        assert!(
            matches!(int, CollectiveError::ScaleOnInteger { .. }),
            "{int:?}"
        );
        assert!(
            matches!(a2a, CollectiveError::CountsLength { .. }),
            "{a2a:?}"
        );
    }
    // The world is still usable afterwards.
    let mut bufs = vec![vec![1u8; 5]; 3];
    for r in with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await {
        r.unwrap();
    }
    assert_eq!(bufs, vec![vec![3u8; 5]; 3]);
    shutdown_all(comms).await;
}
