//! GPU tensors through the engine (feature `cuda`): negotiation, fusion and
//! NCCL, one rank per GPU (up to two) in one process. Without a GPU each
//! test prints one line saying what is missing and passes: no CI machine has
//! one (docs/gpu.md says which of these have run on which GPU).

#![cfg(feature = "cuda")]

use collectives::ReduceOp;
use worker::engine::Kind;
use worker::{DeviceBuffer, EngineConfig};

use crate::common;

use common::on_every_rank;

/// How many ranks the GPUs here allow (one each, at most two), or `None`
/// after saying why there are none.
fn gpu_ranks(test: &str) -> Option<usize> {
    match gpu::probe() {
        Ok(info) => Some(info.devices.min(2)),
        Err(e) => {
            println!("skipped {test}: {e}");
            None
        }
    }
}

fn value(rank: usize, tensor: usize, i: usize) -> f32 {
    ((rank * 31 + tensor * 7 + i) % 13) as f32
}

/// Each rank submits `lens.len()` GPU tensors and gets back the sums, on
/// the host, in tensor order.
fn sums(size: usize, lens: Vec<usize>, fusion_threshold_bytes: usize) -> Vec<Vec<Vec<f32>>> {
    let cfg = EngineConfig {
        fusion_threshold_bytes,
        ..EngineConfig::default()
    };
    let out = on_every_rank(size, cfg, move |rank, e| {
        let stream = gpu::stream_on(rank).unwrap();
        let handles: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(t, &n)| {
                let host: Vec<f32> = (0..n).map(|i| value(rank, t, i)).collect();
                let buf = DeviceBuffer::from_host(&stream, &host).unwrap();
                e.submit_gpu(
                    format!("grad.{t}"),
                    Kind::Allreduce(ReduceOp::Sum),
                    buf,
                    vec![n],
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.wait().unwrap().0.to_host().unwrap())
            .collect::<Vec<_>>()
    });
    out.into_iter().map(|(r, _)| r).collect()
}

#[test]
fn gpu_tensors_sum_exactly_with_fusion_on_and_off_and_agree_bit_for_bit() {
    let Some(size) = gpu_ranks("GPU tensors through the engine") else {
        return;
    };
    let lens: Vec<usize> = (0..24).map(|t| [3, 1000, 20_000, 70][t % 4] + t).collect();
    let fused = sums(size, lens.clone(), 64 << 20);
    let alone = sums(size, lens.clone(), 0);
    for rank in 0..size {
        for (t, &n) in lens.iter().enumerate() {
            let want: Vec<f32> = (0..n)
                .map(|i| (0..size).map(|r| value(r, t, i)).sum())
                .collect();
            assert_eq!(fused[rank][t], want, "rank {rank} tensor {t} fused");
            let same = fused[rank][t]
                .iter()
                .zip(&alone[rank][t])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "rank {rank} tensor {t}: fused and unfused differ");
        }
    }
}

#[test]
fn two_ranks_on_one_gpu_act_as_two_hosts_through_the_two_level_allreduce() {
    if gpu_ranks("two-level GPU allreduce").is_none() {
        return;
    }
    // One rank per host: the GPU allreduce's grid (the host collectives'
    // needs two ranks per host).
    let hosts = collectives::Topology::from_hosts(&["a", "b"]);
    let h = std::sync::Arc::new(hosts.device_hierarchy().unwrap());
    let setup = move |_| {
        let opts = collectives::CollectiveOptions {
            device_hierarchical_allreduce: Some(h.clone()),
            ..collectives::CollectiveOptions::default()
        };
        (opts, EngineConfig::default())
    };
    // One at a time, so that the block staged in host memory shrinks and
    // grows between calls.
    let lens = [70_000usize, 5, 3000, 70_001];
    let out = common::on_ranks(2, setup, move |rank, e| {
        // Both ranks on GPU 0: one-rank NCCL communicators, the host data
        // plane between them.
        let stream = gpu::stream_on(0).unwrap();
        let mut got = Vec::new();
        for (t, &n) in lens.iter().enumerate() {
            for op in [ReduceOp::Sum, ReduceOp::Average] {
                let host: Vec<f32> = (0..n).map(|i| value(rank, t, i)).collect();
                let buf = DeviceBuffer::from_host(&stream, &host).unwrap();
                let name = format!("t{t}.{op:?}");
                let h = e.submit_gpu(name, Kind::Allreduce(op), buf, vec![n]);
                got.push(h.wait().unwrap().0.to_host().unwrap());
            }
        }
        got
    });
    for (rank, (got, _)) in out.iter().enumerate() {
        let mut k = 0;
        for (t, &n) in lens.iter().enumerate() {
            let sum: Vec<f32> = (0..n).map(|i| value(0, t, i) + value(1, t, i)).collect();
            let avg: Vec<f32> = sum.iter().map(|s| s / 2.0).collect();
            assert_eq!(got[k], sum, "rank {rank} tensor {t} sum");
            assert_eq!(got[k + 1], avg, "rank {rank} tensor {t} average");
            k += 2;
        }
    }
}

