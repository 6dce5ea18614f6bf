//! Retuning a running engine: rank 0's new settings travel in its negotiation
//! message and every rank switches after the same round, so sums stay right
//! and ranks never disagree on a fusion plan, the response cache, the
//! hierarchical path or the segment size. The samples rank 0 takes reach every
//! rank's memory, so any rank can resume tuning for a world size.

use crate::common;

use std::sync::Arc;

use autotune::{Knob, Layout, Space, TunerConfig};
use collectives::{CollectiveOptions, ReduceOp, Topology};
use common::{on_every_rank, on_ranks};
use worker::engine::{AutotuneSetup, Kind, TuningMemory};
use worker::{Engine, EngineConfig, EngineStats, Tensor, Tuning};

const SIZE: usize = 3;
const STEPS: usize = 40;
const TENSORS: usize = 6;

fn value(rank: usize, step: usize, t: usize, i: usize) -> f32 {
    (rank * 1000 + step * 10 + t + i) as f32
}

/// One training-like step on a `size`-rank world: TENSORS allreduces
/// submitted together, then waited.
fn step(e: &Engine, size: usize, rank: usize, step: usize) {
    let handles: Vec<_> = (0..TENSORS)
        .map(|t| {
            let data: Vec<f32> = (0..3000).map(|i| value(rank, step, t, i)).collect();
            e.submit(
                format!("grad.{t}"),
                Kind::Allreduce(ReduceOp::Sum),
                Tensor::from(data),
                vec![],
                vec![],
            )
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        let got = h.wait().unwrap().data;
        for (i, g) in got.iter().enumerate() {
            let want: f32 = (0..size).map(|r| value(r, step, t, i)).sum();
            assert_eq!(*g, want, "step {step} tensor {t} element {i}");
        }
    }
}

/// Runs STEPS steps on every rank of a SIZE-rank world with `cfg`;
/// `before_step(rank, step, e)` runs first in each. Returns every rank's
/// counters.
fn run(cfg: EngineConfig, before_step: fn(usize, usize, &Engine)) -> Vec<EngineStats> {
    on_every_rank(SIZE, cfg, move |rank, e| {
        for s in 0..STEPS {
            before_step(rank, s, e);
            step(e, SIZE, rank, s);
        }
    })
    .into_iter()
    .map(|(_, s)| s)
    .collect()
}

/// Every rank switched the same number of times, to the same values, after
/// the same round.
fn assert_in_step(stats: &[EngineStats]) {
    for s in stats {
        assert_eq!(s.retunes, stats[0].retunes, "{s:?}");
        assert_eq!(
            s.last_retune, stats[0].last_retune,
            "ranks switched at different rounds"
        );
    }
}

const TUNER: TunerConfig = TunerConfig {
    warmup_samples: 1,
    steps_per_sample: 2,
    max_samples: 4,
    gp_noise: 0.8,
    seed: 0,
};

/// Rank `rank`'s engine config, autotuning with its own memory replica.
fn autotuned(log: &std::path::Path, memory: &TuningMemory) -> EngineConfig {
    EngineConfig {
        autotune: Some(AutotuneSetup {
            config: TUNER,
            fixed: vec![Knob::Cache],
            log_file: Some(log.to_path_buf()),
            memory: memory.clone(),
        }),
        ..EngineConfig::default()
    }
}

fn column(csv: &str, name: &str) -> Vec<String> {
    let col = autotune::CSV_COLUMNS
        .iter()
        .position(|c| *c == name)
        .unwrap();
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').nth(col).unwrap().to_owned())
        .collect()
}

/// An autotuned run over every rank, each with its memory in `memories`.
fn tuned_run(log: &std::path::Path, memories: &[TuningMemory]) -> Vec<EngineStats> {
    let cfgs: Vec<EngineConfig> = memories.iter().map(|m| autotuned(log, m)).collect();
    on_ranks(
        SIZE,
        move |r| (CollectiveOptions::default(), cfgs[r].clone()),
        |rank, e| (0..STEPS).for_each(|s| step(e, SIZE, rank, s)),
    )
    .into_iter()
    .map(|(_, s)| s)
    .collect()
}

#[test]
fn the_autotuner_logs_every_sample_and_every_rank_remembers_it() {
    let dir = std::env::temp_dir().join(format!("elasticrun-autotune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("autotune.csv");
    let memories: Vec<TuningMemory> = (0..SIZE).map(|_| TuningMemory::default()).collect();
    let stats = tuned_run(&log, &memories);
    let csv = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        csv.lines().next(),
        Some(autotune::csv_header().trim_end()),
        "{csv}"
    );
    // One warm-up sample, then the four scored ones; then tuning is over.
    assert_eq!(
        column(&csv, "warmup"),
        ["true", "false", "false", "false", "false"]
    );
    assert!(
        column(&csv, "world_size").iter().all(|w| *w == "3"),
        "{csv}"
    );
    // The cache was held on: every row says so.
    assert!(
        column(&csv, "cache_enabled").iter().all(|c| c == "true"),
        "{csv}"
    );
    let yaml = std::fs::read_to_string(log.with_extension("params.yaml")).unwrap();
    assert!(
        yaml.starts_with("params:\n  fusion_threshold_mb: "),
        "{yaml}"
    );
    assert!(yaml.contains("\n  segment_bytes: "), "{yaml}");
    assert!(stats[0].retunes >= 1, "{:?}", stats[0]);
    assert_in_step(&stats);
    // Every rank's replica holds rank 0's five samples, identically.
    let first = memories[0].snapshot();
    assert_eq!(first.records(SIZE).len(), 5);
    assert_eq!(first.world_sizes().collect::<Vec<_>>(), [SIZE]);
    for m in &memories[1..] {
        assert_eq!(m.snapshot(), first);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_world_size_tuned_before_starts_at_its_best_point_without_tuning() {
    let dir = std::env::temp_dir().join(format!("elasticrun-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("autotune.csv");
    let memories: Vec<TuningMemory> = (0..SIZE).map(|_| TuningMemory::default()).collect();
    tuned_run(&log, &memories);
    let rows = std::fs::read_to_string(&log).unwrap().lines().count();

    // The engine's starting point and space, as rank 0 builds them.
    let start = Tuning::default();
    let one_host = Layout {
        hosts: 1,
        max_local_size: 1,
    };
    let space = Space::new(start, &[Knob::Cache], one_host);
    // Any replica would do: a survivor that becomes rank 0 resumes alike.
    let best = memories[2]
        .snapshot()
        .tuner_for(SIZE, space, TUNER)
        .unwrap()
        .final_knobs()
        .expect("the budget was spent");

    // Rank 2's memory now serves rank 0, as after a membership change.
    let memories = vec![
        memories[2].clone(),
        memories[0].clone(),
        memories[1].clone(),
    ];
    let stats = tuned_run(&log, &memories);
    let after = std::fs::read_to_string(&log).unwrap().lines().count();
    assert_eq!(after, rows, "a spent budget is not tuned again");
    assert_in_step(&stats);
    if best == start {
        assert_eq!(stats[0].retunes, 0, "{:?}", stats[0]);
    } else {
        assert_eq!(stats[0].retunes, 1, "{:?}", stats[0]);
        assert_eq!(stats[0].last_retune.map(|r| r.1), Some(best));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tuning() -> Tuning {
    Tuning {
        fusion_threshold_bytes: 0,
        cycle_time_us: 2000,
        cache_enabled: false,
        ..Tuning::default()
    }
}

#[test]
fn every_rank_switches_at_the_same_round_and_results_stay_right() {
    let stats = run(EngineConfig::default(), |rank, s, e| {
        if s == STEPS / 2 {
            // Every rank asks; only rank 0's request counts.
            e.retune(Tuning {
                cycle_time_us: 1000 + rank as u64,
                ..tuning()
            });
        }
    });
    let applied = Tuning {
        cycle_time_us: 1000,
        ..tuning()
    };
    assert_in_step(&stats);
    for s in &stats {
        assert_eq!(s.retunes, 1, "{s:?}");
        assert_eq!(s.last_retune.map(|(_, t)| t), Some(applied), "{s:?}");
        // Fusion on, then off: more collectives than steps but fewer than
        // one per tensor; the cache served the first half only.
        assert!(s.collectives < (STEPS * TENSORS) as u64, "{s:?}");
        assert!(s.cache_hits > 0, "{s:?}");
        assert!(s.cache_hits <= (STEPS / 2 * TENSORS * SIZE) as u64, "{s:?}");
    }
}

/// Hierarchical collectives and a small segment, switched on mid-run.
fn hierarchical_small_segments() -> Tuning {
    Tuning {
        hierarchical_allreduce: true,
        hierarchical_allgather: true,
        segment_bytes: 4 << 10,
        ..Tuning::default()
    }
}

#[test]
fn hierarchical_paths_and_segment_size_switch_at_the_same_round() {
    // Two hosts of two ranks: the engine may go hierarchical.
    let size = 4;
    let grid = Arc::new(Topology::from_hosts(&[0, 0, 1, 1]).hierarchy().unwrap());
    let cfg = EngineConfig {
        hierarchy: Some(grid),
        fusion_threshold_bytes: 0,
        ..EngineConfig::default()
    };
    let out = on_every_rank(size, cfg, move |rank, e| {
        for s in 0..STEPS {
            if s == STEPS / 2 {
                e.retune(hierarchical_small_segments());
            }
            // Sums of 4 ranks, flat then hierarchical, in segments of
            // 4 KiB (3000 floats: several per rank's block).
            step(e, size, rank, s);
        }
    });
    let stats: Vec<EngineStats> = out.into_iter().map(|(_, s)| s).collect();
    assert_in_step(&stats);
    assert_eq!(
        stats[0].last_retune.map(|r| r.1),
        Some(hierarchical_small_segments())
    );
}

#[test]
fn a_hierarchical_switch_without_a_host_grid_stays_flat() {
    let stats = run(EngineConfig::default(), |rank, s, e| {
        if rank == 0 && s == 1 {
            e.retune(hierarchical_small_segments());
        }
    });
    assert_in_step(&stats);
    let flat = Tuning {
        hierarchical_allreduce: false,
        hierarchical_allgather: false,
        ..hierarchical_small_segments()
    };
    assert_eq!(stats[0].last_retune.map(|r| r.1), Some(flat));
}

#[test]
fn a_zero_segment_is_bounded_instead_of_breaking_the_collectives() {
    let stats = run(EngineConfig::default(), |rank, s, e| {
        if rank == 0 && s == STEPS - 2 {
            e.retune(Tuning {
                segment_bytes: 0,
                ..Tuning::default()
            });
        }
    });
    assert_in_step(&stats);
    let one_byte = Tuning {
        segment_bytes: 1,
        ..Tuning::default()
    };
    assert_eq!(stats[0].last_retune.map(|r| r.1), Some(one_byte));
}
