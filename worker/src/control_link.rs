//! The worker's end of its control connection once joined: heartbeats out, the
//! coordinator's directions in. A lost coordinator ends the process, so that no
//! worker outlives its job.
//!
//! ```text
//!  heartbeat every second ──> coordinator      Stop        -> exit(1)
//!  Rejoin (from Worker::rejoin) ──>            Reset{g}    -> end the current
//!                                                             data plane now
//!                                              HostsUpdated{g} -> flag, read at
//!                                                             the next commit
//!                                              Assign / Leave -> Worker::rejoin
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use collectives::Breaker;
use control::{Assignment, CoordinatorMsg, PendingReport, WorkerLink, WorkerMsg};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::engine::PendingBoard;

/// How often a worker tells the coordinator it is alive.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(1);

/// What the control task and the worker share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// The generation this worker runs in (for heartbeats).
    pub(crate) generation: AtomicU64,
    /// Highest generation a `HostsUpdated` announced.
    pub(crate) hosts_updated: AtomicU64,
    /// The current data plane's breaker, ended on `Reset`.
    pub(crate) breaker: Mutex<Option<Breaker>>,
    /// The current engine's pending tensors, when the stall check is on.
    pub(crate) pending: Mutex<Option<PendingBoard>>,
}

impl Shared {
    pub(crate) fn set_generation(
        &self,
        generation: u64,
        breaker: Breaker,
        pending: Option<PendingBoard>,
    ) {
        self.generation.store(generation, Ordering::SeqCst);
        *self.breaker.lock().unwrap_or_else(PoisonError::into_inner) = Some(breaker);
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = pending;
    }

    /// Ends the current data plane (a no-op when it already is).
    pub(crate) fn end_generation(&self, why: &str) {
        if let Some(b) = self
            .breaker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            b.end(why);
        }
    }

    fn report(&self) -> PendingReport {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or_else(PendingReport::default, |b| {
                b.report(std::time::Instant::now())
            })
    }
}

/// Where the coordinator places this worker next.
#[derive(Debug)]
pub(crate) enum Placement {
    Assign(Box<Assignment>),
    Leave(String),
}

/// The worker's handle on its control task.
#[derive(Debug)]
pub(crate) struct Control {
    pub(crate) shared: Arc<Shared>,
    pub(crate) out: mpsc::Sender<WorkerMsg>,
    pub(crate) placements: mpsc::Receiver<Placement>,
}

/// Starts the control task on `rt`.
pub(crate) fn spawn(rt: &tokio::runtime::Handle, link: WorkerLink<TcpStream>) -> Control {
    let shared = Arc::new(Shared::default());
    let (out, out_rx) = mpsc::channel(16);
    let (placements_tx, placements) = mpsc::channel(16);
    rt.spawn(run(link, shared.clone(), out_rx, placements_tx));
    Control {
        shared,
        out,
        placements,
    }
}

async fn run(
    mut link: WorkerLink<TcpStream>,
    shared: Arc<Shared>,
    mut out: mpsc::Receiver<WorkerMsg>,
    placements: mpsc::Sender<Placement>,
) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    loop {
        let msg = tokio::select! {
            _ = tick.tick() => WorkerMsg::Heartbeat {
                generation: shared.generation.load(Ordering::SeqCst),
                pending: shared.report(),
            },
            Some(m) = out.recv() => m,
            m = link.next() => {
                match m {
                    Some(Ok(m)) => obey(m, &shared, &placements).await,
                    Some(Err(e)) => exit(&format!("control connection failed: {e}")),
                    None => exit("lost the coordinator (connection closed)"),
                }
                continue;
            }
        };
        let sent = tokio::time::timeout(HEARTBEAT * 5, link.send(msg)).await;
        if !matches!(sent, Ok(Ok(()))) {
            exit("lost the coordinator (a message could not be sent)");
        }
    }
}

async fn obey(m: CoordinatorMsg, shared: &Shared, placements: &mpsc::Sender<Placement>) {
    match m {
        CoordinatorMsg::Stop { reason } => exit(&format!("stopped by the coordinator: {reason}")),
        CoordinatorMsg::Reset { generation } => {
            if generation > shared.generation.load(Ordering::SeqCst) {
                shared.end_generation("the coordinator reset the job (workers failed)");
            }
        }
        CoordinatorMsg::HostsUpdated { generation } => {
            shared.hosts_updated.fetch_max(generation, Ordering::SeqCst);
        }
        CoordinatorMsg::Assign(a) => {
            let _ = placements.send(Placement::Assign(Box::new(a))).await;
        }
        CoordinatorMsg::Leave { reason } => {
            let _ = placements.send(Placement::Leave(reason)).await;
        }
        CoordinatorMsg::Challenge { .. } | CoordinatorMsg::Proven { .. } => {
            tracing::debug!("ignored a handshake message after the handshake");
        }
    }
}

fn exit(why: &str) -> ! {
    eprintln!("elasticrun worker: {why}; exiting");
    std::process::exit(1)
}
