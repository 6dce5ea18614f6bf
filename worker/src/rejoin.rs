//! Moving an elastic worker to its next generation: end the current data plane,
//! tell the coordinator where the new one listens, wait for the assignment,
//! build the mesh and a fresh engine. The elastic run loop (`elastic::run`)
//! calls this after a failure or a host update.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use collectives::{TcpConfig, TcpEndpoint, TransportError};
use control::WorkerMsg;
use tokio::time::Instant;

use crate::control_link::Placement;
use crate::{Worker, generation_parts, join};

/// How long the engine of a finished generation gets to stop cleanly.
const RETIRE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    #[error("this worker is not part of an elastic job")]
    NotElastic,
    #[error("left the job: {0}")]
    Left(String),
    #[error("no new assignment from the coordinator within {0:?}")]
    NoAssignment(Duration),
    /// The assignment came but its mesh could not be built (a peer failed in
    /// between): rejoin again.
    #[error("data plane of generation {generation}: {source}")]
    Mesh {
        generation: u64,
        source: TransportError,
    },
    #[error("lost the coordinator")]
    CoordinatorGone,
    #[error("{0}")]
    Io(String),
}

impl Worker {
    /// Whether this worker runs in an elastic job (and can [`Worker::rejoin`]).
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
    /// [`Worker::place`] and every collective belong to the new generation.
    /// On [`RejoinError::Mesh`] the worker is in the new generation but its
    /// data plane is down: call again.
    pub fn rejoin(&mut self) -> Result<(), RejoinError> {
        let link = self.link.as_mut().ok_or(RejoinError::NotElastic)?;
        let elastic_timeout = link.elastic_timeout.ok_or(RejoinError::NotElastic)?;
        link.control
            .shared
            .end_generation("this worker is rejoining the job");
        let wanted = self.place.generation + 1;
        let local_ip = link.local_ip;
        let endpoint = self
            .rt
            .block_on(TcpEndpoint::bind(
                SocketAddr::new(local_ip, 0),
                TcpConfig::default(),
            ))
            .map_err(|e| RejoinError::Io(e.to_string()))?;
        let data_addr = endpoint
            .local_addr()
            .map_err(|e| RejoinError::Io(e.to_string()))?;
        let ask = WorkerMsg::Rejoin {
            generation: wanted,
            data_addr,
        };
        self.rt
            .block_on(link.control.out.send(ask))
            .map_err(|_| RejoinError::CoordinatorGone)?;
        let wait = link.start_timeout + elastic_timeout;
        let a = loop {
            let placements = &mut link.control.placements;
            let next = self
                .rt
                .block_on(async { tokio::time::timeout(wait, placements.recv()).await });
            match next {
                Err(_) => return Err(RejoinError::NoAssignment(wait)),
                Ok(None) => return Err(RejoinError::CoordinatorGone),
                Ok(Some(Placement::Leave(why))) => return Err(RejoinError::Left(why)),
                Ok(Some(Placement::Assign(a))) if a.generation >= wanted => break *a,
                Ok(Some(Placement::Assign(a))) => {
                    tracing::debug!(generation = a.generation, "ignored a stale assignment");
                }
            }
        };
        let generation = a.generation;
        self.place.generation = generation;
        let mesh_by = Instant::now() + link.start_timeout;
        let transport = self
            .rt
            .block_on(join::connect_mesh(endpoint, &a, mesh_by))
            .map_err(|e| match e {
                crate::InitError::DataPlane(source) => RejoinError::Mesh { generation, source },
                other => RejoinError::Io(other.to_string()),
            })?;
        let p = generation_parts(a.clone(), transport);
        let cfg = crate::engine_config(Some(&a.knobs), p.grid, &self.memory);
        let engine = Worker::engine_for(self.rt.handle(), p.comm, cfg);
        let old = std::mem::replace(&mut self.engine, engine);
        // The old engine's data plane is ended; let it wind down on its own.
        self.rt.spawn(async move {
            let _ = tokio::time::timeout(RETIRE, old.shutdown()).await;
        });
        self.place = p.place;
        self.paths = p.paths;
        // Unnamed tensors are numbered afresh in every generation, so that
        // survivors and newcomers generate the same names.
        self.names = crate::api::Names::default();
        self.knobs = Some(a.knobs);
        self.publish_generation(p.breaker);
        Ok(())
    }
}
