//! Entering a generation, the one routine behind both joining (the first
//! generation) and rejoining (every later one), which
//! [`crate::Session`] runs:
//!
//! ```text
//!  Endpoints::bind ─> publish its PeerAddress (Register or Rejoin)
//!  ─> the coordinator's Assignment ─> connect the mesh ─> place, collective
//!  options, engine settings ─> a fresh engine on the new data plane
//! ```
//! How a session makes its endpoints is its [`Endpoints`]: the transport
//! `elasticrun` chose ([`DataBind`]), or an in-process fabric in the
//! cluster tests.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use collectives::{
    Admission, Breaker, CollectiveOptions, Communicator, Endpoint, LinkCarry, MemEndpoint,
    MemFabric, OpSpace, PlaneConfig, PlaneEndpoint, QuicConfig, ShmConfig, TcpConfig, Transport,
    TransportError,
};
use control::env::{Connections, TransportKind};
use control::{Assignment, PeerAddress, Secret, WorkerMsg};
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::mpsc;

use crate::data_plane::DataPlane;
use crate::engine::{Engine, EngineConfig, Planes, Traffic, TuningMemory};
use crate::hierarchy::{self, CollectivePaths};
use crate::lookup::Lookups;
use crate::settings::engine_config;

/// A generation entered: the assignment and its connected data plane.
#[derive(Debug)]
pub(crate) struct Entered {
    pub(crate) assignment: Assignment,
    pub(crate) plane: DataPlane,
}

/// How a session makes the data-plane endpoint of each generation it
/// enters: one listening endpoint a generation, bound anew every time.
pub trait Endpoints: Send + Sync + std::fmt::Debug + 'static {
    /// A listening endpoint for a worker whose connection to the
    /// coordinator leaves from `near`, the address its peers reach it at.
    fn bind(&self, near: IpAddr) -> BoxFuture<'_, Result<PlaneEndpoint, TransportError>>;
}

/// The endpoints of an in-process [`MemFabric`] (the cluster tests).
impl Endpoints for MemFabric {
    fn bind(&self, _near: IpAddr) -> BoxFuture<'_, Result<PlaneEndpoint, TransportError>> {
        let ep: MemEndpoint = self.endpoint();
        async move { Ok(PlaneEndpoint::from(ep)) }.boxed()
    }
}

/// Where a launched worker's data plane listens: on `near`, the address
/// this host reaches the coordinator from, which is also the address it
/// publishes; with `all_interfaces` (a job that may span hosts) a loopback
/// `near` is widened to every interface, so that the coordinator can hand
/// remote peers a routable address of this host in its place.
#[derive(Clone, Debug)]
pub(crate) struct DataBind {
    pub(crate) all_interfaces: bool,
    /// The data plane to bind.
    pub(crate) transport: TransportKind,
    /// On TCP, shared memory with the peers on this host
    /// ([`control::env::SHARED_MEMORY`]); QUIC never uses it.
    pub(crate) shared_memory: bool,
    /// How long shared-memory links busy-wait before they sleep
    /// ([`control::env::SPIN_US`]; `None`: the defaults).
    pub(crate) spin: Option<Duration>,
    /// When TCP and TLS connect to the peers ([`control::env::CONNECTIONS`]).
    pub(crate) connections: Connections,
    /// Longest wait of one send or receive.
    pub(crate) data_timeout: Duration,
    /// This process's links between generations (with connections on
    /// demand over TCP, a reset reconnects only the pairs that changed).
    pub(crate) carry: LinkCarry,
}

impl DataBind {
    /// The address the listening socket binds.
    pub(crate) fn listen_ip(&self, near: IpAddr) -> IpAddr {
        match near {
            IpAddr::V4(v4) if self.all_interfaces && v4.is_loopback() => {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            }
            IpAddr::V6(v6) if self.all_interfaces && v6.is_loopback() => {
                IpAddr::V6(Ipv6Addr::UNSPECIFIED)
            }
            ip => ip,
        }
    }
}

impl Endpoints for DataBind {
    fn bind(&self, near: IpAddr) -> BoxFuture<'_, Result<PlaneEndpoint, TransportError>> {
        let listen = SocketAddr::new(self.listen_ip(near), 0);
        let config = PlaneConfig {
            tcp: tcp_config(self),
            quic: QuicConfig {
                io_timeout: self.data_timeout,
                on_demand: self.connections == Connections::OnDemand,
                ..QuicConfig::default()
            },
        };
        PlaneEndpoint::bind(self.transport, listen, config).boxed()
    }
}

/// A bound, listening data-plane endpoint whose address is published before
/// the mesh is built.
#[derive(Debug)]
pub(crate) struct Bound {
    endpoint: PlaneEndpoint,
    /// The job secret, from which the data-plane key of the assignment is
    /// derived.
    secret: Secret,
    /// What peers are told to dial.
    pub(crate) address: PeerAddress,
}

