//! The worker's end of its control connection once joined: heartbeats out, the
//! coordinator's directions in. A dropped connection is dialled again with
//! backoff and the worker registers anew, saying which generation it is in
//! ([`Redial`]); a coordinator that cannot be reached within
//! `--coordinator-timeout` ends the process, so that no worker outlives its job.
//! A [`crate::Session`] starts it as soon as it has registered; the
//! in-process cluster tests run the same sessions over in-memory streams
//! ([`Connect`]), watched ([`Observe`]).
//!
//! ```text
//!  heartbeat every second ──> coordinator      Stop        -> exit(1)
//!  connection lost ──> redial + Register{generation} until the timeout -> exit(1)
//!                      + the unanswered Rejoin again (a new coordinator never saw it)
//!  Rejoin (from Session::rejoin) ──>            Reset{g}    -> end the current
//!                                                             data plane now
//!                                              HostsUpdated{g} -> flag, read at
//!                                                             the next commit
//!                                              Assign / Leave -> the session's
//!                                                             join or rejoin
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use collectives::Breaker;
use control::{
    Assignment, CoordinatorMsg, Generation, PeerAddress, PendingReport, WorkerLink, WorkerMsg,
};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::engine::PendingBoard;
pub use crate::reconnect::{Connect, CoordinatorGone, Redial, Tcp};

/// How often a worker tells the coordinator it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// What the control task and the worker share.
#[derive(Debug, Default)]
pub struct Shared {
    /// The generation this worker runs in (for heartbeats).
    pub generation: AtomicU64,
    /// Highest generation a `HostsUpdated` announced.
    pub hosts_updated: AtomicU64,
    /// Highest generation a `Reset` asked for: a generation older than it
    /// is ended as soon as its breaker is installed (the `Reset` may come
    /// between its `Assign` and then).
    pub reset_to: AtomicU64,
    /// A `Rejoin` not answered yet: asked again of a coordinator reached
    /// anew, which may have taken the job over without ever seeing it.
    pub asking: Mutex<Option<WorkerMsg>>,
    /// The current data plane's breaker, ended on `Reset`.
    pub breaker: Mutex<Option<Breaker>>,
    /// The current engine's pending tensors, when the stall check is on.
    pub pending: Mutex<Option<PendingBoard>>,
    /// This worker's data-plane address in the current generation.
    pub data_addr: Mutex<Option<PeerAddress>>,
    /// Notified once [`WorkerMsg::Finished`] has been written.
    pub finished_sent: tokio::sync::Notify,
    /// The session's optimizer steps (`Session::steps`), for heartbeats.
    pub steps: Arc<std::sync::atomic::AtomicU64>,
    /// What the session's engines moved and waited for, for heartbeats.
    pub traffic: Arc<crate::engine::Traffic>,
    /// The data plane's lookups of addresses, waiting for their answers.
    pub lookups: Arc<crate::lookup::Lookups>,
}

impl Shared {
    /// Moves to `generation`, whose data plane `breaker` ends; `pending`
    /// is its engine's board (stall check on), `data_addr` this worker's
    /// address in it.
    pub fn set_generation(
        &self,
        generation: u64,
        breaker: Breaker,
        pending: Option<PendingBoard>,
        data_addr: Option<PeerAddress>,
    ) {
        self.generation.store(generation, Ordering::SeqCst);
        *self
            .data_addr
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = data_addr;
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = pending;
        let mut installed = self.breaker.lock().unwrap_or_else(PoisonError::into_inner);
        // A `Reset` past this generation that came before its breaker was
        // here: the generation is over already.
        if self.reset_to.load(Ordering::SeqCst) > generation {
            breaker.end("the coordinator reset the job (workers failed)");
        }
        *installed = Some(breaker);
    }

    /// Sets the data-plane address a registration publishes.
    pub fn set_data_addr(&self, data_addr: PeerAddress) {
        *self
            .data_addr
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(data_addr);
    }

    /// Records the `Rejoin` being asked (`None` once it is answered).
    pub fn set_asking(&self, ask: Option<WorkerMsg>) {
        *self.asking.lock().unwrap_or_else(PoisonError::into_inner) = ask;
    }

