//! The engine tests' harness: one engine per rank of an in-memory world, each
//! driven from its own thread.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use collectives::{
    CollectiveOptions, Communicator, Endpoint, Generation, MemFabric, MemTransport, Transport,
};
use worker::{Engine, EngineConfig, EngineStats, Planes};

/// Bound on anything a test waits for.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

/// One in-memory world of `size` ranks built the way a job builds its data
/// plane: an endpoint per rank, addresses exchanged, every rank connecting.
pub(crate) fn mem_world(rt: &tokio::runtime::Runtime, size: usize) -> Vec<MemTransport> {
    let fabric = MemFabric::new(DEADLINE);
    let eps: Vec<_> = (0..size).map(|_| fabric.endpoint()).collect();
    let peers: Vec<_> = eps.iter().map(|e| e.address().unwrap()).collect();
    eps.into_iter()
        .enumerate()
        .map(|(rank, e)| rt.block_on(e.connect(rank, Generation(1), &peers)).unwrap())
        .collect()
}

/// Every rank's engine communicators: the data world, and a separate world
/// for the negotiation, so a message on the wrong one would never arrive.
pub(crate) fn planes(
    rt: &tokio::runtime::Runtime,
    size: usize,
    options: impl Fn(usize) -> CollectiveOptions,
) -> Vec<Planes<Communicator<MemTransport>, MemTransport>> {
    mem_world(rt, size)
        .into_iter()
        .zip(mem_world(rt, size))
        .enumerate()
        .map(|(rank, (data, negotiation))| Planes {
            data: Communicator::new(data, options(rank)),
            negotiation: Communicator::new(negotiation, CollectiveOptions::default()),
        })
        .collect()
}

/// Shuts both of an engine's transports down.
pub(crate) async fn shut_down(p: Planes<Communicator<MemTransport>, MemTransport>) {
    p.data.into_transport().shutdown().await;
    p.negotiation.into_transport().shutdown().await;
}

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
    let setups: Vec<_> = (0..size).map(&setup).collect();
    let all = planes(&rt, size, |rank| setups[rank].0.clone());
    for (rank, p) in all.into_iter().enumerate() {
        let cfg = setups[rank].1.clone();
        let engine = Engine::start(rt.handle(), p, cfg, shut_down);
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

/// Submits `data` to `e` as an allreduce with `op` under `name`.
pub(crate) fn allreduce<T: collectives::Element>(
    e: &Engine,
    name: &str,
    data: Vec<T>,
    op: collectives::ReduceOp,
) -> worker::Handle<T> {
    e.submit(
        name.into(),
        worker::engine::Kind::Allreduce(op),
        worker::Tensor::from(data),
        vec![],
        vec![],
    )
}
