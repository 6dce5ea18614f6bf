//! Joining a job: authenticate to the coordinator, register, receive the
//! assignment, build the data-plane mesh, keep heartbeating.

use std::net::SocketAddr;
use std::time::Duration;

use collectives::{Generation, TcpConfig, TcpEndpoint, TcpTransport};
use control::{Assignment, CoordinatorMsg, PendingReport, Registration, WorkerLink, WorkerMsg};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::InitError;
use crate::engine::PendingBoard;
use crate::env::Launch;

/// How often a worker tells the coordinator it is alive.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(1);

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
            _ => return Err(InitError::Unreachable(addr)),
        }
    }
}

/// Everything `init` needs to keep: the transport and the control link.
pub(crate) struct Joined {
    pub(crate) assignment: Assignment,
    pub(crate) transport: TcpTransport,
    pub(crate) link: WorkerLink<TcpStream>,
}

pub(crate) async fn join(launch: &Launch) -> Result<Joined, InitError> {
    let deadline = Instant::now() + launch.start_timeout;
    let stream = dial(launch.coordinator, deadline).await?;
    let _ = stream.set_nodelay(true);
    // The data plane listens on the address this host reaches the coordinator
    // from, which is where its peers can reach it too.
    let local_ip = stream
        .local_addr()
        .map_err(|e| InitError::Io(e.to_string()))?
        .ip();
    let left = deadline.saturating_duration_since(Instant::now());
    let mut link = control::connect(stream, &launch.secret, left).await?;
    let endpoint = TcpEndpoint::bind(SocketAddr::new(local_ip, 0), TcpConfig::default()).await?;
    let registration = Registration {
        host: launch.host.clone(),
        slot: launch.slot,
        pid: std::process::id(),
        data_addr: endpoint.local_addr()?,
    };
    link.send(WorkerMsg::Register(registration))
        .await
        .map_err(|e| InitError::Io(e.to_string()))?;
    let assignment = match tokio::time::timeout_at(deadline, link.next()).await {
        Ok(Some(Ok(CoordinatorMsg::Assign(a)))) => a,
        Ok(Some(Ok(CoordinatorMsg::Stop { reason }))) => return Err(InitError::Refused(reason)),
        Ok(Some(Ok(_))) => {
            return Err(InitError::Io(
                "unexpected message before the assignment".into(),
            ));
        }
        Ok(Some(Err(e))) => return Err(InitError::Io(e.to_string())),
        Ok(None) => {
            return Err(InitError::Io(
                "the coordinator closed the connection".into(),
            ));
        }
        Err(_) => return Err(InitError::NoAssignment(launch.start_timeout)),
    };
    let transport = connect_mesh(endpoint, &assignment, deadline).await?;
    Ok(Joined {
        assignment,
        transport,
        link,
    })
}

async fn connect_mesh(
    mut endpoint: TcpEndpoint,
    a: &Assignment,
    deadline: Instant,
) -> Result<TcpTransport, InitError> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1));
    endpoint.prepare(a.data_token, left);
    Ok(endpoint
        .connect(a.rank as usize, Generation(a.generation), &a.peers)
        .await?)
}

/// Sends heartbeats (listing the tensors on `pending`, when the stall check is
/// on) and obeys `Stop`; a lost coordinator ends the process, so that no
/// worker outlives its job.
pub(crate) async fn keep_alive(
    mut link: WorkerLink<TcpStream>,
    generation: u64,
    pending: Option<PendingBoard>,
) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let pending = pending
                    .as_ref()
                    .map_or_else(PendingReport::default, |b| b.report(std::time::Instant::now()));
                let beat = WorkerMsg::Heartbeat { generation, pending };
                let sent = tokio::time::timeout(HEARTBEAT * 5, link.send(beat)).await;
                if !matches!(sent, Ok(Ok(()))) {
                    exit("lost the coordinator (heartbeat could not be sent)");
                }
            }
            m = link.next() => match m {
                Some(Ok(CoordinatorMsg::Stop { reason })) => exit(&format!("stopped by the coordinator: {reason}")),
                Some(Ok(_)) => {}
                Some(Err(e)) => exit(&format!("control connection failed: {e}")),
                None => exit("lost the coordinator (connection closed)"),
            }
        }
    }
}

fn exit(why: &str) -> ! {
    eprintln!("elasticrun worker: {why}; exiting");
    std::process::exit(1)
}