    fn asking(&self) -> Option<WorkerMsg> {
        self.asking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Ends the current data plane (a no-op when it already is).
    pub fn end_generation(&self, why: &str) {
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
pub enum Placement {
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

/// Starts the control task on `rt` over `link`, sharing `shared` with the
/// session; `redial` says how to reach the coordinator again if the
/// connection drops. When the task ends (the coordinator stopped the worker,
/// or stayed unreachable) `on_end` gets why: a launched worker's process
/// exits. Returns the session's handle and the task's.
pub(crate) fn spawn<C: Connect>(
    rt: &tokio::runtime::Handle,
    link: WorkerLink<C::Stream>,
    shared: Arc<Shared>,
    redial: Redial<C>,
    observe: Arc<dyn Observe>,
    on_end: impl FnOnce(String) + Send + 'static,
) -> (Control, tokio::task::AbortHandle) {
    let (out, out_rx) = mpsc::channel(16);
    let (placements_tx, placements) = mpsc::channel(16);
    let task_shared = shared.clone();
    let task = rt.spawn(async move {
        // Whoever awaits a placement hears why before the channel closes.
        let open = placements_tx.clone();
        let why = run(link, task_shared, out_rx, placements_tx, redial, observe).await;
        on_end(why);
        drop(open);
    });
    let control = Control {
        shared,
        out,
        placements,
    };
    (control, task.abort_handle())
}

/// What a session tells whoever watches it (the in-process cluster tests
/// record it); the runtime watches nothing.
pub trait Observe: Send + Sync {
    /// A message came from the coordinator.
    fn heard(&self, _msg: &CoordinatorMsg) {}
    /// The worker registered again after a lost connection, in `generation`.
    fn reconnected(&self, _generation: u64) {}
    /// The worker entered a generation, at `place`.
    fn entered(&self, _place: crate::Place) {}
    /// The elastic run loop went back to the last commit (workers failed in
    /// `generation`), at `steps` optimizer steps.
    fn rolled_back(&self, _generation: u64, _steps: u64) {}
}

impl Observe for () {}

impl<O: Observe + ?Sized> Observe for Arc<O> {
    fn heard(&self, msg: &CoordinatorMsg) {
        (**self).heard(msg);
    }
    fn reconnected(&self, generation: u64) {
        (**self).reconnected(generation);
    }
    fn entered(&self, place: crate::Place) {
        (**self).entered(place);
    }
    fn rolled_back(&self, generation: u64, steps: u64) {
        (**self).rolled_back(generation, steps);
    }
}

/// Serves the control connection, reconnecting when it drops; returns why
/// the worker must exit (the coordinator stopped it, or stayed unreachable).
/// Messages from `out` go to the coordinator (a `Rejoin` recorded in
/// [`field@Shared::asking`] is asked again of a coordinator reached anew);
/// `Assign` and `Leave` go to `placements`.
pub async fn run<C: Connect>(
    mut link: WorkerLink<C::Stream>,
    shared: Arc<Shared>,
    mut out: mpsc::Receiver<WorkerMsg>,
    placements: mpsc::Sender<Placement>,
    redial: Redial<C>,
    observe: impl Observe,
) -> String {
    let mut unsent = None;
    loop {
        let served = serve(
            &mut link,
            &shared,
            &mut out,
            &placements,
            &mut unsent,
            &observe,
            redial.connect.superseded(),
        );
        let lost = match served.await {
            Served::Stop(why) => return why,
            Served::Lost(lost) => lost,
        };
        tracing::warn!(%lost, "control connection lost; reconnecting");
        match redial.reconnect(&shared).await {
            Ok(l) => link = l,
            Err(e) => return format!("lost the coordinator ({lost}) and {e}"),
        }
        observe.reconnected(shared.generation.load(Ordering::SeqCst));
        if unsent.is_none() {
            unsent = shared.asking();
        }
    }
}

/// How [`serve`] ended.
enum Served {
    /// The worker must exit, for this reason.
    Stop(String),
    /// The connection dropped, for this reason.
    Lost(String),
}

/// One connection's life. A message that could not be sent is kept in
/// `unsent` and goes first on the next connection (heartbeats excepted).
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    link: &mut WorkerLink<S>,
    shared: &Shared,
    out: &mut mpsc::Receiver<WorkerMsg>,
    placements: &mpsc::Sender<Placement>,
    unsent: &mut Option<WorkerMsg>,
    observe: &impl Observe,
    superseded: impl std::future::Future<Output = ()>,
) -> Served {
    let mut tick = tokio::time::interval(HEARTBEAT);
    let mut superseded = std::pin::pin!(superseded);
    loop {
        let msg = match unsent.take() {
            Some(m) => m,
            None => tokio::select! {
                _ = tick.tick() => WorkerMsg::Heartbeat {
                    generation: Generation(shared.generation.load(Ordering::SeqCst)),
                    steps: shared.steps.load(Ordering::Relaxed),
                    collective_bytes: shared.traffic.bytes(),
                    collective_wait: shared.traffic.wait(),
                    pending: shared.report(),
                },
                Some(m) = out.recv() => m,
                () = &mut superseded => {
                    return Served::Lost("another coordinator leads the job now".into());
                }
                m = link.next() => {
                    match m {
                        Some(Ok(m)) => {
                            observe.heard(&m);
                            if let Some(why) = obey(m, shared, placements).await {
                                return Served::Stop(why);
                            }
                        }
                        Some(Err(e)) => return Served::Lost(format!("control connection failed: {e}")),
                        None => return Served::Lost("connection closed".into()),
                    }
                    continue;
                }
            },
        };
        let heartbeat = matches!(msg, WorkerMsg::Heartbeat { .. });
        let sent = tokio::time::timeout(HEARTBEAT * 5, link.send(msg.clone())).await;
        if !matches!(sent, Ok(Ok(()))) {
            if !heartbeat {
                *unsent = Some(msg);
            }
            return Served::Lost("a message could not be sent".into());
        }
        if matches!(msg, WorkerMsg::Finished) {
            shared.finished_sent.notify_one();
        }
    }
}

/// Carries out the coordinator's message; `Some(why)` when the worker must
/// exit.
async fn obey(
    m: CoordinatorMsg,
    shared: &Shared,
    placements: &mpsc::Sender<Placement>,
) -> Option<String> {
    match m {
        CoordinatorMsg::Stop { reason } => {
            return Some(format!("stopped by the coordinator: {reason}"));
        }
        CoordinatorMsg::Reset { generation } => {
            shared.reset_to.fetch_max(generation.0, Ordering::SeqCst);
            if generation.0 > shared.generation.load(Ordering::SeqCst) {
                shared.end_generation("the coordinator reset the job (workers failed)");
            }
        }
        CoordinatorMsg::HostsUpdated { generation } => {
            shared
                .hosts_updated
                .fetch_max(generation.0, Ordering::SeqCst);
        }
        CoordinatorMsg::Assign(a) => {
            let _ = placements.send(Placement::Assign(Box::new(a))).await;
        }
        CoordinatorMsg::Leave { reason } => {
            let _ = placements.send(Placement::Leave(reason)).await;
        }
        CoordinatorMsg::Addresses { id, entries, .. } => shared.lookups.answer(id, entries),
        CoordinatorMsg::Challenge { .. } | CoordinatorMsg::Proven { .. } => {
            tracing::debug!("ignored a handshake message after the handshake");
        }
    }
    None
}

/// Ends a launched worker's process once its control task has ended.
pub(crate) fn exit(why: String) {
    eprintln!("elasticrun worker: {why}; exiting");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use collectives::{
        CollectiveError, CollectiveOptions, Communicator, MemTransport, ReduceOp, Transport,
    };

    use super::*;

    /// A `Reset` to generation 9 that comes while the worker still installs
    /// generation 8 (after its `Assign`, before its breaker) ends generation
    /// 8 as soon as it is installed: the worker does not wait out the
    /// data-plane timeout in a generation already over.
    #[tokio::test]
    async fn a_reset_before_the_breaker_is_installed_ends_the_generation() {
        let shared = Shared::default();
        shared.generation.store(7, Ordering::SeqCst);
        let (placements, _rx) = mpsc::channel(1);
        let reset = CoordinatorMsg::Reset {
            generation: Generation(9),
        };
        assert!(obey(reset, &shared, &placements).await.is_none());
        // Two ranks, and only this one will ever call: without the breaker
        // ended the allreduce would wait out the hour.
        let mut world = MemTransport::world(2, Generation(8), Duration::from_secs(3600));
        let mine = world.swap_remove(0);
        shared.set_generation(8, mine.breaker(), None, None);
        let comm = Communicator::new(mine, CollectiveOptions::default());
        let mut data = [1.0f32; 4];
        let got = tokio::time::timeout(
            Duration::from_secs(10),
            comm.allreduce(&mut data, ReduceOp::Sum),
        )
        .await
        .expect("generation 8 was not ended");
        let e = got.unwrap_err();
        assert!(
            matches!(&e, CollectiveError::Transport(collectives::TransportError::Ended { generation, .. }) if *generation == Generation(8)),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn a_reset_to_the_installed_generation_leaves_it_running() {
        let shared = Shared::default();
        let mut world = MemTransport::world(2, Generation(9), Duration::from_secs(10));
        let (theirs, mine) = (world.pop().unwrap(), world.pop().unwrap());
        let (placements, _rx) = mpsc::channel(1);
        let reset = CoordinatorMsg::Reset {
            generation: Generation(9),
        };
        assert!(obey(reset, &shared, &placements).await.is_none());
        shared.set_generation(9, mine.breaker(), None, None);
        let (mine, theirs) = (
            Communicator::new(mine, CollectiveOptions::default()),
            Communicator::new(theirs, CollectiveOptions::default()),
        );
        let (mut a, mut b) = ([1.0f32; 4], [2.0f32; 4]);
        let (x, y) = tokio::join!(
            mine.allreduce(&mut a, ReduceOp::Sum),
            theirs.allreduce(&mut b, ReduceOp::Sum)
        );
        x.unwrap();
        y.unwrap();
        assert_eq!(a, [3.0; 4]);
    }
}
