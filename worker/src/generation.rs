//! Entering a generation, the one routine behind both [`crate::init`] (the
//! first generation) and [`crate::Worker::rejoin`] (every later one):
//!
//! ```text
//!  bind a data-plane endpoint ─> publish its PeerAddress (Register or Rejoin)
//!  ─> the coordinator's Assignment ─> connect the mesh ─> place, collective
//!  options, engine settings ─> a fresh engine on the new data plane
//! ```
//! How the address is published and the assignment awaited differs between
//! the two (the raw link before the control task runs, or the control task's
//! channels after); the caller passes that step in.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use collectives::{
    Breaker, CollectiveOptions, Communicator, Endpoint, Generation, OpSpace, TcpConfig,
    TcpEndpoint, Transport, TransportError,
};
use control::{Assignment, PeerAddress};

use crate::data_plane::DataPlane;
use crate::engine::{Engine, Planes, TuningMemory};
use crate::hierarchy::{self, CollectivePaths};
use crate::settings::engine_config;
use crate::worker::Place;

/// A generation entered: the assignment and its connected data plane.
#[derive(Debug)]
pub(crate) struct Entered {
    pub(crate) assignment: Assignment,
    pub(crate) plane: DataPlane,
}

/// Why entering a generation failed; `E` is the placement step's error.
#[derive(Debug)]
pub(crate) enum EnterError<E> {
    /// The data-plane endpoint could not be bound.
    Bind(TransportError),
    /// Publishing the address or waiting for the assignment failed.
    Placement(E),
    /// The assignment came but the mesh could not be built.
    Mesh {
        generation: Generation,
        source: TransportError,
    },
}

/// Binds a data-plane endpoint on `local_ip`, hands its address to `place`
/// (which publishes it and returns the assignment), then connects the mesh
/// within `start_timeout`; each of its sends and receives may then wait up to
/// `data_timeout`.
pub(crate) async fn enter<E, F, Fut>(
    local_ip: IpAddr,
    start_timeout: Duration,
    data_timeout: Duration,
    place: F,
) -> Result<Entered, EnterError<E>>
where
    F: FnOnce(PeerAddress) -> Fut,
    Fut: Future<Output = Result<Assignment, E>>,
{
    let config = TcpConfig {
        io_timeout: data_timeout,
        ..TcpConfig::default()
    };
    let mut endpoint = TcpEndpoint::bind(SocketAddr::new(local_ip, 0), config)
        .await
        .map_err(EnterError::Bind)?;
    let address = PeerAddress::tcp(endpoint.address().map_err(EnterError::Bind)?);
    let assignment = place(address).await.map_err(EnterError::Placement)?;
    let generation = assignment.generation;
    let mesh = |source| EnterError::Mesh { generation, source };
    let peers = assignment
        .peers
        .iter()
        .enumerate()
        .map(|(rank, p)| {
            p.tcp_addr().ok_or(TransportError::Handshake {
                rank,
                reason: "the peer offers no TCP data-plane address",
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(mesh)?;
    let left = start_timeout.max(Duration::from_secs(1));
    endpoint.prepare(assignment.data_token, left);
    let t = endpoint
        .connect(assignment.rank as usize, generation, &peers)
        .await
        .map_err(mesh)?;
    Ok(Entered {
        assignment,
        plane: t.into(),
    })
}

/// What a worker runs with in one generation, besides its engine.
#[derive(Debug)]
pub(crate) struct Parts {
    pub(crate) place: Place,
    pub(crate) paths: CollectivePaths,
    /// Ends this generation's data plane from the control task.
    pub(crate) breaker: Breaker,
}

/// The place, collective paths and a fresh engine for the generation of
/// assignment `a` on `plane`; `memory` keeps the autotune samples across
/// generations.
pub(crate) fn start(
    rt: &tokio::runtime::Handle,
    a: &Assignment,
    plane: DataPlane,
    memory: &TuningMemory,
) -> (Engine, Parts) {
    let place = Place {
        rank: a.rank as usize,
        size: a.size as usize,
        local_rank: a.local_rank as usize,
        local_size: a.local_size as usize,
        cross_rank: a.cross_rank as usize,
        cross_size: a.cross_size as usize,
        generation: a.generation.0,
    };
    let (options, paths, grid) = hierarchy::options(&a.knobs, &a.hosts);
    hierarchy::log_fallbacks(&paths, place.rank);
    let cfg = engine_config(Some(&a.knobs), grid, memory);
    let breaker = plane.breaker();
    let engine = engine_on(rt, plane, options, cfg);
    let parts = Parts {
        place,
        paths,
        breaker,
    };
    (engine, parts)
}

/// An engine on `plane`, which it shuts down cleanly when it stops. Its
/// negotiation runs on a communicator of its own over the same mesh, in
/// another op-id space, so the tensors' messages and the negotiation's never
/// meet.
pub(crate) fn engine_on(
    rt: &tokio::runtime::Handle,
    plane: DataPlane,
    options: CollectiveOptions,
    cfg: crate::EngineConfig,
) -> Engine {
    let plane = Arc::new(plane);
    let negotiation = CollectiveOptions::default();
    let planes = Planes {
        data: Communicator::new(plane.clone(), options),
        negotiation: Communicator::in_space(plane, negotiation, OpSpace::Negotiation),
    };
    Engine::start(rt, planes, cfg, |planes| async move {
        // The last owner to shut down says goodbye for both.
        planes.data.into_transport().shutdown().await;
        planes.negotiation.into_transport().shutdown().await;
    })
}
