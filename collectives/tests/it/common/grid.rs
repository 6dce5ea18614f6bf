//! Every collective x dtype x op against a serial reference, on any
//! transport: worlds {1,2,3,4,7}, lengths {0, 1, < world, not divisible,
//! large}, and each algorithm, including tiny segments that force the
//! multi-segment path. A test file names its `World` and calls
//! `grid_tests!()`.

use std::future::Future;

use collectives::{
    AllreduceAlgorithm, BroadcastAlgorithm, CollectiveOptions, Collectives, Communicator,
    DataPlane, Element, FusedPhases, Host, ReduceOp, schedule::even_counts,
};

use super::*;

/// The ranks of a fresh world of `n` over one transport, as a
/// [`DataPlane`] (as a worker runs them): the collectives are then built
/// once for every world instead of once per transport, minutes of the
/// test build.
pub trait World {
    fn world(
        n: usize,
        opts: &CollectiveOptions,
    ) -> impl Future<Output = Vec<Communicator<DataPlane>>>;
}

/// `transports` as the ranks of a world.
pub fn communicators<X: Into<DataPlane>>(
    transports: Vec<X>,
    opts: &CollectiveOptions,
) -> Vec<Communicator<DataPlane>> {
    transports
        .into_iter()
        .map(|t| Communicator::new(t.into(), opts.clone()))
        .collect()
}

pub fn variants() -> Vec<(&'static str, CollectiveOptions)> {
    let d = CollectiveOptions::default();
    vec![
        (
            "ring/chain, 16-byte segments and small messages",
            CollectiveOptions {
                segment_bytes: 16,
                // Allgathers of more than 16 bytes take the two-pass path.
                small_message_bytes: 16,
                allreduce: AllreduceAlgorithm::Ring,
                broadcast: BroadcastAlgorithm::Chain,
                ..d.clone()
            },
        ),
        (
            "ring/chain",
            CollectiveOptions {
                allreduce: AllreduceAlgorithm::Ring,
                broadcast: BroadcastAlgorithm::Chain,
                ..d.clone()
            },
        ),
        (
            "doubling/tree",
            CollectiveOptions {
                allreduce: AllreduceAlgorithm::RecursiveDoubling,
                broadcast: BroadcastAlgorithm::Tree,
                ..d.clone()
            },
        ),
        ("auto", d),
    ]
}

pub fn ok<T, E: std::fmt::Display>(r: Result<T, E>, ctx: &str) -> T {
    r.unwrap_or_else(|e| panic!("{ctx}: {e}"))
}

pub async fn allreduce_grid<T: Element, W: World>() {
    for (name, opts) in variants() {
        for n in WORLDS {
            let comms = W::world(n, &opts).await;
            for len in lengths(n) {
                for op in ReduceOp::ALL {
                    let ctx = format!("allreduce {} {op} n={n} len={len} {name}", T::DTYPE);
                    let mut bufs = inputs::<T>(n, len, op);
                    for r in with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, op)).await {
                        ok(r, &ctx);
                    }
                    let want = reference(n, len, op, T::DTYPE.is_float());
                    for b in &bufs {
                        assert_matches(b, &want, op, &ctx);
                    }
                    assert_identical(&bufs, &ctx);
                }
            }
            shutdown_all(comms).await;
        }
    }
}

/// Several tensors of every length of the grid reduced as one fused
/// collective (in place on the flat paths: each message sent from and
/// received into the pieces of the tensors it covers) give each tensor the
/// bits it gets alone. Under `auto` only tensors that take one algorithm
/// alone are fused together, as the engine's planner does.
pub async fn fused_grid<T: Element, W: World>() {
    for (name, opts) in variants() {
        for n in WORLDS {
            let comms = W::world(n, &opts).await;
            let small = |len: usize| len * std::mem::size_of::<T>() <= opts.small_message_bytes;
            let lens: Vec<usize> = lengths(n)
                .into_iter()
                .filter(|&len| opts.allreduce != AllreduceAlgorithm::Auto || small(len))
                .collect();
            for op in ReduceOp::ALL {
                let ctx = format!("fused {} {op} n={n} lens={lens:?} {name}", T::DTYPE);
                // Floats whose sums depend on the order of the additions, so
                // that a layout reducing an element in another order shows.
                let mut fused: Vec<Vec<Vec<T>>> = vec![Vec::new(); n];
                for (t, &len) in lens.iter().enumerate() {
                    for (r, b) in inputs::<T>(n, len, op).into_iter().enumerate() {
                        let orderly =
                            T::DTYPE.is_float() && op != ReduceOp::Min && op != ReduceOp::Max;
                        let b = if orderly {
                            (0..len)
                                .map(|i| T::from_f64(noisy(r, i + 31 * t)))
                                .collect()
                        } else {
                            b
                        };
                        fused[r].push(b);
                    }
                }
                let mut alone = fused.clone();
                for t in 0..lens.len() {
                    let mut bufs: Vec<Vec<T>> = alone.iter().map(|ts| ts[t].clone()).collect();
                    for r in with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, op)).await {
                        ok(r, &ctx);
                    }
                    for (r, b) in bufs.into_iter().enumerate() {
                        alone[r][t] = b;
                    }
                }
                let runs = with_buffers(&comms, &mut fused, |c, ts| async move {
                    let (mut scratch, mut phases) = (Vec::new(), FusedPhases::default());
                    Collectives::<Host>::allreduce_fused(c, ts, op, &mut scratch, &mut phases).await
                })
                .await;
                for r in runs {
                    ok(r, &ctx);
                }
                for (r, (f, a)) in fused.iter().zip(&alone).enumerate() {
                    for (t, (f, a)) in f.iter().zip(a).enumerate() {
                        let (fb, ab): (&[u8], &[u8]) =
                            (bytemuck::cast_slice(f), bytemuck::cast_slice(a));
                        assert!(fb == ab, "{ctx}: tensor {t} (len {}) on rank {r}", lens[t]);
                    }
                }
            }
            shutdown_all(comms).await;
        }
    }
}

