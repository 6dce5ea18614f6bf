//! Moving an elastic worker to its next generation: end the current data
//! plane, then enter the next generation ([`crate::generation::Bound::bind`],
//! then [`crate::generation::Bound::connect`]) by asking the coordinator to
//! rejoin. The elastic run loop (`elastic::run`) calls this after a failure
//! or a host update.

use std::sync::atomic::Ordering;
use std::time::Duration;

use collectives::TransportError;
use control::{Assignment, PeerAddress, WorkerMsg};

use crate::control_link::{Control, Placement};
use crate::generation::Bound;
use crate::session::Session;
use crate::worker::Worker;

/// How long the engine of a finished generation gets to stop cleanly.
const RETIRE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    #[error("this worker is not part of an elastic job")]
    NotElastic,
    #[error("left the job: {reason}")]
    Left { reason: String },
    #[error("no new assignment from the coordinator within {waited:?}")]
    NoAssignment { waited: Duration },
    /// The assignment came but its mesh could not be built (a peer failed in
    /// between): rejoin again.
    #[error("data plane of generation {generation}: {source}")]
    Mesh {
        generation: collectives::Generation,
        source: TransportError,
    },
    #[error("lost the coordinator")]
    CoordinatorGone,
    /// The data-plane endpoint for the new generation could not be bound.
    #[error("cannot open the data plane: {0}")]
    Bind(TransportError),
}

impl Session {
    /// Whether this worker runs in an elastic job (and can
    /// [`Session::rejoin`]).
    pub fn is_elastic(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|l| l.elastic_timeout.is_some())
    }

    /// Whether the coordinator announced a host update for a later generation
    /// than this one (rejoin at the next commit). Local to this rank: the
    /// elastic state agrees across ranks before acting on it.
    pub fn hosts_updated(&self) -> bool {
        self.link.as_ref().is_some_and(|l| {
            l.control.shared.hosts_updated.load(Ordering::SeqCst) > self.place.generation
        })
    }

    /// Leaves the current generation and joins the next one: afterwards
    /// [`Session::place`] and every collective belong to the new generation.
    /// On [`RejoinError::Mesh`] the worker is in the new generation but its
    /// data plane is down: call again.
    pub async fn rejoin(&mut self) -> Result<(), RejoinError> {
        let link = self.link.as_mut().ok_or(RejoinError::NotElastic)?;
        let elastic_timeout = link.elastic_timeout.ok_or(RejoinError::NotElastic)?;
        link.control
            .shared
            .end_generation("this worker is rejoining the job");
        let wanted = self.place.generation + 1;
        let wait = link.start_timeout + elastic_timeout;
        let bound = Bound::bind(&*link.endpoints, link.near, &link.secret)
            .await
            .map_err(RejoinError::Bind)?;
        let assignment =
            ask_to_rejoin(&mut link.control, wanted, bound.address.clone(), wait).await?;
        // The control task heartbeats meanwhile.
        let generation = assignment.generation;
        let lookups = (&link.control.out, &link.control.shared.lookups);
        let entered = match bound
            .connect(assignment, link.start_timeout, Some(lookups))
            .await
        {
            Ok(entered) => entered,
            Err(source) => {
                // In the new generation, with its data plane down.
                self.place.generation = generation.0;
                return Err(RejoinError::Mesh { generation, source });
            }
        };
        let old = self.install(entered);
        // The old engine's data plane is ended; let it wind down on its own.
        let retiring = self.rt.spawn(async move {
            let _ = tokio::time::timeout(RETIRE, old.shutdown()).await;
        });
        self.hold(retiring.abort_handle());
        Ok(())
    }

    /// Tells the coordinator that this worker runs in its generation from
    /// its current step, having reached `reached` in the one it left
    /// ([`WorkerMsg::Running`]). Nothing when it runs alone; a full queue
    /// drops the news, which only feeds a log line.
    pub fn report_running(&self, reached: Option<u64>) {
        let Some(link) = &self.link else { return };
        let msg = WorkerMsg::Running {
            generation: collectives::Generation(self.place.generation),
            step: self.steps(),
            reached,
        };
        if link.control.out.try_send(msg).is_err() {
            tracing::debug!("the control queue is full; not reporting the generation running");
        }
    }
}

impl Worker {
    /// [`Session::rejoin`], blocking.
    pub fn rejoin(&mut self) -> Result<(), RejoinError> {
        let Worker { rt, session } = self;
        rt.block_on(session.rejoin())
    }
}

/// Asks to be placed in generation `wanted` (or later) with the data plane at
/// `data_addr`, and waits up to `wait` for that assignment.
pub(crate) async fn ask_to_rejoin(
    control: &mut Control,
    wanted: u64,
    data_addr: PeerAddress,
    wait: Duration,
) -> Result<Assignment, RejoinError> {
    let wanted = collectives::Generation(wanted);
    let ask = WorkerMsg::Rejoin {
        generation: wanted,
        data_addr,
    };
    control.shared.set_asking(Some(ask.clone()));
    let answer = match control.out.send(ask).await {
        Ok(()) => await_placement(control, wanted, wait).await,
        Err(_) => Err(RejoinError::CoordinatorGone),
    };
    control.shared.set_asking(None);
    answer
}

/// Waits up to `wait` for the control task to hand on an assignment to
/// `wanted` or a later generation (older ones are stale), or the word to
/// leave: what joining and rejoining both do once they have published
/// their data-plane address.
pub(crate) async fn await_placement(
    control: &mut Control,
    wanted: collectives::Generation,
    wait: Duration,
) -> Result<Assignment, RejoinError> {
    let by = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(by, control.placements.recv()).await {
            Err(_) => return Err(RejoinError::NoAssignment { waited: wait }),
            Ok(None) => return Err(RejoinError::CoordinatorGone),
            Ok(Some(Placement::Leave(reason))) => return Err(RejoinError::Left { reason }),
            Ok(Some(Placement::Assign(a))) if a.generation >= wanted => return Ok(*a),
            Ok(Some(Placement::Assign(a))) => {
                tracing::debug!(generation = a.generation.0, "ignored a stale assignment");
            }
        }
    }
}
