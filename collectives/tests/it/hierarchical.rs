//! Hierarchical allreduce and allgather over the in-memory transport, against
//! the flat ring on the same inputs: host layouts 2x2, 3x2, 2x3, ranks not in
//! host order, and layouts that fall back to flat (one host, uneven hosts);
//! lengths {0, 1, < world, not divisible, large, above the small-message size}.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use collectives::schedule::{CrossStep, HierarchicalLayout};
use collectives::{
    AllreduceAlgorithm, CollectiveError, CollectiveOptions, Collectives, Communicator, Element,
    FusedPhases, Generation, Host, Layout, MemTransport, NotHierarchical, ReduceOp, Scaling,
    Topology, Transport, TransportError,
};
use common::*;

/// Host of each rank: `hosts` hosts of `slots` ranks, ranks filling hosts in
/// order (as elasticrun lays them out).
fn host_major(hosts: usize, slots: usize) -> Vec<usize> {
    (0..hosts * slots).map(|r| r / slots).collect()
}

/// (name, host of each rank, whether it forms a hierarchy).
fn layouts() -> Vec<(&'static str, Vec<usize>, bool)> {
    vec![
        ("2x2", host_major(2, 2), true),
        ("3x2", host_major(3, 2), true),
        ("2x3", host_major(2, 3), true),
        ("2x3 interleaved", (0..6).map(|r| r % 2).collect(), true),
        ("1x4", host_major(1, 4), false),
        ("3+1", vec![0, 0, 0, 1], false),
    ]
}

fn variants() -> Vec<(&'static str, CollectiveOptions)> {
    let d = CollectiveOptions::default();
    vec![
        ("auto", d.clone()),
        (
            "ring, 16-byte segments",
            CollectiveOptions {
                segment_bytes: 16,
                allreduce: AllreduceAlgorithm::Ring,
                ..d.clone()
            },
        ),
        (
            "doubling",
            CollectiveOptions {
                allreduce: AllreduceAlgorithm::RecursiveDoubling,
                ..d
            },
        ),
    ]
}

fn world(n: usize, opts: &CollectiveOptions) -> Vec<Communicator<MemTransport>> {
    MemTransport::world(n, Generation(0), Duration::from_secs(30))
        .into_iter()
        .map(|t| Communicator::new(t, opts.clone()))
        .collect()
}

/// A world with both hierarchical collectives on where `hosts` allows them
/// (the rule the worker applies), and a flat one with the same options.
fn worlds(
    hosts: &[usize],
    opts: &CollectiveOptions,
) -> (
    Vec<Communicator<MemTransport>>,
    Vec<Communicator<MemTransport>>,
) {
    let h = Topology::from_hosts(hosts).hierarchy().ok().map(Arc::new);
    let hier = CollectiveOptions {
        hierarchical_allreduce: h.clone(),
        hierarchical_allgather: h,
        ..opts.clone()
    };
    (world(hosts.len(), &hier), world(hosts.len(), opts))
}

/// Lengths of the grid, with one above the 64 KiB small-message size so that
/// `auto` takes the cross-host ring.
fn grid_lengths(n: usize) -> Vec<usize> {
    let mut v = lengths(n);
    v.push(20_000);
    v
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>, ctx: &str) -> T {
    r.unwrap_or_else(|e| panic!("{ctx}: {e}"))
}

fn bytes<T: Element>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

async fn allreduce_all<X: Transport>(
    comms: &[Communicator<X>],
    bufs: &mut [Vec<impl Element>],
    op: ReduceOp,
    ctx: &str,
) {
    for r in with_buffers(comms, bufs, |c, b| c.allreduce(b, op)).await {
        ok(r, ctx);
    }
}

