//! Retuning a running engine: rank 0's new settings travel in its negotiation
//! message and every rank switches after the same round, so sums stay right
//! and ranks never disagree on a fusion plan or on the response cache.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use collectives::{CollectiveOptions, Communicator, Generation, MemTransport, ReduceOp, Transport};
use worker::engine::AutotuneSetup;
use worker::engine::Kind;
use worker::{Engine, EngineConfig, EngineStats, Tensor, Tuning};

const DEADLINE: Duration = Duration::from_secs(60);
const SIZE: usize = 3;
const STEPS: usize = 40;
const TENSORS: usize = 6;

fn value(rank: usize, step: usize, t: usize, i: usize) -> f32 {
    (rank * 1000 + step * 10 + t + i) as f32
}

/// One training-like step: TENSORS allreduces submitted together, then waited.
fn step(e: &Engine, rank: usize, step: usize) {
    let handles: Vec<_> = (0..TENSORS)
        .map(|t| {
            let data: Vec<f32> = (0..100).map(|i| value(rank, step, t, i)).collect();
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
            let want: f32 = (0..SIZE).map(|r| value(r, step, t, i)).sum();
            assert_eq!(*g, want, "step {step} tensor {t} element {i}");
        }
    }
}

/// Runs STEPS steps on every rank with `cfg`; `before_step(rank, step, e)`
/// runs first in each. Returns every rank's counters.
fn run(cfg: EngineConfig, before_step: fn(usize, usize, &Engine)) -> Vec<EngineStats> {
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel::<(usize, EngineStats)>();
    for (rank, t) in MemTransport::world(SIZE, Generation(1), DEADLINE)
        .into_iter()
        .enumerate()
    {
        let comm = Communicator::new(t, CollectiveOptions::default());
        let e = Engine::start(rt.handle(), comm, cfg.clone(), |c| async move {
            c.into_transport().shutdown().await;
        });
        let (tx, rt) = (tx.clone(), rt.clone());
        thread::spawn(move || {
            for s in 0..STEPS {
                before_step(rank, s, &e);
                step(&e, rank, s);
            }
            let stats = rt.block_on(e.shutdown()).unwrap();
            let _ = tx.send((rank, stats));
        });
    }
    let mut stats: Vec<Option<EngineStats>> = vec![None; SIZE];
    for _ in 0..SIZE {
        let (rank, s) = rx.recv_timeout(DEADLINE).expect("a rank did not finish");
        stats[rank] = Some(s);
    }
    stats.into_iter().map(Option::unwrap).collect()
}

#[test]
fn the_autotuner_logs_every_sample_and_ranks_follow_rank_0() {
    let dir = std::env::temp_dir().join(format!("elasticrun-autotune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("autotune.csv");
    let cfg = EngineConfig {
        autotune: Some(AutotuneSetup {
            config: autotune::TunerConfig {
                warmup_samples: 1,
                steps_per_sample: 2,
                max_samples: 4,
                gp_noise: 0.8,
                seed: 0,
            },
            fixed: vec![autotune::Knob::ResponseCache],
            log_file: Some(log.clone()),
        }),
        ..EngineConfig::default()
    };
    let stats = run(cfg, |_, _, _| {});
    let csv = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], autotune::csv_header().trim_end(), "{csv}");
    // One warm-up sample, then the four scored ones; then tuning is over.
    assert_eq!(lines.len(), 1 + 1 + 4, "{csv}");
    assert!(lines[1].ends_with(",true"), "{csv}");
    assert!(lines[2..].iter().all(|l| l.ends_with(",false")), "{csv}");
    // The cache was held on: every row says so.
    let cache_col = autotune::CSV_COLUMNS
        .iter()
        .position(|c| *c == "cache_enabled")
        .unwrap();
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.split(',').nth(cache_col) == Some("true")),
        "{csv}"
    );
    let yaml = std::fs::read_to_string(log.with_extension("params.yaml")).unwrap();
    assert!(
        yaml.starts_with("params:\n  fusion_threshold_mb: "),
        "{yaml}"
    );
    assert!(!yaml.contains("segment_bytes"), "{yaml}");
    assert!(stats[0].retunes >= 1, "{:?}", stats[0]);
    for s in &stats {
        assert_eq!(s.retunes, stats[0].retunes, "{s:?}");
        assert_eq!(s.last_retune, stats[0].last_retune, "{s:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

const TUNING: Tuning = Tuning {
    fusion_threshold_bytes: 0,
    cycle_time_us: 2000,
    cache_enabled: false,
};

#[test]
fn every_rank_switches_at_the_same_round_and_results_stay_right() {
    let stats = run(EngineConfig::default(), |rank, s, e| {
        if s == STEPS / 2 {
            // Every rank asks; only rank 0's request counts.
            e.retune(Tuning {
                cycle_time_us: 1000 + rank as u64,
                ..TUNING
            });
        }
    });
    let applied = Tuning {
        cycle_time_us: 1000,
        ..TUNING
    };
    for s in &stats {
        assert_eq!(s.retunes, 1, "{s:?}");
        assert_eq!(s.last_retune.map(|(_, t)| t), Some(applied), "{s:?}");
        assert_eq!(
            s.last_retune, stats[0].last_retune,
            "ranks switched at different rounds"
        );
        // Fusion on, then off: more collectives than steps but fewer than
        // one per tensor; the cache served the first half only.
        assert!(s.collectives < (STEPS * TENSORS) as u64, "{s:?}");
        assert!(s.cache_hits > 0, "{s:?}");
        assert!(s.cache_hits <= (STEPS / 2 * TENSORS * SIZE) as u64, "{s:?}");
    }
}
