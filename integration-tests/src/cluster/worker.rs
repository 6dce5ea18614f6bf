//! A simulated worker: what `examples/train` does through the worker
//! runtime, as one task. Its control task is the runtime's own
//! ([`worker::control_link::run`]) over in-memory pipes (real codec and
//! handshake): it registers with the coordinator, heartbeats, obeys the
//! coordinator and reconnects when the connection drops; its training loop
//! enters each generation over the cluster's `MemFabric`, syncs the state
//! from rank 0, runs allreduce steps and commits.
//!
//! ```text
//!  control: Register ─► serve (Heartbeat; Reset ─► end the data plane; HostsUpdated ─► flag;
//!           Assign / Leave ─► placements; Stop ─► exit 1) ─► lost ─► redial + Register{g}
//!  training: placement ─► connect ─► sync ─► steps ─┬─ done ─► exit 0
//!                ▲                                  ├─ collective failed ─► restore commit ─┐
//!                └── Rejoin{g+1} ◄──────────────────┴─ hosts updated (at a commit) ─────────┘
//! ```
//!
//! The state is `(step, acc)`: each step adds its number to `acc`, so a job
//! that applies every step exactly once ends with `acc = S (S + 1) / 2`
//! whatever happened on the way. Each step's allreduce sums `rank + 1` over
//! the ranks: `n (n + 1) / 2` proves that the generation's data plane joins
//! exactly its `n` ranks.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use collectives::{
    CollectiveOptions, Communicator, Endpoint, MemAddress, MemEndpoint, MemTransport, ReduceOp,
    Transport,
};
use control::{Assignment, CoordinatorMsg, Generation, PeerAddress, WorkerMsg};
use elastic::SlotId;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use worker::control_link::{self, Connect, Observe, Placement, Redial, Shared};

use super::{Cluster, Event, Exit};

/// How long the handshake and one message may take.
const MESSAGE: Duration = Duration::from_secs(5);

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
    /// How long a worker waits for its next assignment (`--start-timeout`
    /// plus `--elastic-timeout` in the runtime).
    pub placement_wait: Duration,
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
            placement_wait: Duration::from_secs(120),
        }
    }
}

/// Who a worker is.
#[derive(Debug)]
pub(super) struct Ctx {
    pub(super) pid: u32,
    pub(super) slot: SlotId,
    pub(super) cluster: Cluster,
    /// How long it takes to come up before it registers.
    pub(super) start_delay: Duration,
}

impl Ctx {
    fn training(&self) -> &Training {
        &self.cluster.inner.training
    }

    fn record(&self, event: Event) {
        self.cluster.record(event);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The generation the worker is in.
fn generation_of(shared: &Shared) -> u64 {
    shared.generation.load(Ordering::SeqCst)
}

/// Runs the worker until it ends, saying how.
pub(super) async fn run(ctx: &Ctx) -> Exit {
    let shared = Arc::new(Shared::default());
    let endpoint = ctx.cluster.inner.fabric.endpoint();
    let Ok(MemAddress(address)) = endpoint.address() else {
        return Exit::Failed {
            why: "the endpoint has no address".into(),
        };
    };
    *lock(&shared.data_addr) = Some(PeerAddress::mem(address));
    let (out_tx, out_rx) = mpsc::channel(4);
    let (placements_tx, placements_rx) = mpsc::channel(4);
    tokio::select! {
        why = control(ctx, shared.clone(), out_rx, placements_tx) => Exit::Failed { why },
        exit = train(ctx, &shared, endpoint, out_tx, placements_rx) => exit,
    }
}

// ---------------------------------------------------------------- control

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

/// Records what the control task hears and does as the cluster's events.
struct Watch<'a>(&'a Ctx);

impl Observe for Watch<'_> {
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
}

