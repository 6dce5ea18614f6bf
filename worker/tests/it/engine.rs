//! The engine end to end over the in-memory transport: several ranks in one
//! process, each submitting from its own thread in its own order.

use std::thread;
use std::time::Duration;

use collectives::{CollectiveOptions, Communicator, Generation, MemTransport, ReduceOp};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use worker::engine::Kind;
use worker::{Engine, EngineConfig, EngineError, EngineStats, Tensor};

use crate::common;

use common::{DEADLINE, allreduce, on_every_rank, runtime};

/// A value that sums exactly in f32 over a few ranks.
fn value(rank: usize, tensor: usize, i: usize) -> f32 {
    ((rank * 31 + tensor * 7 + i) % 13) as f32
}

/// Tensors of mixed sizes: latency-class (a few elements) and ring-class
/// (beyond the 64 KiB small-message size).
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

#[test]
fn any_submission_order_gives_every_rank_the_right_sums() {
    let size = 3;
    let lens = sizes(40);
    let cfg = EngineConfig {
        fusion_threshold_bytes: 256 << 10,
        ..EngineConfig::default()
    };
    let lens2 = lens.clone();
    let out = on_every_rank(size, cfg, move |rank, e| {
        let mut order: Vec<usize> = (0..lens2.len()).collect();
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(rank as u64));
        let mut rng = rand::rngs::StdRng::seed_from_u64(100 + rank as u64);
        let mut handles = Vec::new();
        for t in order {
            let data = (0..lens2[t]).map(|i| value(rank, t, i)).collect();
            handles.push((t, allreduce(e, &format!("grad.{t}"), data, ReduceOp::Sum)));
            if rng.random_bool(0.2) {
                thread::sleep(Duration::from_millis(2));
            }
        }
        handles
            .into_iter()
            .map(|(t, h)| (t, h.wait().unwrap().data))
            .collect::<Vec<_>>()
    });
    for (rank, (results, stats)) in out.iter().enumerate() {
        for (t, got) in results {
            let want: Vec<f32> = (0..lens[*t])
                .map(|i| (0..size).map(|r| value(r, *t, i)).sum())
                .collect();
            assert_eq!(got, &want, "rank {rank}, tensor grad.{t}");
        }
        assert_eq!(stats.tensors, 40, "rank {rank}: {stats:?}");
    }
    // Every rank ran the same collectives.
    let counts: Vec<u64> = out.iter().map(|(_, s)| s.collectives).collect();
    assert!(counts.iter().all(|&c| c == counts[0]), "{counts:?}");
}

/// Sums of random floats, whose result depends on the order of additions.
fn float_step(fusion_threshold_bytes: usize) -> Vec<(Vec<Vec<u32>>, EngineStats)> {
    let cfg = EngineConfig {
        fusion_threshold_bytes,
        ..EngineConfig::default()
    };
    on_every_rank(4, cfg, |rank, e| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7 + rank as u64);
        let handles: Vec<_> = sizes(24)
            .into_iter()
            .enumerate()
            .map(|(t, len)| {
                let data: Vec<f32> = (0..len)
                    .map(|_| rng.random_range(-1.0f32..1.0) * 1e3)
                    .collect();
                allreduce(e, &format!("w.{t}"), data, ReduceOp::Average)
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.wait().unwrap().data.iter().map(|x| x.to_bits()).collect())
            .collect()
    })
}

#[test]
fn fusion_on_and_off_give_bit_identical_results() {
    let off = float_step(0);
    let on = float_step(64 << 20);
    for rank in 0..4 {
        assert_eq!(off[rank].0, on[rank].0, "rank {rank}: fused results differ");
        assert_eq!(
            off[rank].1.collectives, 24,
            "unfused: one collective per tensor"
        );
        assert!(
            on[rank].1.collectives < 24 && on[rank].1.tensors == 24,
            "fused run should pack tensors: {:?}",
            on[rank].1
        );
    }
    assert_eq!(off[0].0, off[3].0, "ranks disagree");
}

