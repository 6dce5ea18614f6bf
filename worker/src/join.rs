//! Joining a job: open and authenticate the control connection, bind a
//! data-plane endpoint, register with its address, start the control task,
//! then enter the first generation the coordinator places this worker in
//! ([`crate::generation`]). The control task heartbeats from registration
//! on, so the coordinator hears from the worker while it waits for enough
//! workers and while the mesh forms.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use control::Generation;
use tokio::time::Instant;

use crate::control_link::{self, Connect, Observe, Redial, Shared};
use crate::error::InitError;
use crate::generation::{Bound, Endpoints};
use crate::rejoin::{RejoinError, await_placement};
use crate::session::{Link, Session, Tasks, Watcher};

/// How a worker joins its job: how it reaches the coordinator and as whom,
/// how it makes its data-plane endpoints, and how long it waits.
#[derive(Debug)]
pub struct Joining<C> {
    /// How to reach the coordinator (the first time too), as whom, and for
    /// how long to keep trying after the connection drops.
    pub redial: Redial<C>,
    pub endpoints: Box<dyn Endpoints>,
    /// How long joining and each generation's mesh may take
    /// (`--start-timeout`).
    pub start_timeout: Duration,
    /// How much longer an elastic job may keep the worker waiting for a
    /// placement (`--elastic-timeout`; `None`: not an elastic job).
    pub elastic_timeout: Option<Duration>,
    /// The job keeps hot spares (`--hot-spares`): this worker may wait for
    /// its first placement for as long as the job keeps it.
    pub hot_spares: bool,
    /// Longest wait of one data-plane send or receive.
    pub data_timeout: Duration,
    /// How long the engine busy-waits at most (`None`: its default).
    pub spin: Option<Duration>,
}

/// How long a worker of a job with hot spares waits for its first
/// placement: a year.
const SPARE_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

impl<C> Joining<C> {
    /// How long to wait for the first placement after registering: an
    /// elastic job may wait up to its elastic timeout for enough workers; a
    /// hot spare, for as long as the job keeps it (the coordinator stops it
    /// at the end, and a lost link ends it anyway).
    pub fn placement_wait(&self) -> Duration {
        if self.hot_spares {
            return SPARE_WAIT;
        }
        self.start_timeout + self.elastic_timeout.unwrap_or_default()
    }
}