/// Registers, then runs the runtime's own control task
/// ([`worker::control_link::run`]) over in-memory streams; returns why the
/// worker must exit.
async fn control(
    ctx: &Ctx,
    shared: Arc<Shared>,
    out: mpsc::Receiver<WorkerMsg>,
    placements: mpsc::Sender<Placement>,
) -> String {
    tokio::time::sleep(ctx.start_delay).await;
    let redial = Redial {
        connect: MemConnect(ctx.cluster.clone()),
        secret: ctx.cluster.inner.secret.clone(),
        host: ctx.slot.host.clone(),
        slot: ctx.slot.slot,
        pid: ctx.pid,
        give_up_after: ctx.training().coordinator_timeout,
    };
    let link = match redial.attempt(&shared, Instant::now() + MESSAGE).await {
        Ok(l) => l,
        Err(why) => return format!("cannot reach the coordinator: {why}"),
    };
    control_link::run(link, shared, out, placements, redial, Watch(ctx)).await
}

// ---------------------------------------------------------------- training

/// The training state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Progress {
    step: u64,
    acc: f64,
}

/// The training state and its last commit.
#[derive(Clone, Copy, Debug, Default)]
struct State {
    current: Progress,
    committed: Progress,
}

/// How a generation ended for this worker.
enum Ended {
    /// Training is over.
    Done(u64),
    /// A collective failed: restore the commit and rejoin.
    Failed,
    /// Hosts changed: rejoin from here.
    HostsUpdated,
    /// Something no rejoin can mend.
    Fatal(String),
}

/// The training loop over generations.
async fn train(
    ctx: &Ctx,
    shared: &Shared,
    mut endpoint: MemEndpoint,
    out: mpsc::Sender<WorkerMsg>,
    mut placements: mpsc::Receiver<Placement>,
) -> Exit {
    let wait = ctx.training().placement_wait;
    let mut assignment = match placement(shared, &mut placements, Generation(1), wait).await {
        Ok(a) => a,
        Err(exit) => return exit,
    };
    let mut state = State::default();
    // The step reached in the generation it left (none for a newcomer).
    let mut reached = None;
    loop {
        let here = Here {
            assignment: &assignment,
            out: &out,
            reached,
        };
        let ended = generation(ctx, shared, &here, endpoint, &mut state).await;
        reached = Some(state.current.step);
        match ended {
            Ended::Done(generation) => {
                return Exit::Finished {
                    generation,
                    steps: state.current.step,
                    acc: state.current.acc,
                };
            }
            Ended::Fatal(why) => return Exit::Failed { why },
            Ended::Failed => {
                state.current = state.committed;
                ctx.record(Event::RolledBack {
                    pid: ctx.pid,
                    generation: generation_of(shared),
                    to: state.committed.step,
                });
            }
            // At a commit: nothing to restore.
            Ended::HostsUpdated => {}
        }
        endpoint = ctx.cluster.inner.fabric.endpoint();
        let Ok(MemAddress(address)) = endpoint.address() else {
            return Exit::Failed {
                why: "the endpoint has no address".into(),
            };
        };
        let data_addr = PeerAddress::mem(address);
        *lock(&shared.data_addr) = Some(data_addr.clone());
        let wanted = Generation(generation_of(shared) + 1);
        let ask = WorkerMsg::Rejoin {
            generation: wanted,
            data_addr,
        };
        shared.set_asking(Some(ask.clone()));
        if out.send(ask).await.is_err() {
            return Exit::Failed {
                why: "the control task is gone".into(),
            };
        }
        assignment = match placement(shared, &mut placements, wanted, wait).await {
            Ok(a) => a,
            Err(exit) => return exit,
        };
    }
}

/// Waits for an assignment to `wanted` or later (older ones are stale).
async fn placement(
    shared: &Shared,
    placements: &mut mpsc::Receiver<Placement>,
    wanted: Generation,
    wait: Duration,
) -> Result<Assignment, Exit> {
    loop {
        let got = tokio::time::timeout(wait, placements.recv()).await;
        let answer = match got {
            Err(_) => Err(Exit::Failed {
                why: format!("no assignment within {wait:?}"),
            }),
            Ok(None) => Err(Exit::Failed {
                why: "the control task is gone".into(),
            }),
            Ok(Some(Placement::Leave(reason))) => Err(Exit::Left { reason }),
            Ok(Some(Placement::Assign(a))) if a.generation >= wanted => Ok(*a),
            Ok(Some(Placement::Assign(_))) => continue,
        };
        shared.set_asking(None);
        return answer;
    }
}

