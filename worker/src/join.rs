//! Joining a job: authenticate to the coordinator, then enter the first
//! generation ([`crate::generation`]) by registering and waiting for
//! the assignment (the control task in [`crate::control_link`] takes the
//! connection from there).

use std::net::SocketAddr;
use std::time::Duration;

use control::{
    Assignment, CoordinatorMsg, Generation, PendingReport, Registration, WorkerLink, WorkerMsg,
};

use crate::control_link::HEARTBEAT;
use control::tls::ClientStream;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::env::Launch;
use crate::error::InitError;
use crate::generation::{self, DataBind, Entered};

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
    pub(crate) link: WorkerLink<ClientStream>,
    /// Where the data plane listens, in this and every later generation.
    pub(crate) data_bind: DataBind,
}

pub(crate) async fn join(
    launch: &Launch,
    tls: Option<&control::tls::ControlConnector>,
) -> Result<Joined, InitError> {
    let deadline = Instant::now() + launch.start_timeout;
    let stream = dial(launch.coordinator, deadline).await?;
    let _ = stream.set_nodelay(true);
    // The data plane listens on the address this host reaches the coordinator
    // from, which is where its peers can reach it too.
    let ip = stream
        .local_addr()
        .map_err(|e| InitError::Control {
            what: "reading the connection's local address",
            why: e.to_string(),
        })?
        .ip();
    let data_bind = DataBind {
        ip,
        all_interfaces: launch.data_all_interfaces,
        transport: launch.transport,
        shared_memory: launch.shared_memory,
        spin: launch.spin,
    };
    let stream = match tokio::time::timeout_at(deadline, control::tls::over(stream, tls)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(InitError::Control {
                what: "setting up TLS with the coordinator",
                why: e.to_string(),
            });
        }
        Err(_) => {
            return Err(InitError::Unreachable {
                addr: launch.coordinator,
            });
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let mut link = control::connect(stream, &launch.secret, left).await?;
    let bound = generation::bind(data_bind, launch.data_timeout, &launch.secret).await?;
    let assignment = register(&mut link, launch, bound.address.clone()).await?;
    // The coordinator hears from this worker while the mesh forms: a mesh
    // that cannot form is reported as such, not taken for a silent worker.
    let entered = tokio::select! {
        entered = bound.connect(assignment, launch.start_timeout) => entered?,
        e = keep_alive(&mut link, "building the data-plane mesh") => return Err(e),
    };
    Ok(Joined {
        entered,
        link,
        data_bind,
    })
}

/// Heartbeats on `link` until one cannot be sent (the error says so, and
/// `what` the worker was doing). Messages from the coordinator stay on the
/// link for the control task.
async fn keep_alive(link: &mut WorkerLink<ClientStream>, what: &'static str) -> InitError {
    let mut beat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
    loop {
        beat.tick().await;
        let hb = WorkerMsg::Heartbeat {
            generation: Generation(0),
            pending: PendingReport::default(),
        };
        let sent = tokio::time::timeout(HEARTBEAT * 5, link.send(hb)).await;
        if !matches!(sent, Ok(Ok(()))) {
            return InitError::Control {
                what,
                why: "the coordinator stopped answering".into(),
            };
        }
    }
}

/// Registers with the data-plane address `data_addr` and waits for the
/// first assignment.
async fn register(
    link: &mut WorkerLink<ClientStream>,
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
    link: &mut WorkerLink<ClientStream>,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use control::{Knobs, PeerAddress, Secret};
    use tokio::net::TcpListener;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(10);

    fn launch(coordinator: SocketAddr, secret: Secret, start_timeout: Duration) -> Launch {
        Launch {
            coordinator,
            secret,
            host: "h".into(),
            slot: 0,
            start_timeout,
            elastic_timeout: None,
            coordinator_timeout: LIMIT,
            data_timeout: LIMIT,
            engine_cpu: None,
            data_all_interfaces: false,
            transport: control::env::TransportKind::Tcp,
            shared_memory: true,
            spin: None,
        }
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
        let l = launch(listener.local_addr().unwrap(), secret.clone(), LIMIT * 3);
        let worker = tokio::spawn(async move { join(&l, None).await.map(|_| ()) });
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
            peers: vec![PeerAddress::tcp(mute.local_addr().unwrap()), r.data_addr],
            hosts: vec![0, 0],
            data_token: 1,
            knobs: Knobs::default(),
            tls: None,
        };
        link.send(CoordinatorMsg::Assign(a)).await.unwrap();
        // The dial to rank 0 is accepted by the kernel and then hangs.
        let heard = tokio::time::timeout(LIMIT, link.next())
            .await
            .expect("the worker went silent while its mesh formed");
        assert!(
            matches!(heard, Some(Ok(WorkerMsg::Heartbeat { .. }))),
            "{heard:?}"
        );
        assert!(!worker.is_finished());
        worker.abort();
    }
}
