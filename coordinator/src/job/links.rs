//! The driver's links: one task per registered worker's control
//! connection (what the worker says goes to the driver as [`LinkEvent`]s,
//! what the driver says goes out), and what the driver keeps of them
//! (`Links`).

use std::collections::HashMap;
use std::time::Duration;

use control::{Assignment, CoordinatorMsg, Generation, PeerAddress, PendingReport, WorkerMsg};
use elastic::membership::SlotId;
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::directory::Directory;
use super::workers::Live;
use crate::metrics::Progress;
use crate::server::{Arrival, HANDSHAKE_TIMEOUT, Link};

/// The workers' control connections as the driver sees them: how each is
/// served, the data-plane addresses they published, what a reconnecting
/// worker is told again, and registrations waiting for their slot.
#[derive(Debug)]
pub(super) struct Links {
    events: mpsc::Sender<LinkEvent>,
    /// A worker silent (no heartbeat) this long has failed
    /// (`--heartbeat-timeout`).
    silence: Duration,
    /// Control connections numbered in arrival order.
    next: usize,
    /// Each worker's data-plane address, as it last published it.
    pub(super) addrs: HashMap<SlotId, PeerAddress>,
    /// Each member's assignment of the current generation.
    pub(super) assigned: HashMap<SlotId, Assignment>,
    /// The last `Reset` or `HostsUpdated` sent since.
    pub(super) announced: Option<CoordinatorMsg>,
    /// Each member's rank, for the heartbeats.
    pub(super) ranks: RankIndex,
    /// The generation's address table, which the link tasks answer
    /// lookups from.
    pub(super) directory: Directory,
    /// Registrations on slots not offered yet (a pod's etcd key on its
    /// way), with when they came.
    pub(super) early: Vec<(Instant, Arrival)>,
}

impl Links {
    /// Links whose tasks report on `events`, a worker silent for `silence`
    /// taken for failed.
    pub(super) fn new(events: mpsc::Sender<LinkEvent>, silence: Duration) -> Self {
        Self {
            events,
            silence,
            next: 0,
            addrs: HashMap::new(),
            assigned: HashMap::new(),
            announced: None,
            ranks: RankIndex::default(),
            directory: Directory::default(),
            early: Vec::new(),
        }
    }

    /// Serves `link` as the control connection of the worker `live` on
    /// `slot`, numbered afresh (news of its earlier one is stale now).
    pub(super) fn serve(&mut self, live: &mut Live, slot: &SlotId, link: Link) {
        self.next += 1;
        live.link_id = self.next;
        live.link_ended = None;
        let (events, directory) = (self.events.clone(), self.directory.clone());
        let talk = Talk {
            slot: slot.clone(),
            id: self.next,
            silence: self.silence,
            events,
            directory,
        };
        live.link = Some(spawn(link, talk));
    }

    /// What a worker reconnecting on `slot` in `generation` may have missed
    /// while it was away: its assignment of a newer generation, and the
    /// announcement of the generation being gathered.
    pub(super) fn missed(&self, slot: &SlotId, generation: Generation) -> Vec<CoordinatorMsg> {
        let assign = self
            .assigned
            .get(slot)
            .filter(|a| a.generation > generation)
            .map(|a| CoordinatorMsg::Assign(a.clone()));
        let announced = match &self.announced {
            Some(m @ CoordinatorMsg::Reset { generation: g }) if *g > generation => Some(m),
            Some(m @ CoordinatorMsg::HostsUpdated { generation: g }) if *g > generation => Some(m),
            _ => None,
        };
        assign.into_iter().chain(announced.cloned()).collect()
    }
}

