//! Joining a job: authenticate to the coordinator, then enter the first
//! generation ([`crate::generation::enter`]) by registering and waiting for
//! the assignment (the control task in [`crate::control_link`] takes the
//! connection from there).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use control::{
    Assignment, CoordinatorMsg, Generation, PendingReport, Registration, WorkerLink, WorkerMsg,
};

use crate::control_link::HEARTBEAT;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::env::Launch;
use crate::error::InitError;
use crate::generation::{self, EnterError, Entered};

async fn dial(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, InitError> {
    let mut backoff = Duration::from_millis(10);
    loop {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) if Instant::now() + backoff < deadline => {
                tracing::debug!(%addr, %e, "coordinator not reachable yet");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            _ => return Err(InitError::Unreachable { addr }),
        }
    }
}

/// Everything `init` needs to keep: the first generation and the control link.
pub(crate) struct Joined {
    pub(crate) entered: Entered,
    pub(crate) link: WorkerLink<TcpStream>,
    /// The address this host reaches the coordinator from; the data plane
    /// listens there.
    pub(crate) local_ip: IpAddr,
}

pub(crate) async fn join(launch: &Launch) -> Result<Joined, InitError> {
    let deadline = Instant::now() + launch.start_timeout;
    let stream = dial(launch.coordinator, deadline).await?;
    let _ = stream.set_nodelay(true);
    // The data plane listens on the address this host reaches the coordinator
    // from, which is where its peers can reach it too.
    let local_ip = stream
        .local_addr()
        .map_err(|e| InitError::Control {
            what: "reading the connection's local address",
            why: e.to_string(),
        })?
        .ip();
    let left = deadline.saturating_duration_since(Instant::now());
    let mut link = control::connect(stream, &launch.secret, left).await?;
    let link_ref = &mut link;
    // Moves the borrow into the call: the placement step runs once.
    let register = move |data_addr| {
        let link = link_ref;
        register(link, launch, data_addr)
    };
    let entered = generation::enter(
        local_ip,
        launch.start_timeout,
        launch.data_timeout,
        register,
    )
    .await
    .map_err(|e| match e {
        EnterError::Bind(e) | EnterError::Mesh { source: e, .. } => InitError::DataPlane(e),
        EnterError::Placement(e) => e,
    })?;
    Ok(Joined {
        entered,
        link,
        local_ip,
    })
}

/// Registers with the data-plane address `data_addr` and waits for the
/// first assignment.
async fn register(
    link: &mut WorkerLink<TcpStream>,
    launch: &Launch,
    data_addr: control::PeerAddress,
) -> Result<Assignment, InitError> {
    let registration = Registration {
        host: launch.host.clone(),
        slot: launch.slot,
        pid: std::process::id(),
        data_addr,
        generation: Generation(0),
    };
    link.send(WorkerMsg::Register(registration))
        .await
        .map_err(|e| InitError::Control {
            what: "registering",
            why: e.to_string(),
        })?;
    // An elastic job may wait for enough workers before the first assignment.
    let assigned_by = Instant::now() + launch.assignment_wait();
    first_assignment(link, assigned_by)
        .await?
        .ok_or(InitError::NoAssignment {
            waited: launch.assignment_wait(),
        })
}

/// Waits for the first assignment until `until` (`None` then), heartbeating
/// meanwhile: an elastic job may keep a newcomer waiting for a while. Notices
/// meant for the workers already placed are skipped.
async fn first_assignment(
    link: &mut WorkerLink<TcpStream>,
    until: Instant,
) -> Result<Option<Assignment>, InitError> {
    let mut beat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
    loop {
        let m = tokio::select! {
            m = link.next() => m,
            _ = beat.tick() => {
                let hb = WorkerMsg::Heartbeat { generation: Generation(0), pending: PendingReport::default() };
                let sent = tokio::time::timeout(HEARTBEAT * 5, link.send(hb)).await;
                if !matches!(sent, Ok(Ok(()))) {
                    return Err(InitError::Control {
                        what: "waiting for the first assignment",
                        why: "the coordinator stopped answering".into(),
                    });
                }
                continue;
            }
            _ = tokio::time::sleep_until(until) => return Ok(None),
        };
        match m {
            Some(Ok(CoordinatorMsg::Assign(a))) => return Ok(Some(a)),
            Some(Ok(CoordinatorMsg::Stop { reason } | CoordinatorMsg::Leave { reason })) => {
                return Err(InitError::Refused { reason });
            }
            Some(Ok(other)) => tracing::debug!(?other, "ignored before the first assignment"),
            Some(Err(e)) => {
                return Err(InitError::Control {
                    what: "waiting for the first assignment",
                    why: e.to_string(),
                });
            }
            None => {
                return Err(InitError::Control {
                    what: "waiting for the first assignment",
                    why: "the coordinator closed the connection".into(),
                });
            }
        }
    }
}