#[test]
fn the_fusion_buffer_is_kept_across_steps() {
    let steps = 30;
    let cfg = EngineConfig {
        // Long cycles: a step's tensors land in one round and fuse.
        cycle_time: Duration::from_millis(20),
        ..EngineConfig::default()
    };
    let out = on_every_rank(2, cfg, move |rank, e| {
        for step in 0..steps {
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    let data = (0..100).map(|i| value(rank, t + step, i)).collect();
                    allreduce(e, &format!("g.{t}"), data, ReduceOp::Sum)
                })
                .collect();
            for (t, h) in hs.into_iter().enumerate() {
                let got = h.wait().unwrap().data;
                let want: Vec<f32> = (0..100)
                    .map(|i| value(0, t + step, i) + value(1, t + step, i))
                    .collect();
                assert_eq!(got, want, "rank {rank} step {step} tensor {t}");
            }
        }
    });
    for (rank, ((), stats)) in out.iter().enumerate() {
        assert!(stats.collectives < stats.tensors, "rank {rank}: {stats:?}");
        // Grown only when a larger group than any before arrived (at most
        // once per group size, 8 tensors), never once per fused group.
        assert!(
            stats.fusion_buffer_growths <= 8,
            "rank {rank}: reallocated in the steady state: {stats:?}"
        );
    }
}

#[test]
fn steady_state_hits_the_cache_and_eviction_keeps_results_right() {
    for capacity in [1024, 3] {
        let cfg = EngineConfig {
            cache_capacity: capacity,
            ..EngineConfig::default()
        };
        let out = on_every_rank(2, cfg, |rank, e| {
            let mut bad = Vec::new();
            for step in 0..6 {
                let hs: Vec<_> = (0..5)
                    .map(|t| {
                        allreduce(
                            e,
                            &format!("p.{t}"),
                            vec![(rank + step + t) as i64; 3],
                            ReduceOp::Sum,
                        )
                    })
                    .collect();
                for (t, h) in hs.into_iter().enumerate() {
                    let want = (1 + 2 * (step + t)) as i64;
                    let got = h.wait().unwrap().data;
                    if got != vec![want; 3] {
                        bad.push((step, t, got));
                    }
                }
            }
            bad
        });
        for (rank, (bad, stats)) in out.iter().enumerate() {
            assert!(
                bad.is_empty(),
                "capacity {capacity}, rank {rank}: wrong results {bad:?}"
            );
            if capacity == 1024 {
                // First step negotiates by name, the next five by bit (the
                // counter sums both ranks' bits).
                assert_eq!(stats.cache_hits, 2 * 25, "rank {rank}: {stats:?}");
            } else {
                assert!(
                    stats.cache_hits < 2 * 25,
                    "capacity 3 must evict: {stats:?}"
                );
            }
        }
    }
}

#[test]
fn a_mismatch_fails_that_tensor_on_every_rank_and_the_next_one_works() {
    let out = on_every_rank(3, EngineConfig::default(), |rank, e| {
        let len = if rank == 1 { 5 } else { 4 };
        let bad = allreduce(e, "layer1.weight", vec![1.0f32; len], ReduceOp::Sum).wait();
        let good = allreduce(e, "layer1.bias", vec![rank as f32; 2], ReduceOp::Sum).wait();
        (bad.err(), good.map(|t| t.data))
    });
    for (rank, ((bad, good), _)) in out.iter().enumerate() {
        let e = bad
            .as_ref()
            .unwrap_or_else(|| panic!("rank {rank}: mismatch not reported"));
        assert!(matches!(e, EngineError::Mismatch(_)), "rank {rank}: {e:?}");
        let text = e.to_string();
        for needle in [
            "layer1.weight",
            "rank 0: allreduce(Sum) F32 [4]",
            "rank 1: allreduce(Sum) F32 [5]",
            "rank 2:",
        ] {
            assert!(
                text.contains(needle),
                "rank {rank}: {text:?} lacks {needle:?}"
            );
        }
        assert_eq!(good.as_ref().unwrap(), &vec![3.0f32; 2], "rank {rank}");
    }
}