async fn allreduce_grid<T: Element>() {
    for (name, hosts, hierarchical) in layouts() {
        let n = hosts.len();
        let formed = Topology::from_hosts(&hosts).hierarchy().is_ok();
        assert_eq!(formed, hierarchical, "{name}");
        for (variant, opts) in variants() {
            let (hier, flat) = worlds(&hosts, &opts);
            for len in grid_lengths(n) {
                for op in ReduceOp::ALL {
                    let ctx = format!("allreduce {} {op} {name} len={len} {variant}", T::DTYPE);
                    let mut got = inputs::<T>(n, len, op);
                    let mut want = got.clone();
                    allreduce_all(&hier, &mut got, op, &ctx).await;
                    allreduce_all(&flat, &mut want, op, &ctx).await;
                    let reference = reference(n, len, op, T::DTYPE.is_float());
                    assert_matches(&got[0], &reference, op, &ctx);
                    assert_identical(&got, &ctx);
                    // Every partial sum of these inputs is exact, so any order
                    // of reduction gives the flat ring's bytes.
                    if op != ReduceOp::Average || !T::DTYPE.is_float() {
                        assert!(
                            bytes(&got[0]) == bytes(&want[0]),
                            "{ctx}: differs from flat"
                        );
                    }
                }
            }
            shutdown_all(hier).await;
            shutdown_all(flat).await;
        }
    }
}

/// Values whose sums round: rank- and index-dependent fractions of all sizes.
fn noisy_inputs(n: usize, len: usize, shift: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|r| (0..len).map(|i| noisy(r, i + shift) as f32).collect())
        .collect()
}

#[tokio::test]
async fn floats_differ_from_the_flat_ring_only_by_rounding() {
    let mut differing = 0;
    for (name, hosts, _) in layouts().into_iter().take(4) {
        let n = hosts.len();
        let (hier, flat) = worlds(&hosts, &CollectiveOptions::default());
        for len in [4099, 20_000] {
            let ctx = format!("f32 sum {name} len={len}");
            let mut got = noisy_inputs(n, len, 0);
            let mut want = got.clone();
            allreduce_all(&hier, &mut got, ReduceOp::Sum, &ctx).await;
            allreduce_all(&flat, &mut want, ReduceOp::Sum, &ctx).await;
            assert_identical(&got, &ctx);
            differing += (0..len).filter(|&i| got[0][i] != want[0][i]).count();
            for i in 0..len {
                let magnitude: f64 = (0..n).map(|r| noisy(r, i).abs()).sum();
                let diff = (f64::from(got[0][i]) - f64::from(want[0][i])).abs();
                assert!(
                    diff <= 4.0 * f64::from(f32::EPSILON) * magnitude,
                    "{ctx}: element {i}: {} vs flat {}",
                    got[0][i],
                    want[0][i]
                );
            }
        }
        shutdown_all(hier).await;
        shutdown_all(flat).await;
    }
    // The two-level order is not the ring's: proof that the path ran.
    assert!(differing > 0, "every float equals the flat ring's");
}

/// The engine fuses through [`Collectives::allreduce_fused`] and
/// [`Collectives::allreduce_segments`] (tensors in pieces of memory, an
/// empty piece among them): on every layout (hierarchical, and the flat ones
/// that fall back) and algorithm, each element must get exactly the bits it
/// gets when its tensor is reduced alone.
#[tokio::test]
async fn fused_tensors_get_the_bits_they_get_alone() {
    let lens = [1, 7, 4099, 0, 333, 20_000];
    for (name, hosts, _) in layouts() {
        for (variant, opts) in variants() {
            let (hier, flat) = worlds(&hosts, &opts);
            // As the engine fuses: only tensors that take the same algorithm
            // alone (under `auto`, the small ones: doubling).
            let lens = match opts.allreduce {
                AllreduceAlgorithm::Auto => &lens[..5],
                _ => &lens[..],
            };
            for (path, world) in [("hierarchical", &hier), ("flat", &flat)] {
                let ctx = format!("{name} {variant} {path}");
                fused_against_alone(world, lens, &ctx).await;
                segments_against_alone(world, lens, &format!("{ctx}, in segments")).await;
                let one = format!("{ctx}, one tensor in segments");
                segments_against_alone(world, &[20_000], &one).await;
            }
            shutdown_all(hier).await;
            shutdown_all(flat).await;
        }
    }
}

