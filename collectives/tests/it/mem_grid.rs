//! The collective grid ([`common::grid`]) over the in-memory transport, and
//! what only it checks: barriers, scaling, two op spaces on one transport.

use crate::common;

use std::time::Duration;

use collectives::{
    CollectiveOptions, Communicator, DataPlane, Generation, MemTransport, ReduceOp, bf16, f16,
};
use common::*;

fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<DataPlane>> {
    let world = MemTransport::world(n, Generation(0), Duration::from_secs(30));
    common::grid::communicators(world, opts)
}

struct World;

impl common::grid::World for World {
    async fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<DataPlane>> {
        world(n, opts)
    }
}

crate::grid_tests!();

#[tokio::test]
async fn barrier_holds_every_rank_until_all_arrive() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for n in WORLDS {
        let comms = world(n, &CollectiveOptions::default());
        for round in 1..=3 {
            let arrived = AtomicUsize::new(0);
            let res = on_every_rank(&comms, |c| {
                let arrived = &arrived;
                async move {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    c.barrier().await?;
                    Ok::<usize, collectives::CollectiveError>(arrived.load(Ordering::SeqCst))
                }
            })
            .await;
            for seen in res {
                assert_eq!(
                    seen.unwrap(),
                    n,
                    "n={n} round {round}: left the barrier early"
                );
            }
        }
        shutdown_all(comms).await;
    }
}

#[tokio::test]
async fn prescale_and_postscale_apply_around_the_reduction() {
    let n = 4;
    let comms = world(n, &CollectiveOptions::default());
    let scaling = collectives::Scaling {
        prescale: 2.0,
        postscale: 0.25,
    };
    let mut bufs: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32 + 1.0; 10]).collect();
    for r in with_buffers(&comms, &mut bufs, |c, b| {
        c.allreduce_scaled(b, ReduceOp::Sum, scaling)
    })
    .await
    {
        r.unwrap();
    }
    // (1+2+3+4) * 2 * 0.25
    assert!(bufs.iter().flatten().all(|&v| v == 5.0), "{bufs:?}");
    let mut avg: Vec<Vec<f64>> = (0..n).map(|r| vec![r as f64; 3]).collect();
    let post = collectives::Scaling {
        prescale: 1.0,
        postscale: 10.0,
    };
    for r in with_buffers(&comms, &mut avg, |c, b| {
        c.allreduce_scaled(b, ReduceOp::Average, post)
    })
    .await
    {
        r.unwrap();
    }
    assert!(
        avg.iter().flatten().all(|&v| (v - 15.0).abs() < 1e-12),
        "{avg:?}"
    );
    shutdown_all(comms).await;
}

/// Two communicators over one shared transport, in different op-id spaces,
/// run collectives at the same time without their messages meeting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn communicators_in_two_op_spaces_share_one_transport() {
    use std::sync::Arc;

    use collectives::{OpSpace, Transport};
    for n in [2, 3, 4] {
        let world = MemTransport::world(n, Generation(1), Duration::from_secs(20));
        let runs = world.into_iter().map(|t| {
            let t = Arc::new(t);
            let opts = CollectiveOptions::default();
            let data = Communicator::new(t.clone(), opts.clone());
            let neg = Communicator::in_space(t, opts, OpSpace::Negotiation);
            async move {
                let rank = data.rank();
                let mut buf = vec![rank as f32 + 1.0; 1000];
                let mine = vec![rank as u8; rank + 1];
                let (sum, gathered) = tokio::join!(
                    data.allreduce(&mut buf, ReduceOp::Sum),
                    neg.allgather(&mine)
                );
                sum.unwrap();
                // The last owner's shutdown says goodbye for both.
                data.into_transport().shutdown().await;
                neg.into_transport().shutdown().await;
                (buf, gathered.unwrap())
            }
        });
        let want_sum = (1..=n).sum::<usize>() as f32;
        for (buf, (all, counts)) in futures::future::join_all(runs).await {
            assert!(buf.iter().all(|&x| x == want_sum), "n={n}");
            assert_eq!(counts, (1..=n).collect::<Vec<_>>());
            let want: Vec<u8> = (0..n).flat_map(|r| vec![r as u8; r + 1]).collect();
            assert_eq!(all, want);
        }
    }
}

/// The columns of a 2 x 3 grid: ranks {0, 3}, {1, 4}, {2, 5}.
fn column(rank: usize) -> Vec<usize> {
    vec![rank % 3, rank % 3 + 3]
}

#[tokio::test]
async fn group_collectives_run_side_by_side_in_disjoint_groups() {
    for opts in [
        CollectiveOptions::default(),
        CollectiveOptions {
            small_message_bytes: 0,
            segment_bytes: 64,
            ..CollectiveOptions::default()
        },
    ] {
        let comms = world(6, &opts);
        let len = 1001;
        let res = on_every_rank(&comms, |c| async move {
            let me = c.rank();
            let mut sum: Vec<i64> = (0..len).map(|i| (me * 1000 + i) as i64).collect();
            c.allreduce_among(&column(me), &mut sum, ReduceOp::Sum)
                .await?;
            let mut avg: Vec<f32> = vec![me as f32; 5];
            c.allreduce_among(&column(me), &mut avg, ReduceOp::Average)
                .await?;
            let mut b: Vec<u8> = vec![me as u8; 7];
            c.broadcast_among(&column(me), &mut b, 1).await?;
            // The world's own collectives stay in step afterwards.
            c.barrier().await?;
            Ok::<_, collectives::CollectiveError>((sum, avg, b))
        })
        .await;
        for (rank, r) in res.into_iter().enumerate() {
            let (sum, avg, b) = r.unwrap();
            let col = column(rank);
            let want: Vec<i64> = (0..len)
                .map(|i| col.iter().map(|&m| (m * 1000 + i) as i64).sum())
                .collect();
            assert_eq!(sum, want, "rank {rank}");
            assert_eq!(avg, vec![(col[0] + col[1]) as f32 / 2.0; 5], "rank {rank}");
            assert_eq!(b, vec![col[1] as u8; 7], "rank {rank}");
        }
        shutdown_all(comms).await;
    }
}

#[tokio::test]
async fn a_group_collective_outside_its_group_is_refused() {
    let comms = world(2, &CollectiveOptions::default());
    let mut buf = vec![1.0f32; 4];
    let err = comms[0]
        .allreduce_among(&[1], &mut buf, ReduceOp::Sum)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            collectives::CollectiveError::NotAMember { rank: 0, .. }
        ),
        "{err}"
    );
    let err = comms[1]
        .broadcast_among(&[1], &mut buf, 3)
        .await
        .unwrap_err();
    assert!(
        matches!(err, collectives::CollectiveError::InvalidRoot { .. }),
        "{err}"
    );
    shutdown_all(comms).await;
}
