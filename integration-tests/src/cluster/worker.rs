//! A simulated worker: the worker runtime itself, a [`worker::Session`]
//! joined over in-memory pipes to the coordinator (real codec and
//! handshake) with its endpoints on the cluster's `MemFabric`, running the
//! runtime's elastic loop ([`worker::elastic::run_async`]) around a
//! training function. Only the training is the test's: allreduce steps
//! through the engine, a commit every few steps.
//!
//! ```text
//!  Session::join ─► elastic::run_async ─► sync ─► steps (engine allreduce, State::commit_async)
//!       │                ▲                          ├─ done ─► Session::shutdown ─► exit 0
//!  control task          │                          ├─ workers failed ─► restore commit ─┐
//!  (heartbeats, Reset,   └──── Session::rejoin ◄────┴─ hosts updated (at a commit) ──────┘
//!   reconnects; Stop ─► exit 1)
//! ```
//!
//! The state is `(step, acc)`: each step adds its number to `acc`, so a job
//! that applies every step exactly once ends with `acc = S (S + 1) / 2`
//! whatever happened on the way. Each step's allreduce sums `rank + 1` over
//! the ranks: `n (n + 1) / 2` proves that the generation's data plane joins
//! exactly its `n` ranks.

use std::sync::Arc;
use std::time::Duration;

use control::CoordinatorMsg;
use elastic::SlotId;
use serde::{Deserialize, Serialize};
use tokio::io::DuplexStream;
use tokio::sync::oneshot;
use worker::control_link::{Connect, Observe, Redial};
use worker::elastic::{ElasticError, Interrupt, State};
use worker::{Joining, Place, ReduceOp, Session};

use super::{Cluster, Event, Exit};

/// How the simulated workers train.
#[derive(Clone, Copy, Debug)]
pub struct Training {
    /// Steps to the end of training.
    pub steps: u64,
    /// A commit every this many steps (and after the last).
    pub commit_every: u64,
    /// Virtual time a step takes besides its allreduce.
    pub step_time: Duration,
    /// Elements of each step's allreduce.
    pub len: usize,
    /// How long a collective waits for a peer's message.
    pub data_timeout: Duration,
    /// `--coordinator-timeout`: how long a worker tries to reconnect.
    pub coordinator_timeout: Duration,
    /// `--start-timeout`: joining, and each generation's mesh.
    pub start_timeout: Duration,
    /// `--elastic-timeout`: how much longer a worker waits for a placement.
    pub elastic_timeout: Duration,
}

impl Default for Training {
    fn default() -> Self {
        Self {
            steps: 60,
            commit_every: 5,
            step_time: Duration::from_millis(100),
            len: 16,
            data_timeout: Duration::from_secs(30),
            coordinator_timeout: Duration::from_secs(10),
            start_timeout: Duration::from_secs(5),
            elastic_timeout: Duration::from_secs(115),
        }
    }
}

/// Who a worker is.
#[derive(Clone, Debug)]
pub(super) struct Ctx {
    pub(super) pid: u32,
    pub(super) slot: SlotId,
    pub(super) cluster: Cluster,
    /// How long it takes to come up before it registers.
    pub(super) start_delay: Duration,
}

impl Ctx {
    fn training(&self) -> Training {
        self.cluster.inner.training
    }

    fn record(&self, event: Event) {
        self.cluster.record(event);
    }
}

/// Runs the worker until it ends, saying how: as its training ends, or
/// with exit 1 when its control task ends (stopped by the coordinator, or
/// it stayed unreachable), as a process would.
pub(super) async fn run(ctx: &Ctx) -> Exit {
    tokio::time::sleep(ctx.start_delay).await;
    let (ended, mut why) = oneshot::channel();
    tokio::select! {
        // Why the control task ended comes before what that did to the
        // training (a join or rejoin that lost its control task).
        biased;
        Ok(why) = &mut why => Exit::Failed { why },
        exit = train(ctx, ended) => exit,
    }
}

/// The cluster's coordinator, over its in-memory dialer.
#[derive(Debug)]
struct MemConnect(Cluster);

impl Connect for MemConnect {
    type Stream = DuplexStream;

    fn target(&self) -> String {
        "the in-memory coordinator".into()
    }