/// A generation to enter, and what to tell the coordinator once it runs.
struct Here<'a> {
    assignment: &'a Assignment,
    out: &'a mpsc::Sender<WorkerMsg>,
    reached: Option<u64>,
}

/// Enters the generation of `a` and trains in it until it ends.
async fn generation(
    ctx: &Ctx,
    shared: &Shared,
    here: &Here<'_>,
    endpoint: MemEndpoint,
    state: &mut State,
) -> Ended {
    let a = here.assignment;
    let g = a.generation;
    shared.generation.store(g.0, Ordering::SeqCst);
    let peers: Option<Vec<MemAddress>> = a
        .peers
        .iter()
        .map(|p| p.mem_addr().map(MemAddress))
        .collect();
    let Some(peers) = peers else {
        return Ended::Fatal("a peer has no in-memory data-plane address".into());
    };
    let (rank, size) = (a.rank as usize, a.size as usize);
    let transport = match endpoint.connect(rank, g, &peers).await {
        Ok(t) => t,
        Err(e) => return Ended::Fatal(format!("cannot connect generation {g}: {e}")),
    };
    // As the runtime does: a Reset for a later generation that came while
    // this one was being entered ends it as soon as it is installed.
    let own = lock(&shared.data_addr).clone();
    shared.set_generation(g.0, transport.breaker(), None, own);
    ctx.record(Event::Assigned {
        pid: ctx.pid,
        slot: ctx.slot.clone(),
        generation: g.0,
        rank,
        size,
    });
    let comm = Communicator::new(transport, CollectiveOptions::default());
    let ended = match steps(ctx, shared, &comm, here, state).await {
        Ok(ended) => ended,
        Err(_) => return Ended::Failed,
    };
    // Leaving cleanly: the peers may still read what this rank sent last.
    comm.into_transport().shutdown().await;
    ended
}

/// Syncs the state from rank 0 (and commits it), then runs steps until
/// training is over or the hosts changed; `Err` when a collective failed.
async fn steps(
    ctx: &Ctx,
    shared: &Shared,
    comm: &Communicator<MemTransport>,
    here: &Here<'_>,
    state: &mut State,
) -> Result<Ended, collectives::CollectiveError> {
    let t = *ctx.training();
    let (rank, size) = (comm.rank(), comm.size());
    let generation = generation_of(shared);
    let mut sync = [state.current.step as f64, state.current.acc];
    comm.broadcast(&mut sync, 0).await?;
    let synced = Progress {
        step: sync[0] as u64,
        acc: sync[1],
    };
    state.current = synced;
    state.committed = synced;
    // As the runtime does once it has synced: it runs from here.
    let running = WorkerMsg::Running {
        generation: Generation(generation),
        step: synced.step,
        reached: here.reached,
    };
    let _ = here.out.send(running).await;
    let progress = &mut state.current;
    while progress.step < t.steps {
        tokio::time::sleep(t.step_time).await;
        let mut grads = vec![(rank + 1) as f64; t.len];
        comm.allreduce(&mut grads, ReduceOp::Sum).await?;
        progress.step += 1;
        let step = progress.step as f64;
        progress.acc += step;
        ctx.record(Event::Step {
            pid: ctx.pid,
            generation,
            rank,
            size,
            step: progress.step,
            sum: grads[0],
        });
        if progress.step.is_multiple_of(t.commit_every) || progress.step == t.steps {
            state.committed = *progress;
            let moving = shared.hosts_updated.load(Ordering::SeqCst) > generation;
            let mut flag = [u8::from(moving)];
            comm.allreduce(&mut flag, ReduceOp::Max).await?;
            if flag[0] > 0 {
                return Ok(Ended::HostsUpdated);
            }
        }
    }
    Ok(Ended::Done(generation))
}