/// Every rank's tensors of lengths `lens` (seeded by `salt`), and what each
/// gets reduced alone.
async fn inputs_and_alone(
    world: &[Communicator<MemTransport>],
    lens: &[usize],
    salt: usize,
    ctx: &str,
) -> (Vec<Vec<Vec<f32>>>, Vec<Vec<Vec<f32>>>) {
    let n = world.len();
    let per_rank: Vec<Vec<Vec<f32>>> = (0..n)
        .map(|r| {
            lens.iter()
                .enumerate()
                .map(|(t, &len)| noisy_inputs(n, len, 31 * t + salt)[r].clone())
                .collect()
        })
        .collect();
    let mut alone = per_rank.clone();
    for t in 0..lens.len() {
        let mut bufs: Vec<Vec<f32>> = alone.iter().map(|ts| ts[t].clone()).collect();
        allreduce_all(world, &mut bufs, ReduceOp::Sum, ctx).await;
        for (r, b) in bufs.into_iter().enumerate() {
            alone[r][t] = b;
        }
    }
    (per_rank, alone)
}

/// The hierarchical path packs the tensors into the scratch buffer; the
/// flat ones run on the tensors where they lie.
async fn fused_against_alone(world: &[Communicator<MemTransport>], lens: &[usize], ctx: &str) {
    let packs = world[0].options().hierarchical_allreduce.is_some();
    let (mut per_rank, alone) = inputs_and_alone(world, lens, 0, ctx).await;
    let res = with_buffers(world, &mut per_rank, |c, ts| async move {
        let (mut scratch, mut phases) = (Vec::new(), FusedPhases::default());
        Collectives::<Host>::allreduce_fused(c, ts, ReduceOp::Sum, &mut scratch, &mut phases)
            .await
            .map(|()| (phases, scratch.capacity()))
    })
    .await;
    let total: usize = lens.iter().sum();
    for r in res {
        let (phases, capacity) = ok(r, ctx);
        assert!(
            matches!((phases.packed, phases.reduced), (Some(p), Some(d)) if p <= d),
            "{ctx}: phases {phases:?}"
        );
        if packs {
            assert!(capacity >= total, "{ctx}: packed into {capacity} < {total}");
        } else {
            assert_eq!(capacity, 0, "{ctx}: the flat path packed its tensors");
        }
    }
    for (r, fused) in per_rank.iter().enumerate() {
        for (t, f) in fused.iter().enumerate() {
            assert!(
                bytes(f) == bytes(&alone[r][t]),
                "{ctx}: tensor {t} on rank {r}"
            );
        }
    }
}

/// `t` cut at a third (twice: an empty piece) and past the half.
fn pieces(t: &mut [f32]) -> Vec<&mut [f32]> {
    let (a, rest) = t.split_at_mut(t.len() / 3);
    let (b, rest) = rest.split_at_mut(0);
    let at = (rest.len() / 2 + 1).min(rest.len());
    let (c, d) = rest.split_at_mut(at);
    vec![a, b, c, d]
}

async fn segments_against_alone(world: &[Communicator<MemTransport>], lens: &[usize], ctx: &str) {
    let (mut per_rank, alone) = inputs_and_alone(world, lens, 5, ctx).await;
    let res = with_buffers(world, &mut per_rank, |c, ts| async move {
        let mut segs: Vec<Vec<&mut [f32]>> = ts.iter_mut().map(|t| pieces(t)).collect();
        let (mut scratch, mut phases) = (Vec::new(), FusedPhases::default());
        Collectives::<Host>::allreduce_segments(
            c,
            &mut segs,
            ReduceOp::Sum,
            &mut scratch,
            &mut phases,
        )
        .await
    })
    .await;
    for r in res {
        ok(r, ctx);
    }
    for (r, got) in per_rank.iter().enumerate() {
        for (t, g) in got.iter().enumerate() {
            assert!(
                bytes(g) == bytes(&alone[r][t]),
                "{ctx}: tensor {t} on rank {r}"
            );
        }
    }
}

fn gather_value(rank: usize, i: usize) -> f64 {
    ((rank * 31 + i) % 120) as f64
}