#[test]
fn a_broadcast_sized_by_its_root_gives_every_rank_roots_length_and_shape() {
    // Each round root 1 sends a length the others do not know (none, a few
    // bytes, past the small-message size), and they submit other lengths.
    let size = 4;
    let lens = [0usize, 3, 70_000, 17];
    let out = on_every_rank(size, EngineConfig::default(), move |rank, e| {
        let mut got = Vec::new();
        for (round, &len) in lens.iter().enumerate() {
            let (data, shape) = if rank == 1 {
                let d: Vec<u8> = (0..len).map(|i| (i * 7 + round) as u8).collect();
                (d, vec![len, 1])
            } else {
                (vec![rank as u8; rank * 5 + round], vec![rank * 5 + round])
            };
            let t = e
                .submit(
                    format!("object.{round}"),
                    Kind::BroadcastSized { root: 1 },
                    Tensor::new(data, shape).unwrap(),
                    vec![],
                    vec![],
                )
                .wait()
                .unwrap();
            got.push((t.data, t.shape));
        }
        got
    });
    for (rank, (got, _)) in out.into_iter().enumerate() {
        for (round, (&len, (data, shape))) in lens.iter().zip(got).enumerate() {
            let want: Vec<u8> = (0..len).map(|i| (i * 7 + round) as u8).collect();
            assert_eq!(data, want, "rank {rank} round {round}");
            assert_eq!(shape, vec![len, 1], "rank {rank} round {round}");
        }
    }
}

#[test]
fn every_collective_runs_through_the_engine() {
    let size = 3;
    let out = on_every_rank(size, EngineConfig::default(), move |rank, e| {
        let rows = rank + 1;
        let g = e.submit(
            "g".into(),
            Kind::Allgather,
            Tensor::new(vec![rank as i32; rows * 2], vec![rows, 2]).unwrap(),
            vec![],
            vec![],
        );
        let b = e.submit(
            "b".into(),
            Kind::Broadcast { root: 2 },
            Tensor::from(vec![rank as u8; 5]),
            vec![],
            vec![],
        );
        let splits: Vec<usize> = (0..size).map(|j| j + 1).collect();
        let data: Vec<f64> = (0..6).map(|i| (rank * 10 + i) as f64).collect();
        let a = e.submit(
            "a".into(),
            Kind::Alltoall,
            Tensor::from(data),
            splits,
            vec![],
        );
        let rs = e.submit(
            "rs".into(),
            Kind::Reducescatter(ReduceOp::Max),
            Tensor::from(vec![rank as i64; 7]),
            vec![],
            vec![],
        );
        let g = g.wait().unwrap();
        (
            g.data,
            g.shape,
            b.wait().unwrap().data,
            a.wait_with_splits().unwrap(),
            rs.wait().unwrap().data,
        )
    });
    for (rank, ((g, gshape, b, (a, asplits), rs), _)) in out.into_iter().enumerate() {
        assert_eq!(
            g,
            vec![0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2],
            "allgather on rank {rank}"
        );
        assert_eq!(gshape, vec![6, 2], "allgather shape on rank {rank}");
        assert_eq!(b, vec![2u8; 5], "broadcast on rank {rank}");
        // Rank j sent rank r the elements at [r(r+1)/2 .. +r+1] of its data.
        let start = rank * (rank + 1) / 2;
        let want: Vec<f64> = (0..size)
            .flat_map(|j| (start..start + rank + 1).map(move |i| (j * 10 + i) as f64))
            .collect();
        assert_eq!(
            (a.data, asplits),
            (want, vec![rank + 1; size]),
            "alltoall on rank {rank}"
        );
        let mine = if rank == 0 { 3 } else { 2 };
        assert_eq!(rs, vec![2i64; mine], "reducescatter on rank {rank}");
    }
}

#[test]
fn a_lost_peer_fails_pending_tensors_instead_of_hanging() {
    let rt = runtime();
    let mut world = MemTransport::world(2, Generation(1), Duration::from_secs(2));
    let mut negotiation = MemTransport::world(2, Generation(1), Duration::from_secs(2));
    let dead = (world.pop().unwrap(), negotiation.pop().unwrap());
    let planes = worker::Planes {
        data: Communicator::new(world.pop().unwrap(), CollectiveOptions::default()),
        negotiation: Communicator::new(negotiation.pop().unwrap(), CollectiveOptions::default()),
    };
    let e = Engine::start(rt.handle(), planes, EngineConfig::default(), |_| async {});
    dead.0.kill();
    dead.1.kill();
    let r = allreduce(&e, "x", vec![1.0f32; 4], ReduceOp::Sum).wait();
    assert!(matches!(r, Err(EngineError::Collective(_))), "{r:?}");
    // Later submissions get the same error straight away.
    let r = allreduce(&e, "y", vec![1.0f32; 4], ReduceOp::Sum).wait();
    assert!(matches!(r, Err(EngineError::Collective(_))), "{r:?}");
    rt.block_on(async { tokio::time::timeout(DEADLINE, e.shutdown()).await })
        .expect("shutdown hung")
        .unwrap();
}

