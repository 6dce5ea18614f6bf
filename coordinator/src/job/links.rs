//! One task per registered worker's control connection: what the worker says
//! goes to the driver as [`LinkEvent`]s, what the driver says goes out.

use std::time::Duration;

use control::{CoordinatorMsg, Generation, PendingReport, WorkerMsg};
use elastic::membership::SlotId;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use crate::server::{HANDSHAKE_TIMEOUT, Link};

#[derive(Debug)]
pub enum LinkEventKind {
    Beat(PendingReport),
    Rejoin {
        generation: Generation,
        data_addr: control::PeerAddress,
    },
    /// The worker runs in `generation` from `step` (see
    /// [`WorkerMsg::Running`]).
    Running {
        generation: Generation,
        step: u64,
        reached: Option<u64>,
    },
    /// The worker ended its training cleanly ([`WorkerMsg::Finished`]).
    Finished,
    /// The connection closed, failed or went silent.
    Ended(String),
}

/// Something a worker's connection said; `id` numbers the connection, so that
/// news of a replaced worker, or of a worker's earlier connection, is not taken
/// for the current one.
#[derive(Debug)]
pub struct LinkEvent {
    pub slot: SlotId,
    pub id: usize,
    pub kind: LinkEventKind,
}

/// Starts the task for `link`; messages sent on the returned channel go to the
/// worker. Dropping the channel closes the connection.
pub fn spawn(
    link: Link,
    slot: SlotId,
    id: usize,
    silence: Duration,
    events: mpsc::Sender<LinkEvent>,
) -> mpsc::Sender<CoordinatorMsg> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(run(link, slot, id, silence, events, rx));
    tx
}

async fn run(
    mut link: Link,
    slot: SlotId,
    id: usize,
    silence: Duration,
    events: mpsc::Sender<LinkEvent>,
    mut out: mpsc::Receiver<CoordinatorMsg>,
) {
    let ended = loop {
        tokio::select! {
            m = out.recv() => match m {
                Some(m) => {
                    let sent = tokio::time::timeout(HANDSHAKE_TIMEOUT, link.send(m)).await;
                    if !matches!(sent, Ok(Ok(()))) {
                        break "a message to it could not be sent".to_owned();
                    }
                }
                None => return,
            },
            m = tokio::time::timeout(silence, link.next()) => match m {
                Ok(Some(Ok(WorkerMsg::Heartbeat { pending, .. }))) => {
                    send(&events, &slot, id, LinkEventKind::Beat(pending)).await;
                }
                Ok(Some(Ok(WorkerMsg::Rejoin { generation, data_addr }))) => {
                    let kind = LinkEventKind::Rejoin { generation, data_addr };
                    send(&events, &slot, id, kind).await;
                }
                Ok(Some(Ok(WorkerMsg::Running { generation, step, reached }))) => {
                    let kind = LinkEventKind::Running { generation, step, reached };
                    send(&events, &slot, id, kind).await;
                }
                Ok(Some(Ok(WorkerMsg::Finished))) => {
                    send(&events, &slot, id, LinkEventKind::Finished).await;
                }
                Ok(Some(Ok(other))) => tracing::debug!(%slot, ?other, "ignored message"),
                Ok(Some(Err(e))) => break format!("its control connection failed: {e}"),
                Ok(None) => break "its control connection closed".to_owned(),
                Err(_) => break format!("no heartbeat for {silence:?}"),
            },
        }
    };
    send(&events, &slot, id, LinkEventKind::Ended(ended)).await;
}

async fn send(events: &mpsc::Sender<LinkEvent>, slot: &SlotId, id: usize, kind: LinkEventKind) {
    let e = LinkEvent {
        slot: slot.clone(),
        id,
        kind,
    };
    let _ = events.send(e).await;
}