/// The executor's one path on a GPU: allgathers submitted together fused
/// into one NCCL gather (every rank's rows, in rank order, whatever each
/// contributes), broadcast and reducescatter beside them, and alltoall
/// refused with what to do instead.
#[test]
fn gpu_allgathers_fuse_and_every_other_collective_runs_through_the_engine() {
    let Some(size) = gpu_ranks("GPU collectives through the engine") else {
        return;
    };
    let cfg = EngineConfig {
        cycle_time: std::time::Duration::from_millis(20),
        ..EngineConfig::default()
    };
    let rows = |r: usize, t: usize| (r + t) % 3;
    let cell = |r: usize, t: usize, i: usize| (r * 100 + t * 10 + i) as f32;
    let out = on_every_rank(size, cfg, move |rank, e| {
        let stream = gpu::stream_on(rank).unwrap();
        let on_gpu = |v: Vec<f32>| DeviceBuffer::from_host(&stream, &v).unwrap();
        let gathers: Vec<_> = (0..3)
            .map(|t| {
                let data = (0..rows(rank, t) * 2).map(|i| cell(rank, t, i)).collect();
                e.submit_gpu(
                    format!("g.{t}"),
                    Kind::Allgather,
                    on_gpu(data),
                    vec![rows(rank, t), 2],
                )
            })
            .collect();
        let b = e.submit_gpu(
            "b".into(),
            Kind::Broadcast { root: 0 },
            on_gpu(vec![rank as f32; 5]),
            vec![5],
        );
        let rs = e.submit_gpu(
            "rs".into(),
            Kind::Reducescatter(ReduceOp::Max),
            on_gpu(vec![rank as f32; 7]),
            vec![7],
        );
        let a = e.submit_gpu("a".into(), Kind::Alltoall, on_gpu(vec![1.0; 4]), vec![4]);
        let g: Vec<_> = gathers
            .into_iter()
            .map(|h| {
                let (d, shape) = h.wait().unwrap();
                (d.to_host().unwrap(), shape)
            })
            .collect();
        let b = b.wait().unwrap().0.to_host().unwrap();
        let (rs, rs_shape) = rs.wait().unwrap();
        let refused = a.wait().unwrap_err().to_string();
        (g, b, (rs.to_host().unwrap(), rs_shape), refused)
    });
    for (rank, ((g, b, (rs, rs_shape), refused), _)) in out.into_iter().enumerate() {
        for (t, (got, shape)) in g.into_iter().enumerate() {
            let want: Vec<f32> = (0..size)
                .flat_map(|r| (0..rows(r, t) * 2).map(move |i| cell(r, t, i)))
                .collect();
            let all_rows = (0..size).map(|r| rows(r, t)).sum::<usize>();
            assert_eq!(
                (got, shape),
                (want, vec![all_rows, 2]),
                "rank {rank} allgather {t}"
            );
        }
        assert_eq!(b, vec![0.0; 5], "rank {rank} broadcast");
        let mine = collectives::schedule::even_counts(7, size)[rank];
        let top = (size - 1) as f32;
        assert_eq!(
            (rs, rs_shape),
            (vec![top; mine], vec![mine]),
            "rank {rank} reducescatter"
        );
        assert!(refused.contains("alltoall"), "rank {rank}: {refused}");
    }
}