pub async fn reducescatter_grid<T: Element, W: World>() {
    for (name, opts) in variants().into_iter().take(2) {
        for n in WORLDS {
            let comms = W::world(n, &opts).await;
            for len in lengths(n) {
                let mut skewed = vec![0; n];
                skewed[n - 1] = len;
                for counts in [even_counts(len, n), skewed] {
                    for op in ReduceOp::ALL {
                        let ctx = format!(
                            "reducescatter {} {op} n={n} counts={counts:?} {name}",
                            T::DTYPE
                        );
                        let mut bufs = inputs::<T>(n, len, op);
                        let ranges =
                            with_buffers(&comms, &mut bufs, |c, b| c.reducescatter(b, &counts, op))
                                .await;
                        let want = reference(n, len, op, T::DTYPE.is_float());
                        let blocks = collectives::schedule::block_ranges(&counts);
                        for (r, range) in ranges.into_iter().enumerate() {
                            let range = ok(range, &ctx);
                            assert_eq!(range, blocks[r], "{ctx}");
                            assert_matches(&bufs[r][range.clone()], &want[range], op, &ctx);
                        }
                    }
                }
            }
            shutdown_all(comms).await;
        }
    }
}

fn gather_value(rank: usize, i: usize) -> f64 {
    ((rank * 31 + i) % 200) as f64
}

pub async fn allgather_grid<T: Element, W: World>() {
    for (name, opts) in variants().into_iter().take(2) {
        for n in WORLDS {
            let comms = W::world(n, &opts).await;
            for len in lengths(n) {
                let counts: Vec<usize> = (0..n)
                    .map(|r| if r % 3 == 1 { 0 } else { len + r })
                    .collect();
                let ins: Vec<Vec<T>> = (0..n)
                    .map(|r| {
                        (0..counts[r])
                            .map(|i| T::from_f64(gather_value(r, i)))
                            .collect()
                    })
                    .collect();
                let want: Vec<f64> = (0..n)
                    .flat_map(|r| (0..counts[r]).map(move |i| gather_value(r, i)))
                    .collect();
                let ctx = format!("allgather {} n={n} counts={counts:?} {name}", T::DTYPE);
                let known = on_every_rank(&comms, |c| c.allgatherv(&ins[c.rank()], &counts)).await;
                let learned = on_every_rank(&comms, |c| c.allgather(&ins[c.rank()])).await;
                for (a, b) in known.into_iter().zip(learned) {
                    let a = ok(a, &ctx);
                    let (b, got_counts) = ok(b, &ctx);
                    assert_eq!(got_counts, counts, "{ctx}");
                    assert_matches(&a, &want, ReduceOp::Sum, &ctx);
                    assert_matches(&b, &want, ReduceOp::Sum, &ctx);
                }
            }
            shutdown_all(comms).await;
        }
    }
}

pub async fn broadcast_grid<T: Element, W: World>() {
    for (name, opts) in variants() {
        for n in WORLDS {
            let comms = W::world(n, &opts).await;
            for len in lengths(n) {
                let mut roots = vec![0, n / 2, n - 1];
                roots.dedup();
                for root in roots {
                    let ctx = format!("broadcast {} n={n} len={len} root={root} {name}", T::DTYPE);
                    let want: Vec<f64> = (0..len).map(|i| gather_value(root, i)).collect();
                    let mut bufs: Vec<Vec<T>> = (0..n)
                        .map(|r| {
                            let v = |i| {
                                if r == root {
                                    gather_value(root, i)
                                } else {
                                    1.0
                                }
                            };
                            (0..len).map(|i| T::from_f64(v(i))).collect()
                        })
                        .collect();
                    for r in with_buffers(&comms, &mut bufs, |c, b| c.broadcast(b, root)).await {
                        ok(r, &ctx);
                    }
                    for b in &bufs {
                        assert_matches(b, &want, ReduceOp::Sum, &ctx);
                    }
                }
            }
            shutdown_all(comms).await;
        }
    }
}

