//! The coordinator's control-plane server: authenticates every connection,
//! collects registrations into a [`Rendezvous`], hands out assignments, then
//! watches each worker's connection and heartbeats.
//!
//! ```text
//!  listener task ──(authenticated, registered)──> rendezvous loop ──> Assign
//!        │ garbage / wrong secret: that connection closes, nothing else
//!  link task per worker: heartbeats in (pending tensors on to the stall
//!                        inspector); closed or silent -> WorkerLost
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use control::{CoordinatorLink, CoordinatorMsg, Knobs, Registration, Secret, WorkerMsg};
use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::rendezvous::{Rendezvous, SlotKey};
use crate::stall::Beat;

/// How long one connection may take to authenticate and register.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A worker's authenticated control connection.
pub type Link = CoordinatorLink<TcpStream>;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen for workers: {0}")]
    Listen(std::io::Error),
    #[error("{} of {expected} workers did not register within {after:?}: {}", missing.len(), list(missing))]
    StartTimeout {
        after: Duration,
        expected: usize,
        missing: Vec<SlotKey>,
    },
    #[error("the listener stopped")]
    ListenerGone,
}

fn list(slots: &[SlotKey]) -> String {
    slots
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A worker that reached the rendezvous loop: authenticated and registered.
#[derive(Debug)]
pub struct Arrival {
    pub registration: Registration,
    pub link: Link,
}

/// Listening coordinator.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    arrivals: mpsc::Receiver<Arrival>,
    listener: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl Server {
    /// Listens on `addr` and starts authenticating connections with `secret`.
    pub async fn bind(addr: SocketAddr, secret: Secret) -> Result<Self, ServerError> {
        let listener = TcpListener::bind(addr).await.map_err(ServerError::Listen)?;
        let addr = listener.local_addr().map_err(ServerError::Listen)?;
        let (tx, arrivals) = mpsc::channel(1024);
        let listener = tokio::spawn(listen(listener, Arc::new(secret), tx));
        Ok(Self {
            addr,
            arrivals,
            listener,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next authenticated, registered worker (elastic jobs take them as
    /// they come); `None` once the listener has stopped.
    pub async fn next_arrival(&mut self) -> Option<Arrival> {
        self.arrivals.recv().await
    }

    /// Waits until every slot of `rv` has registered (or `start_timeout` passes),
    /// then sends every worker its assignment. Returns the links in rank order.
    pub async fn rendezvous(
        &mut self,
        mut rv: Rendezvous,
        knobs: &Knobs,
        data_token: u64,
        start_timeout: Duration,
    ) -> Result<Vec<WorkerLink>, ServerError> {
        let deadline = Instant::now() + start_timeout;
        let expected = rv.missing().len();
        let mut links: Vec<(usize, Link)> = Vec::with_capacity(expected);
        while !rv.is_complete() {
            let arrival = tokio::select! {
                a = self.arrivals.recv() => a.ok_or(ServerError::ListenerGone)?,
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(ServerError::StartTimeout { after: start_timeout, expected, missing: rv.missing() });
                }
            };
            let Arrival {
                registration,
                mut link,
            } = arrival;
            match rv.register(&registration) {
                Ok(rank) => links.push((rank, link)),
                Err(e) => {
                    tracing::warn!(%e, "registration refused");
                    let _ = link
                        .send(CoordinatorMsg::Stop {
                            reason: e.to_string(),
                        })
                        .await;
                }
            }
        }
        let assignments = rv.assignments(knobs, data_token).unwrap_or_default();
        links.sort_by_key(|(rank, _)| *rank);
        let mut out = Vec::with_capacity(links.len());
        for ((rank, mut link), (slot, assignment)) in links.into_iter().zip(assignments) {
            // A worker that cannot take its assignment is lost right away.
            let sent = tokio::time::timeout(
                HANDSHAKE_TIMEOUT,
                link.send(CoordinatorMsg::Assign(assignment)),
            )
            .await;
            let ok = matches!(sent, Ok(Ok(())));
            out.push(WorkerLink {
                rank,
                slot,
                link: ok.then_some(link),
            });
        }
        Ok(out)
    }
}

/// An assigned worker's control connection.
#[derive(Debug)]
pub struct WorkerLink {
    pub rank: usize,
    pub slot: SlotKey,
    link: Option<Link>,
}

/// Why a worker's control connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkEnd {
    Closed,
    Silent(Duration),
    Broken(String),
}

impl std::fmt::Display for LinkEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkEnd::Closed => f.write_str("its control connection closed"),
            LinkEnd::Silent(d) => write!(f, "no heartbeat for {d:?}"),
            LinkEnd::Broken(why) => write!(f, "its control connection failed: {why}"),
        }
    }
}

impl WorkerLink {
    /// Reads heartbeats until the connection ends or stays silent for
    /// `silence`, handing each one's pending tensors to `beats` (dropped when
    /// the inspector is behind: the next heartbeat says the same); sends `Stop`
    /// when told to on `stop`.
    pub async fn watch(
        self,
        silence: Duration,
        mut stop: tokio::sync::watch::Receiver<Option<String>>,
        beats: Option<mpsc::Sender<Beat>>,
    ) -> (usize, LinkEnd) {
        let Some(mut link) = self.link else {
            return (
                self.rank,
                LinkEnd::Broken("the assignment could not be sent".into()),
            );
        };
        loop {
            tokio::select! {
                m = tokio::time::timeout(silence, link.next()) => match m {
                    Ok(Some(Ok(WorkerMsg::Heartbeat { pending, .. }))) => {
                        if let Some(beats) = &beats {
                            let (rank, slot) = (self.rank, self.slot.clone());
                            let _ = beats.try_send(Beat { rank, slot, pending });
                        }
                    }
                    Ok(Some(Ok(other))) => tracing::debug!(rank = self.rank, ?other, "ignored message"),
                    Ok(Some(Err(e))) => return (self.rank, LinkEnd::Broken(e.to_string())),
                    Ok(None) => return (self.rank, LinkEnd::Closed),
                    Err(_) => return (self.rank, LinkEnd::Silent(silence)),
                },
                changed = stop.changed() => {
                    let reason = stop.borrow().clone();
                    if let (Ok(()), Some(reason)) = (changed, reason) {
                        let _ = tokio::time::timeout(HANDSHAKE_TIMEOUT, link.send(CoordinatorMsg::Stop { reason })).await;
                    }
                    return (self.rank, LinkEnd::Closed);
                }
            }
        }
    }
}

async fn listen(listener: TcpListener, secret: Arc<Secret>, arrivals: mpsc::Sender<Arrival>) {
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (secret, arrivals) = (secret.clone(), arrivals.clone());
        tokio::spawn(async move {
            match admit(stream, &secret).await {
                Ok(a) => {
                    let _ = arrivals.send(a).await;
                }
                Err(why) => tracing::warn!(%from, %why, "control connection refused"),
            }
        });
    }
}

/// Authenticates a connection and reads its registration.
async fn admit(stream: TcpStream, secret: &Secret) -> Result<Arrival, String> {
    let _ = stream.set_nodelay(true);
    let mut link = control::accept(stream, secret, HANDSHAKE_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, link.next()).await {
        Ok(Some(Ok(WorkerMsg::Register(registration)))) => Ok(Arrival { registration, link }),
        Ok(Some(Ok(_))) => Err("expected a registration".into()),
        Ok(Some(Err(e))) => Err(e.to_string()),
        Ok(None) => Err("closed before registering".into()),
        Err(_) => Err(format!("no registration within {HANDSHAKE_TIMEOUT:?}")),
    }
}