async fn allgather_grid<T: Element>() {
    for (name, hosts, _) in layouts() {
        let n = hosts.len();
        let opts = CollectiveOptions {
            segment_bytes: 16,
            ..CollectiveOptions::default()
        };
        let (hier, flat) = worlds(&hosts, &opts);
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
            let ctx = format!("allgather {} {name} counts={counts:?}", T::DTYPE);
            let got = on_every_rank(&hier, |c| c.allgatherv(&ins[c.rank()], &counts)).await;
            let learned = on_every_rank(&hier, |c| c.allgather(&ins[c.rank()])).await;
            let flat_got = on_every_rank(&flat, |c| c.allgatherv(&ins[c.rank()], &counts)).await;
            let flat0 = ok(flat_got.into_iter().next().unwrap(), &ctx);
            for (a, b) in got.into_iter().zip(learned) {
                let a = ok(a, &ctx);
                let (b, learned_counts) = ok(b, &ctx);
                assert_eq!(learned_counts, counts, "{ctx}");
                assert_matches(&a, &want, ReduceOp::Sum, &ctx);
                assert!(
                    bytes(&a) == bytes(&flat0) && bytes(&b) == bytes(&flat0),
                    "{ctx}"
                );
            }
        }
        shutdown_all(hier).await;
        shutdown_all(flat).await;
    }
}

macro_rules! grid {
    ($($test:ident: $f:ident<$t:ty>),* $(,)?) => {$(
        #[tokio::test]
        async fn $test() {
            $f::<$t>().await
        }
    )*};
}

grid! {
    allreduce_f32: allreduce_grid<f32>,
    allreduce_i64: allreduce_grid<i64>,
    allgather_f32: allgather_grid<f32>,
    allgather_i64: allgather_grid<i64>,
    allgather_u8: allgather_grid<u8>,
}

#[test]
fn one_host_and_uneven_hosts_fall_back_with_a_reason() {
    let why = |hosts: &[usize]| Topology::from_hosts(hosts).hierarchy().unwrap_err();
    assert_eq!(
        why(&host_major(1, 4)),
        NotHierarchical::TooFewHosts { hosts: 1 }
    );
    assert_eq!(
        why(&[0, 0, 0, 1]),
        NotHierarchical::Uneven {
            host: 1,
            ranks: 1,
            expected: 3
        }
    );
    assert_eq!(why(&host_major(4, 1)), NotHierarchical::OneRankPerHost);
}

/// Two collectives in flight at once on one communicator: the hierarchical
/// one's sub-collectives must not take the other's messages.
#[tokio::test]
async fn concurrent_collectives_keep_their_messages_apart() {
    let hosts = host_major(3, 2);
    let (hier, flat) = worlds(&hosts, &CollectiveOptions::default());
    drop(flat);
    let n = hosts.len();
    let res = on_every_rank(&hier, |c| async move {
        let mut a = vec![c.rank() as i64 + 1; 1000];
        let mut b = vec![10 * c.rank() as i64; 77];
        let mine = vec![c.rank() as u8; c.rank()];
        let (x, y, z) = tokio::join!(
            c.allreduce(&mut a, ReduceOp::Sum),
            c.allgather(&mine),
            c.allreduce(&mut b, ReduceOp::Max),
        );
        x.and(z)?;
        Ok::<_, CollectiveError>((a, b, y?.0))
    })
    .await;
    let gathered: Vec<u8> = (0..n).flat_map(|r| vec![r as u8; r]).collect();
    for r in res {
        let (a, b, g) = r.unwrap();
        assert!(a.iter().all(|&v| v == 21), "{a:?}");
        assert!(b.iter().all(|&v| v == 50), "{b:?}");
        assert_eq!(g, gathered);
    }
    shutdown_all(hier).await;
}