    async fn connect(&self) -> std::io::Result<DuplexStream> {
        self.0.dial()
    }
}

/// Records what the session hears and does as the cluster's events.
struct Watch(Ctx);

impl Observe for Watch {
    fn heard(&self, msg: &CoordinatorMsg) {
        let pid = self.0.pid;
        match msg {
            CoordinatorMsg::Reset { generation } => self.0.record(Event::Reset {
                pid,
                generation: generation.0,
            }),
            CoordinatorMsg::HostsUpdated { generation } => self.0.record(Event::HostsUpdated {
                pid,
                generation: generation.0,
            }),
            _ => {}
        }
    }

    fn reconnected(&self, generation: u64) {
        self.0.record(Event::Reconnected {
            pid: self.0.pid,
            generation,
        });
    }

    fn entered(&self, place: Place) {
        self.0.record(Event::Assigned {
            pid: self.0.pid,
            slot: self.0.slot.clone(),
            generation: place.generation,
            rank: place.rank,
            size: place.size,
        });
    }

    fn rolled_back(&self, generation: u64, steps: u64) {
        self.0.record(Event::RolledBack {
            pid: self.0.pid,
            generation,
            to: steps,
        });
    }
}

/// How `ctx` joins: as its slot, through the cluster's dialer and fabric.
fn joining(ctx: &Ctx) -> Joining<MemConnect> {
    let t = ctx.training();
    Joining {
        redial: Redial {
            connect: MemConnect(ctx.cluster.clone()),
            secret: ctx.cluster.inner.secret.clone(),
            host: ctx.slot.host.clone(),
            slot: ctx.slot.slot,
            pid: ctx.pid,
            give_up_after: t.coordinator_timeout,
        },
        endpoints: Box::new(ctx.cluster.inner.fabric.clone()),
        start_timeout: t.start_timeout,
        elastic_timeout: Some(t.elastic_timeout),
        hot_spares: false,
        data_timeout: t.data_timeout,
        spin: None,
    }
}

/// The training state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Progress {
    step: u64,
    acc: f64,
}

/// Joins, trains through the runtime's elastic loop and leaves; `ended`
/// hears why the control task ended, if it does.
async fn train(ctx: &Ctx, ended: oneshot::Sender<String>) -> Exit {
    let rt = tokio::runtime::Handle::current();
    let watch = Arc::new(Watch(ctx.clone()));
    let on_end = move |why| {
        let _ = ended.send(why);
    };
    let mut session = match Session::join(rt, joining(ctx), watch, on_end).await {
        Ok(s) => s,
        Err(e) => return Exit::Failed { why: e.to_string() },
    };
    let mut state = State::new(Progress::default());
    let t = ctx.training();
    let run = worker::elastic::run_async(&mut session, &mut state, |s, st| {
        let ctx = ctx.clone();
        Box::pin(async move { steps(&ctx, t, s, st).await })
    });
    match run.await {
        Ok(done) => {
            let Progress { step, acc } = *state.get();
            session.shutdown().await;
            Exit::Finished {
                generation: done.value,
                steps: step,
                acc,
            }
        }
        Err(ElasticError::Left(reason)) => Exit::Left { reason },
        Err(e) => Exit::Failed { why: e.to_string() },
    }
}

/// Runs steps until training is over (returning the generation it ended
/// in), committing every `commit_every`.
async fn steps(
    ctx: &Ctx,
    t: Training,
    s: &Session,
    state: &mut State<Progress>,
) -> Result<u64, Interrupt> {
    let p = s.place();
    while state.get().step < t.steps {
        tokio::time::sleep(t.step_time).await;
        let grads = vec![(p.rank + 1) as f64; t.len];
        let sum = s
            .allreduce_async(None, grads, ReduceOp::Sum)
            .finish()
            .await?;
        let progress = state.get_mut();
        progress.step += 1;
        progress.acc += progress.step as f64;
        let step = progress.step;
        s.set_steps(step);
        ctx.record(Event::Step {
            pid: ctx.pid,
            generation: p.generation,
            rank: p.rank,
            size: p.size,
            step,
            sum: sum.data.first().copied().unwrap_or(f64::NAN),
        });
        if step.is_multiple_of(t.commit_every) || step == t.steps {
            state.commit_async(s).await?;
        }
    }
    Ok(p.generation)
}
