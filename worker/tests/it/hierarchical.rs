//! The engine on the hierarchical path, over the in-memory transport: fused
//! and unfused allreduce stay bit-identical, and integer allreduce and
//! allgather give exactly what the flat path gives.

use std::sync::Arc;

use collectives::{CollectiveOptions, ReduceOp, Topology};
use rand::{RngExt, SeedableRng};
use worker::engine::Kind;
use worker::{Engine, EngineConfig, EngineStats, Tensor};

use crate::common;

use common::on_ranks;

/// Both collectives hierarchical over `hosts` hosts of `slots` ranks.
fn options(hosts: usize, slots: usize) -> CollectiveOptions {
    let host_of: Vec<usize> = (0..hosts * slots).map(|r| r / slots).collect();
    let grid = Arc::new(Topology::from_hosts(&host_of).hierarchy().unwrap());
    CollectiveOptions {
        hierarchical_allreduce: Some(grid.clone()),
        hierarchical_allgather: Some(grid),
        ..CollectiveOptions::default()
    }
}

fn submit<T: collectives::Element>(
    e: &Engine,
    name: &str,
    kind: Kind,
    data: Vec<T>,
) -> worker::Handle<T> {
    e.submit(name.into(), kind, Tensor::from(data), vec![], vec![])
}

/// Latency-class and ring-class tensor lengths, mixed.
fn sizes(count: usize) -> Vec<usize> {
    (0..count)
        .map(|t| match t % 4 {
            0 => 1 + t,
            1 => 1000 + t,
            2 => 20_000 + 3 * t,
            _ => 70 + t,
        })
        .collect()
}

/// Ranks of the float test's world.
const SIZE: usize = 9;

/// Averages of random floats (order-sensitive sums), as bit patterns.
fn float_step(
    opts: &CollectiveOptions,
    fusion_threshold_bytes: usize,
) -> Vec<(Vec<Vec<u32>>, EngineStats)> {
    let cfg = EngineConfig {
        fusion_threshold_bytes,
        ..EngineConfig::default()
    };
    on_ranks(
        SIZE,
        |_| (opts.clone(), cfg.clone()),
        |rank, e| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(11 + rank as u64);
            let handles: Vec<_> = sizes(24)
                .into_iter()
                .enumerate()
                .map(|(t, len)| {
                    let data: Vec<f32> = (0..len)
                        .map(|_| rng.random_range(-1.0f32..1.0) * 1e3)
                        .collect();
                    submit(
                        e,
                        &format!("w.{t}"),
                        Kind::Allreduce(ReduceOp::Average),
                        data,
                    )
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.wait().unwrap().data.iter().map(|x| x.to_bits()).collect())
                .collect()
        },
    )
}

#[test]
fn fused_and_unfused_hierarchical_allreduce_are_bit_identical() {
    // Three ranks per host and three hosts: the order in which an element is
    // combined depends on its block at both levels (with two, it would not).
    let opts = options(3, 3);
    let off = float_step(&opts, 0);
    let on = float_step(&opts, 64 << 20);
    for rank in 0..SIZE {
        assert_eq!(off[rank].0, on[rank].0, "rank {rank}: fused results differ");
        assert_eq!(
            off[rank].1.collectives, 24,
            "unfused: one collective per tensor"
        );
        assert!(
            on[rank].1.collectives < 24 && on[rank].1.tensors == 24,
            "the fused run should pack tensors: {:?}",
            on[rank].1
        );
    }
    assert_eq!(off[0].0, off[SIZE - 1].0, "ranks disagree");
}

fn int_value(rank: usize, t: usize, i: usize) -> i64 {
    ((rank * 1_000_003 + t * 7919 + i * 31) % 100_000) as i64 - 50_000
}

#[test]
fn integer_allreduce_and_allgather_equal_the_flat_results() {
    let (hosts, slots) = (3, 2);
    let size = hosts * slots;
    let lens = sizes(12);
    let run = |opts: CollectiveOptions| {
        let lens = lens.clone();
        on_ranks(
            size,
            |_| (opts.clone(), EngineConfig::default()),
            move |rank, e| {
                let sums: Vec<_> = lens
                    .iter()
                    .enumerate()
                    .map(|(t, &len)| {
                        let data = (0..len).map(|i| int_value(rank, t, i)).collect();
                        submit(e, &format!("g.{t}"), Kind::Allreduce(ReduceOp::Sum), data)
                    })
                    .collect();
                let gathers: Vec<_> = (0..4)
                    .map(|t| {
                        let rows = (rank + t) % 3;
                        let data = (0..rows).map(|i| int_value(rank, 100 + t, i)).collect();
                        submit(e, &format!("a.{t}"), Kind::Allgather, data)
                    })
                    .collect();
                let sums: Vec<Vec<i64>> =
                    sums.into_iter().map(|h| h.wait().unwrap().data).collect();
                let gathers: Vec<Vec<i64>> = gathers
                    .into_iter()
                    .map(|h| h.wait().unwrap().data)
                    .collect();
                (sums, gathers)
            },
        )
    };
    let hier = run(options(hosts, slots));
    let flat = run(CollectiveOptions::default());
    for rank in 0..size {
        let ((sums, gathers), _) = &hier[rank];
        assert_eq!(
            (sums, gathers),
            (&flat[rank].0.0, &flat[rank].0.1),
            "rank {rank}"
        );
        for (t, got) in sums.iter().enumerate() {
            let want: Vec<i64> = (0..lens[t])
                .map(|i| (0..size).map(|r| int_value(r, t, i)).sum())
                .collect();
            assert_eq!(got, &want, "rank {rank}, g.{t}");
        }
        for (t, got) in gathers.iter().enumerate() {
            let want: Vec<i64> = (0..size)
                .flat_map(|r| (0..(r + t) % 3).map(move |i| int_value(r, 100 + t, i)))
                .collect();
            assert_eq!(got, &want, "rank {rank}, a.{t}");
        }
    }
}