#[tokio::test]
async fn a_host_layout_of_another_world_or_none_is_refused() {
    let six = Arc::new(Topology::from_hosts(&host_major(3, 2)).hierarchy().unwrap());
    let opts = CollectiveOptions {
        hierarchical_allreduce: Some(six),
        ..CollectiveOptions::default()
    };
    let comms = world(4, &opts);
    let res = on_every_rank(&comms, |c| async move {
        let mut v = vec![1.0f32; 8];
        c.allreduce(&mut v, ReduceOp::Sum).await
    })
    .await;
    for r in res {
        assert!(
            matches!(
                r,
                Err(CollectiveError::HierarchySize { layout: 6, size: 4 })
            ),
            "{r:?}"
        );
    }
    shutdown_all(comms).await;
    let comms = world(2, &CollectiveOptions::default());
    let mut v = vec![1.0f32; 4];
    let layout = Layout::Hierarchical(HierarchicalLayout::even(4, 2, 1, CrossStep::Ring));
    let e = comms[0]
        .allreduce_layout(&mut v, ReduceOp::Sum, Scaling::default(), layout)
        .await
        .unwrap_err();
    assert!(matches!(e, CollectiveError::NoHierarchy), "{e:?}");
    // The hierarchical path runs on one buffer; pieces are refused before
    // any message, and left as they were.
    let (mut a, mut b) = (vec![1.0f32; 2], vec![2.0f32; 2]);
    let layout = Layout::Hierarchical(HierarchicalLayout::even(4, 2, 1, CrossStep::Ring));
    let e = comms[0]
        .allreduce_parts(
            &mut [&mut a, &mut b],
            ReduceOp::Sum,
            Scaling {
                prescale: 3.0,
                postscale: 1.0,
            },
            layout,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, CollectiveError::PiecesOnHierarchy { pieces: 2 }),
        "{e:?}"
    );
    assert_eq!((a, b), (vec![1.0; 2], vec![2.0; 2]));
    shutdown_all(comms).await;
}

#[tokio::test]
async fn a_rank_dying_mid_collective_fails_every_survivor() {
    let hosts = host_major(2, 3);
    let (hier, flat) = worlds(&hosts, &CollectiveOptions::default());
    drop(flat);
    let (results, _) = allreduce_while_one_dies(hier, 4, 50_000).await;
    assert_eq!(results.len(), 5);
    for r in results {
        assert!(
            matches!(
                r,
                Err(CollectiveError::Transport(TransportError::PeerLost {
                    rank: 4,
                    ..
                }))
            ),
            "{r:?}"
        );
    }
}

/// The same over sockets: large segments take the TCP transport's direct
/// receive through the sub-group views.
#[tokio::test]
async fn over_tcp_the_results_are_the_flat_ones() {
    let hosts = host_major(2, 3);
    let n = hosts.len();
    let grid = Arc::new(Topology::from_hosts(&hosts).hierarchy().unwrap());
    let opts = CollectiveOptions {
        hierarchical_allreduce: Some(grid.clone()),
        hierarchical_allgather: Some(grid),
        ..CollectiveOptions::default()
    };
    let cfg = collectives::TcpConfig {
        connect_timeout: Duration::from_secs(10),
        io_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    let mut eps = Vec::new();
    for _ in 0..n {
        let ep = collectives::TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), cfg.clone());
        eps.push(ep.await.unwrap());
    }
    let addrs: Vec<_> = eps.iter().map(|e| e.local_addr().unwrap()).collect();
    let connecting = eps
        .into_iter()
        .enumerate()
        .map(|(r, e)| e.connect(r, Generation(1), &addrs));
    let comms: Vec<_> = futures::future::join_all(connecting)
        .await
        .into_iter()
        .map(|t| Communicator::new(t.unwrap(), opts.clone()))
        .collect();
    for len in [5, 300_001] {
        let ctx = format!("tcp len={len}");
        let mut bufs = inputs::<f32>(n, len, ReduceOp::Sum);
        allreduce_all(&comms, &mut bufs, ReduceOp::Sum, &ctx).await;
        assert_matches(
            &bufs[0],
            &reference(n, len, ReduceOp::Sum, true),
            ReduceOp::Sum,
            &ctx,
        );
        assert_identical(&bufs, &ctx);
        let counts: Vec<usize> = (0..n).map(|r| len / (r + 1)).collect();
        let ins: Vec<Vec<i64>> = (0..n)
            .map(|r| (0..counts[r]).map(|i| (r * len + i) as i64).collect())
            .collect();
        let want: Vec<i64> = ins.concat();
        for got in on_every_rank(&comms, |c| c.allgatherv(&ins[c.rank()], &counts)).await {
            assert!(ok(got, &ctx) == want, "{ctx}: allgather");
        }
    }
    shutdown_all(comms).await;
}
