//! Retuning a running engine: rank 0's new settings travel in its negotiation
//! message and every rank switches after the same round, so sums stay right
//! and ranks never disagree on a fusion plan or on the response cache.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use collectives::{CollectiveOptions, Communicator, Generation, MemTransport, ReduceOp, Transport};
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

#[test]
fn every_rank_switches_at_the_same_round_and_results_stay_right() {
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    );
    let tuning = Tuning {
        fusion_threshold_bytes: 0,
        cycle_time_us: 2000,
        cache_enabled: false,
    };
    let (tx, rx) = std::sync::mpsc::channel::<(usize, EngineStats)>();
    for (rank, t) in MemTransport::world(SIZE, Generation(1), DEADLINE)
        .into_iter()
        .enumerate()
    {
        let comm = Communicator::new(t, CollectiveOptions::default());
        let cfg = EngineConfig::default();
        let e = Engine::start(rt.handle(), comm, cfg, |c| async move {
            c.into_transport().shutdown().await;
        });
        let (tx, rt) = (tx.clone(), rt.clone());
        thread::spawn(move || {
            for s in 0..STEPS {
                if s == STEPS / 2 {
                    // Every rank asks; only rank 0's request counts.
                    e.retune(Tuning {
                        cycle_time_us: 1000 + rank as u64,
                        ..tuning
                    });
                }
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
    let stats: Vec<EngineStats> = stats.into_iter().map(Option::unwrap).collect();
    let applied = Tuning {
        cycle_time_us: 1000,
        ..tuning
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