impl Bound {
    /// A new endpoint from `endpoints` for a worker reaching its coordinator
    /// from `near`; `secret` is the job's, from which each assignment's
    /// data-plane key comes.
    pub(crate) async fn bind(
        endpoints: &dyn Endpoints,
        near: IpAddr,
        secret: &Secret,
    ) -> Result<Bound, TransportError> {
        let endpoint = endpoints.bind(near).await?;
        let address = endpoint.published(near)?;
        Ok(Bound {
            endpoint,
            secret: secret.clone(),
            address,
        })
    }
}

/// The TCP data plane's settings: each send and receive may wait up to
/// `data_timeout`; shared memory with the ranks of this host as
/// `shared_memory` says, connections made as `connections` says, its other
/// settings the defaults.
fn tcp_config(b: &DataBind) -> TcpConfig {
    let defaults = TcpConfig::default();
    TcpConfig {
        io_timeout: b.data_timeout,
        shared_memory: ShmConfig {
            enabled: b.shared_memory,
            spin: b.spin.unwrap_or(defaults.shared_memory.spin),
            ..defaults.shared_memory
        },
        on_demand: b.connections == Connections::OnDemand,
        carry: Some(b.carry.clone()),
        ..defaults
    }
}

impl Bound {
    /// Connects the mesh of `assignment` within `start_timeout` (at least a
    /// second).
    /// The addresses `assignment` left out are looked up through `control`
    /// (the control task's queue and its lookups).
    pub(crate) async fn connect(
        self,
        assignment: Assignment,
        start_timeout: Duration,
        control: Option<(&mpsc::Sender<WorkerMsg>, &Arc<Lookups>)>,
    ) -> Result<Entered, TransportError> {
        let admission = Admission {
            key: self.secret.data_key(assignment.data_token),
            grant: assignment.tls.as_ref(),
            within: start_timeout.max(Duration::from_secs(1)),
        };
        let rank = assignment.rank as usize;
        let (size, generation) = (assignment.size as usize, assignment.generation);
        let book = crate::lookup::book(&assignment.peers, size, generation, control);
        let plane = self
            .endpoint
            .connect_book(rank, generation, book, admission)
            .await?;
        Ok(Entered { assignment, plane })
    }
}

/// This process's place in the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub rank: usize,
    pub size: usize,
    pub local_rank: usize,
    pub local_size: usize,
    pub cross_rank: usize,
    pub cross_size: usize,
    pub generation: u64,
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
/// assignment `a` on `plane`, whose operations may each wait `data_timeout`
/// (GPU ones too) and which busy-waits at most `spin` (`None`: its
/// default); `memory` keeps the autotune samples across generations, and
/// the engine counts into `traffic`.
pub(crate) fn start(
    rt: &tokio::runtime::Handle,
    a: &Assignment,
    plane: DataPlane,
    (data_timeout, spin): (Duration, Option<Duration>),
    memory: &TuningMemory,
    traffic: &Arc<Traffic>,
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
    let base = engine_config(Some(&a.knobs), grid, memory);
    let cfg = EngineConfig {
        device_timeout: data_timeout,
        settle_quiet: spin.map_or(base.settle_quiet, |s| s.min(base.settle_quiet)),
        traffic: Arc::clone(traffic),
        ..base
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_config_turns_shared_memory_on_or_off_and_keeps_the_rest() {
        let defaults = TcpConfig::default();
        let timeout = Duration::from_millis(2500);
        let bind = |shared_memory, spin, connections| DataBind {
            all_interfaces: false,
            transport: TransportKind::Tcp,
            shared_memory,
            spin,
            connections,
            data_timeout: timeout,
            carry: LinkCarry::new(),
        };
        let on = tcp_config(&bind(true, None, Connections::All));
        assert_eq!(on.io_timeout, timeout);
        assert!(on.shared_memory.enabled);
        assert!(!on.on_demand);
        let off = tcp_config(&bind(false, None, Connections::OnDemand));
        assert!(!off.shared_memory.enabled);
        assert!(off.on_demand, "ELASTICRUN_CONNECTIONS=on-demand");
        let still = tcp_config(&bind(true, Some(Duration::ZERO), Connections::All));
        assert_eq!(
            still.shared_memory.spin,
            Duration::ZERO,
            "ELASTICRUN_SPIN_US=0"
        );
        for c in [&on, &off] {
            assert_eq!(
                c.shared_memory.ring_bytes,
                defaults.shared_memory.ring_bytes
            );
            assert_eq!(c.shared_memory.spin, defaults.shared_memory.spin);
            assert_eq!(c.connect_timeout, defaults.connect_timeout);
            assert_eq!(c.max_frame_bytes, defaults.max_frame_bytes);
        }
    }
}