fn a2a_value(src: usize, dst: usize, i: usize) -> f64 {
    ((src * 5 + dst * 3 + i) % 200) as f64
}

pub async fn alltoall_grid<T: Element, W: World>() {
    for (name, opts) in variants().into_iter().take(2) {
        for n in WORLDS {
            let comms = W::world(n, &opts).await;
            for len in lengths(n) {
                let sc = |r: usize, j: usize| (len + r + 2 * j) % 4 + len / n;
                let ins: Vec<Vec<T>> = (0..n)
                    .map(|r| {
                        (0..n)
                            .flat_map(|j| {
                                (0..sc(r, j)).map(move |i| T::from_f64(a2a_value(r, j, i)))
                            })
                            .collect()
                    })
                    .collect();
                let send_counts: Vec<Vec<usize>> =
                    (0..n).map(|r| (0..n).map(|j| sc(r, j)).collect()).collect();
                let ctx = format!("alltoall {} n={n} len={len} {name}", T::DTYPE);
                let res = on_every_rank(&comms, |c| {
                    c.alltoall(&ins[c.rank()], &send_counts[c.rank()])
                })
                .await;
                for (r, res) in res.into_iter().enumerate() {
                    let (out, counts) = ok(res, &ctx);
                    let want_counts: Vec<usize> = (0..n).map(|j| sc(j, r)).collect();
                    assert_eq!(counts, want_counts, "{ctx} rank {r}");
                    let want: Vec<f64> = (0..n)
                        .flat_map(|j| (0..sc(j, r)).map(move |i| a2a_value(j, r, i)))
                        .collect();
                    assert_matches(&out, &want, ReduceOp::Sum, &ctx);
                }
            }
            shutdown_all(comms).await;
        }
    }
}

/// The grid's tests, each on the `World` in scope: one test per collective
/// and dtype.
#[macro_export]
macro_rules! grid_tests {
    () => {
        $crate::grid_tests! {
            allreduce_f32: allreduce_grid<f32>,
            allreduce_f64: allreduce_grid<f64>,
            allreduce_f16: allreduce_grid<f16>,
            allreduce_bf16: allreduce_grid<bf16>,
            allreduce_i32: allreduce_grid<i32>,
            allreduce_i64: allreduce_grid<i64>,
            allreduce_u8: allreduce_grid<u8>,
            fused_f32: fused_grid<f32>,
            fused_f16: fused_grid<f16>,
            fused_i32: fused_grid<i32>,
            reducescatter_f32: reducescatter_grid<f32>,
            reducescatter_f64: reducescatter_grid<f64>,
            reducescatter_f16: reducescatter_grid<f16>,
            reducescatter_bf16: reducescatter_grid<bf16>,
            reducescatter_i32: reducescatter_grid<i32>,
            reducescatter_i64: reducescatter_grid<i64>,
            reducescatter_u8: reducescatter_grid<u8>,
            allgather_f32: allgather_grid<f32>,
            allgather_f64: allgather_grid<f64>,
            allgather_f16: allgather_grid<f16>,
            allgather_bf16: allgather_grid<bf16>,
            allgather_i32: allgather_grid<i32>,
            allgather_i64: allgather_grid<i64>,
            allgather_u8: allgather_grid<u8>,
            broadcast_f32: broadcast_grid<f32>,
            broadcast_f64: broadcast_grid<f64>,
            broadcast_f16: broadcast_grid<f16>,
            broadcast_bf16: broadcast_grid<bf16>,
            broadcast_i32: broadcast_grid<i32>,
            broadcast_i64: broadcast_grid<i64>,
            broadcast_u8: broadcast_grid<u8>,
            alltoall_f32: alltoall_grid<f32>,
            alltoall_f64: alltoall_grid<f64>,
            alltoall_f16: alltoall_grid<f16>,
            alltoall_bf16: alltoall_grid<bf16>,
            alltoall_i32: alltoall_grid<i32>,
            alltoall_i64: alltoall_grid<i64>,
            alltoall_u8: alltoall_grid<u8>,
        }
    };
    ($($test:ident: $f:ident<$t:ty>),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            $crate::common::grid::$f::<$t, World>().await
        }
    )*};
}