#[derive(Debug)]
pub enum LinkEventKind {
    /// A heartbeat: the rank's progress, and its pending tensors.
    Beat {
        progress: Progress,
        pending: PendingReport,
    },
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

/// The members' ranks by slot: a heartbeat's rank found without a search
/// through every member (n heartbeats a second).
#[derive(Debug, Default)]
pub(super) struct RankIndex {
    /// The generation and member count it was built for: members change
    /// only by an assignment (a new generation) or a loss (one fewer).
    built_for: (u64, usize),
    ranks: HashMap<SlotId, usize>,
}

impl RankIndex {
    /// `slot`'s position in `members`, the members of `generation`.
    pub(super) fn rank(
        &mut self,
        generation: Generation,
        members: &[SlotId],
        slot: &SlotId,
    ) -> Option<usize> {
        let key = (generation.0, members.len());
        if self.built_for != key {
            self.ranks = members
                .iter()
                .enumerate()
                .map(|(r, s)| (s.clone(), r))
                .collect();
            self.built_for = key;
        }
        self.ranks.get(slot).copied()
    }
}

/// Bytes of write buffer a link keeps between messages: an assignment of
/// thousands of ranks is large and rare, and thousands of links each
/// keeping room for the largest frame they ever sent would hold gigabytes.
const KEEP_BUFFER: usize = 16 << 10;

/// What a link task needs besides its link.
#[derive(Debug)]
pub struct Talk {
    pub slot: SlotId,
    /// The link's number among the job's links.
    pub id: usize,
    /// A worker silent (no heartbeat) this long has failed.
    pub silence: Duration,
    pub events: mpsc::Sender<LinkEvent>,
    /// Where its worker's lookups are answered from.
    pub directory: Directory,
}

/// Where a worker's messages wait for its connection's task, each in a box
/// of its own: a channel's values lie in blocks of 32 that live as long as
/// it does, and a [`CoordinatorMsg`] is about 300 bytes, so a block of them
/// would span three pages, made resident only as messages reach them (a few
/// a reset), wherever the block was put when the worker arrived. Boxed, a
/// block is 288 bytes and each message a short-lived allocation.
pub type Outbox = mpsc::Sender<Box<CoordinatorMsg>>;

/// Starts the task for `link`; messages sent on the returned channel go to the
/// worker. Dropping the channel closes the connection.
pub fn spawn(link: Link, talk: Talk) -> Outbox {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(run(link, talk, rx));
    tx
}

async fn run(mut link: Link, talk: Talk, mut out: mpsc::Receiver<Box<CoordinatorMsg>>) {
    let Talk {
        slot,
        id,
        silence,
        events,
        directory,
    } = talk;
    // One timer for the connection's life, moved on only when it rings: a
    // message heard costs no timer of its own (at 10,000 workers, each
    // heartbeat's and each reset's frames took one in and out of the
    // runtime's timer wheel).
    let mut heard_at = Instant::now();
    let silent = tokio::time::sleep(silence);
    tokio::pin!(silent);
    let ended = loop {
        let heard = tokio::select! {
            m = out.recv() => match m {
                Some(m) => *m,
                None => return,
            },
            m = link.next() => {
                heard_at = Instant::now();
                match m {
                    Some(Ok(WorkerMsg::Lookup { id, generation, ranks })) => {
                        let entries = directory.look_up(generation, &ranks);
                        CoordinatorMsg::Addresses { id, generation, entries }
                    }
                    Some(Ok(msg)) => {
                        if let Some(kind) = event(msg, &slot) {
                            send(&events, &slot, id, kind).await;
                        }
                        continue;
                    }
                    Some(Err(e)) => break format!("its control connection failed: {e}"),
                    None => break "its control connection closed".to_owned(),
                }
            }
            () = &mut silent => match silence_after(heard_at, silence, Instant::now()) {
                Some(due) => {
                    silent.as_mut().reset(due);
                    continue;
                }
                None => break format!("no heartbeat for {silence:?}"),
            },
        };
        let sent = tokio::time::timeout(HANDSHAKE_TIMEOUT, link.send(heard)).await;
        if !matches!(sent, Ok(Ok(()))) {
            break "a message to it could not be sent".to_owned();
        }
        if link.write_buffer().capacity() > KEEP_BUFFER {
            *link.write_buffer_mut() = tokio_util::bytes::BytesMut::new();
        }
    };
    send(&events, &slot, id, LinkEventKind::Ended(ended)).await;
}

/// When a worker last heard at `heard_at` counts as silent, if that is
/// still to come at `now`; `None`: it has been silent for `silence`. A
/// silence too long for the clock to reach is looked at again in a day.
fn silence_after(heard_at: Instant, silence: Duration, now: Instant) -> Option<Instant> {
    const DAY: Duration = Duration::from_secs(86_400);
    match heard_at.checked_add(silence) {
        Some(due) if due <= now => None,
        Some(due) => Some(due),
        None => Some(now + DAY),
    }
}

/// What a worker's message tells the driver, if anything.
fn event(msg: WorkerMsg, slot: &SlotId) -> Option<LinkEventKind> {
    Some(match msg {
        WorkerMsg::Heartbeat {
            steps,
            collective_bytes,
            collective_wait,
            pending,
            ..
        } => {
            let progress = Progress {
                steps,
                collective_bytes,
                collective_wait,
            };
            LinkEventKind::Beat { progress, pending }
        }
        WorkerMsg::Rejoin {
            generation,
            data_addr,
        } => LinkEventKind::Rejoin {
            generation,
            data_addr,
        },
        WorkerMsg::Running {
            generation,
            step,
            reached,
        } => LinkEventKind::Running {
            generation,
            step,
            reached,
        },
        WorkerMsg::Finished => LinkEventKind::Finished,
        other => {
            tracing::debug!(%slot, ?other, "ignored message");
            return None;
        }
    })
}

async fn send(events: &mpsc::Sender<LinkEvent>, slot: &SlotId, id: usize, kind: LinkEventKind) {
    let e = LinkEvent {
        slot: slot.clone(),
        id,
        kind,
    };
    let _ = events.send(e).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The silence timer rings at `silence` after the connection opened;
    /// a worker heard since is given until `silence` after that, one not
    /// heard is silent.
    #[test]
    fn a_worker_is_silent_only_a_full_silence_after_it_was_last_heard() {
        let silence = Duration::from_secs(6);
        let opened = Instant::now();
        let rang = opened + silence;
        assert_eq!(silence_after(opened, silence, rang), None, "never heard");
        let heard = opened + Duration::from_secs(4);
        assert_eq!(silence_after(heard, silence, rang), Some(heard + silence));
        let later = heard + silence;
        assert_eq!(
            silence_after(heard, silence, later),
            None,
            "heard once, then silent"
        );
        let forever = Duration::MAX;
        assert_eq!(
            silence_after(heard, forever, later),
            Some(later + Duration::from_secs(86_400)),
            "a silence past the clock's end is never reached"
        );
    }
}