impl Session {
    /// Joins the job as `joining` says, on `rt` (where the control task and
    /// the engine run): registers, waits for the first placement and
    /// connects its mesh. `observe` watches the session; `on_end` gets why
    /// the control task ended (the coordinator stopped the worker, or
    /// stayed unreachable), whereupon a launched worker's process exits.
    pub async fn join<C: Connect>(
        rt: tokio::runtime::Handle,
        joining: Joining<C>,
        observe: Arc<dyn Observe>,
        on_end: impl FnOnce(String) + Send + 'static,
    ) -> Result<Session, InitError> {
        let wait = joining.placement_wait();
        let Joining {
            redial,
            endpoints,
            start_timeout,
            elastic_timeout,
            data_timeout,
            spin,
            hot_spares: _,
        } = joining;
        let mut link = redial.open(Instant::now() + start_timeout).await?;
        // The data plane listens where this host reaches the coordinator
        // from, which is where its peers can reach it too.
        let near = C::near(link.get_ref()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let secret = redial.secret.clone();
        let bound = Bound::bind(&*endpoints, near, &secret).await?;
        let shared = Arc::new(Shared::default());
        shared.set_data_addr(bound.address.clone());
        redial
            .register(&mut link, &shared)
            .await
            .map_err(|why| InitError::Control {
                what: "registering",
                why,
            })?;
        let observe = Watcher(observe);
        let (mut control, task) =
            control_link::spawn(&rt, link, shared, redial, observe.0.clone(), on_end);
        let mut tasks = Tasks::default();
        tasks.push(task);
        let assignment = await_placement(&mut control, Generation(0), wait)
            .await
            .map_err(first_placement)?;
        let lookups = (&control.out, &control.shared.lookups);
        let entered = bound
            .connect(assignment, start_timeout, Some(lookups))
            .await?;
        let link = Link {
            control,
            endpoints,
            near,
            secret,
            start_timeout,
            elastic_timeout,
            data_timeout,
            spin,
            pod: None,
        };
        Ok(Session::launched(rt, entered, link, observe, tasks))
    }
}

/// Why the first placement did not come, as joining says it.
fn first_placement(e: RejoinError) -> InitError {
    match e {
        RejoinError::NoAssignment { waited } => InitError::NoAssignment { waited },
        RejoinError::Left { reason } => InitError::Refused { reason },
        other => InitError::Control {
            what: "waiting for the first assignment",
            why: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use control::{Assignment, CoordinatorMsg, Knobs, PeerAddress, Secret, WorkerMsg};
    use futures::{SinkExt, StreamExt};
    use tokio::net::TcpListener;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    fn joining(
        coordinator: std::net::SocketAddr,
        secret: Secret,
        start_timeout: Duration,
    ) -> Joining<control_link::Tcp> {
        let launch = crate::env::Launch {
            coordinator,
            secret,
            host: "h".into(),
            slot: 0,
            start_timeout,
            elastic_timeout: None,
            hot_spares: false,
            coordinator_timeout: LIMIT,
            data_timeout: LIMIT,
            engine_cpu: None,
            data_all_interfaces: false,
            transport: control::env::TransportKind::Tcp,
            shared_memory: true,
            // Every pair before the generation starts: the mesh that forms
            // while the worker waits, below.
            connections: control::env::Connections::All,
            spin: None,
        };
        let connect = control_link::Tcp {
            addr: coordinator,
            launcher: None,
            tls: None,
        };
        crate::worker::joining(&launch, connect)
    }

    /// Rank 1 of two, whose rank 0 accepts connections but never answers:
    /// while the worker waits on that mesh, the coordinator keeps hearing
    /// from it (before, it went silent until the mesh gave up, and a static
    /// job took the silence for a dead worker).
    #[tokio::test]
    async fn a_worker_heartbeats_while_its_mesh_forms() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mute = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let secret = Secret::generate().unwrap();
        let j = joining(listener.local_addr().unwrap(), secret.clone(), LIMIT * 3);
        let rt = tokio::runtime::Handle::current();
        let worker =
            tokio::spawn(
                async move { Session::join(rt, j, Arc::new(()), |_| {}).await.map(|_| ()) },
            );
        let (s, _) = listener.accept().await.unwrap();
        let mut link = control::accept(s, &secret, LIMIT).await.unwrap();
        let Some(Ok(WorkerMsg::Register(r))) = link.next().await else {
            panic!("no registration");
        };
        let a = Assignment {
            generation: Generation(1),
            rank: 1,
            size: 2,
            local_rank: 1,
            local_size: 2,
            cross_rank: 0,
            cross_size: 1,
            peers: vec![PeerAddress::tcp(mute.local_addr().unwrap()), r.data_addr].into(),
            hosts: vec![0, 0].into(),
            data_token: 1,
            knobs: Knobs::default(),
            tls: None,
        };
        link.send(CoordinatorMsg::Assign(a)).await.unwrap();
        // The dial to rank 0 is accepted by the kernel and then hangs. At
        // most one heartbeat was sent before the assignment (the control
        // task's first, at once): three more span two heartbeat periods of
        // the mesh forming.
        for _ in 0..4 {
            let heard = tokio::time::timeout(LIMIT, link.next())
                .await
                .expect("the worker went silent while its mesh formed");
            assert!(
                matches!(heard, Some(Ok(WorkerMsg::Heartbeat { .. }))),
                "{heard:?}"
            );
        }
        assert!(!worker.is_finished());
        worker.abort();
    }
}
