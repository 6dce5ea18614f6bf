//! The engine's loop, a thin driver around [`Negotiator`]: every cycle it
//! gathers this rank's new submissions, exchanges one message per rank with
//! every other rank, and runs what the round decided.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use collectives::{Communicator, Transport};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::exec;
use super::fusion::FusionPolicy;
use super::negotiate::Negotiator;
use super::request::{Decision, RankMsg, Request};
use super::tensor::{EngineError, Local};

/// Engine settings (from the job's knobs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    pub cycle_time: Duration,
    pub cache_capacity: usize,
    pub fusion_threshold_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cycle_time: Duration::from_millis(1),
            cache_capacity: 1024,
            fusion_threshold_bytes: 64 << 20,
        }
    }
}

/// What the API sends the engine.
#[derive(Debug)]
pub(crate) enum Command {
    Submit(Local),
    /// Leave once every rank has asked to.
    Shutdown,
}

/// Counters, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub rounds: u64,
    pub cache_hits: u64,
    /// Collectives run, and tensors they carried (more tensors than
    /// collectives: fusion at work).
    pub collectives: u64,
    pub tensors: u64,
}

struct State<X> {
    comm: Communicator<X>,
    neg: Negotiator,
    rank: usize,
    /// Submitted here, not yet finished.
    waiting: HashMap<String, Local>,
    /// Submitted since the last round, in order.
    fresh: Vec<Request>,
    shutdown: bool,
    stats: EngineStats,
}

/// Runs the engine until every rank has shut down or the data plane fails;
/// returns the communicator (to shut its transport down) and the counters.
pub(super) async fn run<X: Transport>(
    comm: Communicator<X>,
    cfg: EngineConfig,
    mut rx: mpsc::UnboundedReceiver<Command>,
) -> (Communicator<X>, EngineStats) {
    let fusion = FusionPolicy {
        threshold_bytes: cfg.fusion_threshold_bytes,
        small_bytes: comm.options().small_message_bytes,
    };
    let neg = Negotiator::new(comm.size(), cfg.cache_capacity, fusion);
    let rank = comm.rank();
    let mut st = State {
        comm,
        neg,
        rank,
        waiting: HashMap::new(),
        fresh: Vec::new(),
        shutdown: false,
        stats: EngineStats::default(),
    };
    let mut next = Instant::now();
    let mut open = true;
    loop {
        // Sleep out the cycle, taking submissions as they come.
        while open {
            tokio::select! {
                c = rx.recv() => match c {
                    Some(c) => st.take(c),
                    // Every Worker handle is gone: leave as if asked.
                    None => { st.shutdown = true; open = false; }
                },
                () = tokio::time::sleep_until(next) => break,
            }
        }
        if !open {
            tokio::time::sleep_until(next).await;
        }
        while let Ok(c) = rx.try_recv() {
            st.take(c);
        }
        next = Instant::now() + cfg.cycle_time;
        match st.round().await {
            Ok(false) => {}
            Ok(true) => break,
            Err(e) => {
                tracing::error!(%e, "engine stopped");
                st.fail_all(&e);
                drain_after_failure(&mut rx, &e).await;
                break;
            }
        }
    }
    st.stats.cache_hits = st.neg.cache().hits();
    (st.comm, st.stats)
}

/// After a fatal error, answers every later submission with it until the
/// API shuts the engine down.
async fn drain_after_failure(rx: &mut mpsc::UnboundedReceiver<Command>, e: &EngineError) {
    while let Some(c) = rx.recv().await {
        match c {
            Command::Submit(l) => l.fail(e.clone()),
            Command::Shutdown => return,
        }
    }
}

impl<X: Transport> State<X> {
    fn take(&mut self, c: Command) {
        match c {
            Command::Shutdown => self.shutdown = true,
            Command::Submit(l) if self.shutdown => l.fail(EngineError::ShutDown),
            Command::Submit(l) if self.waiting.contains_key(&l.req.name) => {
                let name = l.req.name.clone();
                l.fail(EngineError::Duplicate(name));
            }
            Command::Submit(l) => {
                self.fresh.push(l.req.clone());
                self.waiting.insert(l.req.name.clone(), l);
            }
        }
    }

    fn message(&mut self) -> RankMsg {
        let mut m = RankMsg {
            shutdown: self.shutdown,
            ..RankMsg::default()
        };
        for r in self.fresh.drain(..) {
            match self.neg.cached_bit(self.rank, &r) {
                Some(bit) => m.set_bit(bit),
                None => m.new.push(r),
            }
        }
        m
    }

    /// One negotiation round and what it decided; `true` when the engine is done.
    async fn round(&mut self) -> Result<bool, EngineError> {
        let mine = bincode::serde::encode_to_vec(self.message(), bincode::config::standard())
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        let (all, counts) = self
            .comm
            .allgather(&mine)
            .await
            .map_err(|e| EngineError::Collective(Arc::new(e)))?;
        let mut msgs = Vec::with_capacity(counts.len());
        let mut at = 0;
        for (r, &c) in counts.iter().enumerate() {
            let (m, _): (RankMsg, usize) =
                bincode::serde::decode_from_slice(&all[at..at + c], bincode::config::standard())
                    .map_err(|e| {
                        EngineError::Internal(format!(
                            "undecodable negotiation message from rank {r}: {e}"
                        ))
                    })?;
            msgs.push(m);
            at += c;
        }
        self.stats.rounds += 1;
        let outcome = self
            .neg
            .round(&msgs)
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        for d in outcome.decisions {
            self.decide(d).await?;
        }
        Ok(outcome.finished)
    }

    async fn decide(&mut self, d: Decision) -> Result<(), EngineError> {
        match d {
            Decision::Fail { name, why } => {
                if let Some(l) = self.waiting.remove(&name) {
                    l.fail(EngineError::Mismatch(why));
                }
                Ok(())
            }
            Decision::Run(group) => {
                let mut locals = Vec::with_capacity(group.len());
                for t in &group {
                    let l = self.waiting.remove(t.name()).ok_or_else(|| {
                        EngineError::Internal(format!(
                            "tensor {} ran but was not submitted here",
                            t.name()
                        ))
                    })?;
                    locals.push(l);
                }
                self.stats.collectives += 1;
                self.stats.tensors += group.len() as u64;
                exec::run(&self.comm, &group, locals)
                    .await
                    .map_err(|(e, left)| {
                        left.into_iter().for_each(|l| l.fail(e.clone()));
                        e
                    })
            }
        }
    }

    fn fail_all(&mut self, e: &EngineError) {
        for (_, l) in self.waiting.drain() {
            l.fail(e.clone());
        }
    }
}