#[test]
fn the_timeline_records_every_phase_of_every_tensor() {
    let dir = std::env::temp_dir().join(format!("engine-timeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("timeline.json");
    let cfg = EngineConfig {
        timeline: Some(worker::TimelineConfig {
            path: path.clone(),
            mark_cycles: true,
        }),
        cycle_time: Duration::from_millis(300),
        // A burst is complete only after 50 ms without a submission, so the
        // three tensors submitted together meet in one round on both ranks
        // however their thread is scheduled: with the default 50 µs, a
        // loaded machine once split them into two rounds.
        settle_quiet: Duration::from_millis(50),
        ..EngineConfig::default()
    };
    on_every_rank(2, cfg, |rank, e| {
        allreduce(e, "sync", vec![0u8], ReduceOp::Sum)
            .wait()
            .unwrap();
        // Submitted together: fused into one allreduce.
        let hs: Vec<_> = (0..3)
            .map(|t| {
                allreduce(
                    e,
                    &format!("fused.{t}"),
                    vec![rank as f32; 8],
                    ReduceOp::Sum,
                )
            })
            .collect();
        hs.into_iter().for_each(|h| drop(h.wait().unwrap()));
        let g = e.submit(
            "alone".into(),
            Kind::Allgather,
            Tensor::from(vec![1u8; 3]),
            vec![],
            vec![],
        );
        g.wait().unwrap();
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<serde_json::Value> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let pid_of = |name: &str| {
        events
            .iter()
            .find(|e| e["name"] == "process_name" && e["args"]["name"] == name)
            .unwrap_or_else(|| panic!("no process for {name}: {text}"))["pid"]
            .clone()
    };
    let phases = |name: &str| -> Vec<String> {
        let pid = pid_of(name);
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid)
            .map(|e| e["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for t in 0..3 {
        assert_eq!(
            phases(&format!("fused.{t}")),
            [
                "NEGOTIATE",
                "QUEUE",
                "MEMCPY_IN_FUSION_BUFFER",
                "ALLREDUCE",
                "MEMCPY_OUT_FUSION_BUFFER"
            ],
            "{text}"
        );
    }
    assert_eq!(
        phases("alone"),
        ["NEGOTIATE", "QUEUE", "ALLGATHER"],
        "{text}"
    );
    assert!(
        events.iter().any(|e| e["name"] == "CYCLE_START"),
        "no cycle marks"
    );
    let fused = events
        .iter()
        .find(|e| e["name"] == "ALLREDUCE" && e["pid"] == pid_of("fused.0"))
        .unwrap();
    assert_eq!(fused["args"]["fused_tensors"], 3, "{fused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ranks_that_run_out_of_data_join_and_the_rest_go_on() {
    let size = 3;
    let out = on_every_rank(size, EngineConfig::default(), |rank, e| {
        // Rank r has r + 1 batches.
        let mut averages = Vec::new();
        for _ in 0..=rank {
            let h = allreduce(e, "grad", vec![(rank + 1) as f32; 4], ReduceOp::Average);
            averages.push(h.wait().unwrap().data[0]);
        }
        let mut extra = None;
        if rank == 2 {
            // Ranks 0 and 1 have joined by now.
            let g = e.submit(
                "rows".into(),
                Kind::Allgather,
                Tensor::from(vec![9i32; 2]),
                vec![],
                vec![],
            );
            let b = e.submit(
                "b".into(),
                Kind::Broadcast { root: 2 },
                Tensor::from(vec![1u8]),
                vec![],
                vec![],
            );
            let sum = allreduce(e, "count", vec![1i64], ReduceOp::Sum);
            extra = Some((
                g.wait().map(|t| t.data),
                b.wait().err().map(|e| e.to_string()),
                sum.wait().unwrap().data,
            ));
        }
        (averages, e.join().unwrap(), extra)
    });
    for (rank, ((averages, last, _), _)) in out.iter().enumerate() {
        // Step s averages over the ranks that still had data: s..3.
        let want: Vec<f32> = (0..=rank)
            .map(|s| (s + 1..=size).sum::<usize>() as f32 / (size - s) as f32)
            .collect();
        assert_eq!(averages, &want, "rank {rank}");
        assert_eq!(*last, 2, "rank {rank}: the last rank to join");
    }
    let (gathered, broadcast, count) = out[2].0.2.clone().unwrap();
    assert_eq!(gathered.unwrap(), vec![9, 9], "joined ranks add no rows");
    let why = broadcast.expect("a broadcast cannot run with joined ranks");
    assert!(why.contains("rank(s) [0, 1] have joined"), "{why}");
    assert_eq!(count, vec![1], "joined ranks add zeros");
}

/// The same name submitted again while it is in flight runs after it, on
/// every rank, whatever each rank's timing: rank 0 submits both at once,
/// rank 1 the second only once the first has finished there. (Whether the
/// second was refused used to depend on that timing, and a rank that took
/// it waited for ever on one that had refused it.)
#[test]
fn a_name_submitted_again_while_in_flight_runs_after_it_on_every_rank() {
    let out = on_every_rank(2, EngineConfig::default(), |rank, e| {
        let first = vec![1.0f32 + rank as f32; 3];
        let second = vec![10.0f32 * (rank as f32 + 1.0); 3];
        if rank == 0 {
            let a = allreduce(e, "grad", first, ReduceOp::Sum);
            let b = allreduce(e, "grad", second, ReduceOp::Sum);
            (a.wait().map(|t| t.data), b.wait().map(|t| t.data))
        } else {
            let a = allreduce(e, "grad", first, ReduceOp::Sum).wait();
            let b = allreduce(e, "grad", second, ReduceOp::Sum).wait();
            (a.map(|t| t.data), b.map(|t| t.data))
        }
    });
    for (rank, ((a, b), _)) in out.iter().enumerate() {
        assert_eq!(a.as_ref().unwrap(), &vec![3.0f32; 3], "rank {rank}");
        assert_eq!(b.as_ref().unwrap(), &vec![30.0f32; 3], "rank {rank}");
    }
}

/// Allgathers submitted together run as one fused collective: each tensor
/// gets every rank's rows in rank order, whatever each rank contributes to
/// it, step after step out of the kept fusion buffer.
#[test]
fn fused_allgathers_give_each_tensor_every_ranks_rows() {
    let (size, steps, tensors) = (3, 5, 4);
    let cfg = EngineConfig {
        // Long cycles: a step's tensors land in one round and fuse.
        cycle_time: Duration::from_millis(20),
        ..EngineConfig::default()
    };
    // Rank r gives tensor t (r + t) % 3 rows of t + 1 columns.
    let rows = |r: usize, t: usize| (r + t) % 3;
    let cell =
        |step: usize, r: usize, t: usize, i: usize| (step * 1000 + r * 100 + t * 10 + i) as i64;
    let out = on_every_rank(size, cfg, move |rank, e| {
        for step in 0..steps {
            let hs: Vec<_> = (0..tensors)
                .map(|t| {
                    let n = rows(rank, t) * (t + 1);
                    let data = (0..n).map(|i| cell(step, rank, t, i)).collect();
                    let tensor = Tensor::new(data, vec![rows(rank, t), t + 1]).unwrap();
                    e.submit(format!("g.{t}"), Kind::Allgather, tensor, vec![], vec![])
                })
                .collect();
            for (t, h) in hs.into_iter().enumerate() {
                let got = h.wait().unwrap();
                let want: Vec<i64> = (0..size)
                    .flat_map(|r| (0..rows(r, t) * (t + 1)).map(move |i| cell(step, r, t, i)))
                    .collect();
                let all_rows = (0..size).map(|r| rows(r, t)).sum::<usize>();
                assert_eq!(got.data, want, "rank {rank} step {step} tensor {t}");
                assert_eq!(
                    got.shape,
                    vec![all_rows, t + 1],
                    "rank {rank} step {step} tensor {t}"
                );
            }
        }
    });
    for (rank, ((), stats)) in out.iter().enumerate() {
        assert!(
            stats.collectives < stats.tensors,
            "rank {rank} never fused: {stats:?}"
        );
    }
}
