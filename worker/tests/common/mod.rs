//! The engine tests' harness: one engine per rank of an in-memory world, each
//! driven from its own thread.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use collectives::{CollectiveOptions, Communicator, Generation, MemTransport, Transport};
use worker::{Engine, EngineConfig, EngineStats};

/// Bound on anything a test waits for.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `f(rank, engine)` on one thread per rank, rank `r`'s engine started
/// with `setup(r)`; returns each result and each engine's counters, failing
/// the test if any rank takes too long.
pub(crate) fn on_ranks<R: Send + 'static>(
    size: usize,
    setup: impl Fn(usize) -> (CollectiveOptions, EngineConfig),
    f: impl Fn(usize, &Engine) -> R + Send + Sync + 'static,
) -> Vec<(R, EngineStats)> {
    let rt = Arc::new(runtime());
    let f = Arc::new(f);
    let (tx, rx) = std::sync::mpsc::channel();
    for (rank, t) in MemTransport::world(size, Generation(1), DEADLINE)
        .into_iter()
        .enumerate()
    {
        let (opts, cfg) = setup(rank);
        let engine = Engine::start(
            rt.handle(),
            Communicator::new(t, opts),
            cfg,
            |c| async move {
                c.into_transport().shutdown().await;
            },
        );
        let (f, tx, rt) = (f.clone(), tx.clone(), rt.clone());
        thread::spawn(move || {
            let r = f(rank, &engine);
            let stats = rt.block_on(engine.shutdown()).unwrap();
            let _ = tx.send((rank, r, stats));
        });
    }
    let mut out: Vec<Option<(R, EngineStats)>> = (0..size).map(|_| None).collect();
    for _ in 0..size {
        let (rank, r, s) = rx
            .recv_timeout(DEADLINE)
            .expect("a rank did not finish within the deadline");
        out[rank] = Some((r, s));
    }
    out.into_iter().map(Option::unwrap).collect()
}

/// [`on_ranks`] with default collective options and `cfg` on every rank.
#[allow(dead_code)] // Not every test binary uses every helper.
pub(crate) fn on_every_rank<R: Send + 'static>(
    size: usize,
    cfg: EngineConfig,
    f: impl Fn(usize, &Engine) -> R + Send + Sync + 'static,
) -> Vec<(R, EngineStats)> {
    on_ranks(
        size,
        move |_| (CollectiveOptions::default(), cfg.clone()),
        f,
    )
}
