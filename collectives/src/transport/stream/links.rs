//! A stream transport's links to its peers: made all at once before the
//! generation starts (the full mesh), or one at a time when a send first
//! needs a peer (connections on demand) and as peers' dials are accepted.
//!
//! ```text
//!  send(to) ──> writers[to] set? ──yes──> write the frame
//!                    │ no
//!                    └──> Dialer::dial(to) ──> reader task + writers[to]
//!  accept task ──> a proven link from peer p ──> reader task + writers[p]
//! ```
//! Every link, however made, has a reader task: a peer may send on the link
//! it accepted from us. [`Pairing`] keeps one link a pair when both ends
//! dial at once; a peer departs once every link from it said goodbye
//! ([`Mailbox::closed_cleanly`](super::super::mailbox::Mailbox)).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as SyncMutex, PoisonError};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::{Mutex, Notify, OnceCell, SetError};
use tokio::task::JoinHandle;

use super::carry::{Carried, Slot};
use super::handshake::Refusal;
use super::pairing::{OnSend, Pairing};
use super::{READ_BUFFER, ReadHalf, Reader, StreamMailbox, WriteHalf, read_frames};
use crate::error::{LossCause, TransportError};
use crate::tag::Rank;

/// One connected, proven stream to `peer`: its two halves, and whether
/// they run through shared memory.
#[derive(Debug)]
pub(crate) struct Link<R, W> {
    pub(crate) peer: Rank,
    pub(crate) read: R,
    pub(crate) write: W,
    pub(crate) shared_memory: bool,
}

/// A link's making, boxed so that a transport can hold any dialer.
pub(crate) type Dialing<'a, R, W> = Boxed<'a, Link<R, W>>;

/// A dialer's answer, boxed.
pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, TransportError>> + Send + 'a>>;

/// Makes the link to a peer that a send needs and no link reaches yet.
pub(crate) trait Dialer<R, W>: Send + Sync + std::fmt::Debug + 'static {
    /// Connects to `peer`, proves this rank to it and makes the link.
    fn dial(&self, peer: Rank) -> Dialing<'_, R, W>;

    /// How long a send may wait for a peer's link to be made.
    fn patience(&self) -> Duration;

    /// The process behind `peer` ([`control::PeerAddress::process`]),
    /// whose parked link a send may take up instead of dialing; `None`
    /// where it is not known without asking.
    fn process(&self, _peer: Rank) -> Boxed<'_, Option<u64>> {
        Box::pin(async { Ok(None) })
    }
}

/// Where a transport's links park between generations, and how long a
/// parked link waits for its generation.
#[derive(Debug)]
pub(crate) struct CarryTo<R, W> {
    pub(crate) carried: Arc<Carried<R, W>>,
    pub(crate) patience: Duration,
}

/// What a transport's sends, its reader tasks and its accept task share.
#[derive(Debug)]
pub(crate) struct Links<R, W> {
    pub(crate) mailbox: Arc<StreamMailbox<R>>,
    /// `writers[peer]`: the link sends to `peer` take, once there is one.
    writers: Vec<OnceCell<Arc<Mutex<W>>>>,
    /// Writing halves of a link placed where the peer had one already
    /// (which [`Pairing`] prevents): kept for the goodbye.
    spare: SyncMutex<Vec<Arc<Mutex<W>>>>,
    /// Where links park when the generation ends (`None`: they close).
    carry: Option<CarryTo<R, W>>,
    /// Every link's slot, with `carry`.
    slots: SyncMutex<Vec<Arc<Slot<W>>>>,
    rank: Rank,
    readers: SyncMutex<Vec<JoinHandle<()>>>,
    /// Peers a link through shared memory reaches.
    shared: SyncMutex<Vec<Rank>>,
    max_frame_bytes: u32,
    /// Who makes which pair's link (connections on demand).
    pairing: SyncMutex<Pairing>,
    /// Woken when a link is made.
    made: Notify,
}

impl<R: ReadHalf, W: WriteHalf> Links<R, W> {
    pub(crate) fn new(
        rank: Rank,
        size: usize,
        mailbox: Arc<StreamMailbox<R>>,
        max_frame_bytes: u32,
        carry: Option<CarryTo<R, W>>,
    ) -> Self {
        Self {
            carry,
            slots: SyncMutex::new(Vec::new()),
            rank,
            pairing: SyncMutex::new(Pairing::new(rank, size)),
            made: Notify::new(),
            mailbox,
            writers: (0..size).map(|_| OnceCell::new()).collect(),
            spare: SyncMutex::new(Vec::new()),
            readers: SyncMutex::new(Vec::new()),
            shared: SyncMutex::new(Vec::new()),
            max_frame_bytes,
        }
    }

    pub(crate) fn size(&self) -> usize {
        self.writers.len()
    }

    /// The writer of `peer`'s link, if there is one yet.
    pub(crate) fn writer(&self, peer: Rank) -> Option<&Mutex<W>> {
        self.writers.get(peer).and_then(OnceCell::get).map(|w| &**w)
    }

    fn pairs(&self) -> std::sync::MutexGuard<'_, Pairing> {
        self.pairing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The writer of `peer`'s link: dialed by `dialer` if no link to `peer`
    /// is made or under way, else the one under way once it is made
    /// ([`Pairing`]). A failed dial breaks the generation, as a failed
    /// set-up of the full mesh fails it.
    pub(crate) async fn dialed(
        &self,
        peer: Rank,
        dialer: &dyn Dialer<R, W>,
    ) -> Result<&Mutex<W>, TransportError> {
        let Some(cell) = self.writers.get(peer) else {
            return Err(TransportError::InvalidRank {
                rank: peer,
                size: self.size(),
            });
        };
        let deadline = tokio::time::Instant::now() + dialer.patience();
        let mut dialed = false;
        loop {
            let made = self.made.notified();
            tokio::pin!(made);
            made.as_mut().enable();
            if let Some(w) = cell.get() {
                return Ok(w);
            }
            if !dialed && self.pairs().on_send(peer) == OnSend::Dial {
                dialed = true;
                if let Some(w) = self.take_up(peer, dialer).await {
                    return Ok(w);
                }
                if let Some(w) = self.dial(peer, dialer).await? {
                    return Ok(w);
                }
                continue;
            }
            tokio::select! {
                () = &mut made => {}
                e = self.mailbox.break_seen() => return Err(e),
                () = tokio::time::sleep_until(deadline) => {
                    return Err(TransportError::SetupTimeout {
                        generation: self.mailbox.generation(),
                        after: dialer.patience(),
                        missing: vec![peer],
                    });
                }
            }
        }
    }

    /// Dials `peer`: its writer, or `None` where `peer` was dialing this
    /// rank at the same time and its link carries the pair.
    async fn dial(
        &self,
        peer: Rank,
        dialer: &dyn Dialer<R, W>,
    ) -> Result<Option<&Mutex<W>>, TransportError> {
        // Counted before the dial: the peer may send on the link (and say
        // goodbye on it) as soon as its side is made.
        self.mailbox.opened(peer);
        let mut abandoned = Abandoned {
            mailbox: &self.mailbox,
            peer,
            armed: true,
        };
        let made = dialer.dial(peer).await;
        abandoned.armed = false;
        match made {
            Ok(link) => {
                self.install(link);
                Ok(self.writer(peer))
            }
            Err(TransportError::Handshake { reason, .. })
                if reason == Refusal::Crossed.reason() =>
            {
                self.mailbox.unopened(peer);
                Ok(None)
            }
            Err(e) => {
                self.mailbox.fail(e.clone());
                Err(e)
            }
        }
    }

    /// Whether to accept `peer`'s proven hello ([`Pairing::on_hello`]);
    /// an accepted one is counted before the link's last word to the
    /// dialer, so that nothing it says on the link can come before.
    pub(crate) fn accepting(&self, peer: Rank) -> Result<(), Refusal> {
        self.pairs().on_hello(peer)?;
        self.mailbox.opened(peer);
        Ok(())
    }

    /// Starts reading a link (dialed, or accepted from its peer) and gives
    /// its writer to sends to its peer (kept for the goodbye only where the
    /// peer has one already).
    pub(crate) fn install(&self, link: Link<R, W>) {
        let peer = link.peer;
        let w = self.reading(link);
        self.place(peer, w);
        self.made(peer);
    }

    /// Starts a link's reader task; its writer is the caller's to place.
    pub(crate) fn reading(&self, link: Link<R, W>) -> Arc<Mutex<W>> {
        let w = Arc::new(Mutex::new(link.write));
        let slot = self.carry.as_ref().map(|_| {
            let generation = self.mailbox.generation();
            Arc::new(Slot::new(w.clone(), link.shared_memory, generation))
        });
        let reader = Reader::with_capacity(READ_BUFFER, link.read);
        self.read_on(link.peer, reader, link.shared_memory, slot);
        w
    }

    /// Starts the reader task of a link to `peer` (with `slot` where it may
    /// park when the peer's generation ends).
    pub(crate) fn read_on(
        &self,
        peer: Rank,
        reader: Reader<R>,
        shared_memory: bool,
        slot: Option<Arc<Slot<W>>>,
    ) {
        if shared_memory {
            let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
            if !shared.contains(&peer) {
                shared.push(peer);
                shared.sort_unstable();
            }
        }
        let max = self.max_frame_bytes;
        let (mailbox, generation) = (self.mailbox.clone(), self.mailbox.generation());
        let task = match (&self.carry, slot) {
            (Some(c), Some(slot)) => {
                self.keep(&slot);
                let park = c.carried.parking(slot, max, c.patience);
                let carried = c.carried.clone();
                carried.reader_started(generation);
                tokio::spawn(async move {
                    let _ended = Ended(carried, generation);
                    read_frames(peer, reader, max, mailbox, Some(park)).await;
                })
            }
            _ => tokio::spawn(read_frames(peer, reader, max, mailbox, None)),
        };
        self.readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }

    pub(crate) fn lock_slots(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Slot<W>>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `slot` among this generation's links (once).
    fn keep(&self, slot: &Arc<Slot<W>>) {
        let mut slots = self.lock_slots();
        if !slots.iter().any(|s| Arc::ptr_eq(s, slot)) {
            slots.push(slot.clone());
        }
    }

    /// Places an eager link's writer (the full mesh's, one per peer).
    pub(crate) fn place(&self, peer: Rank, w: Arc<Mutex<W>>) {
        if let Some(cell) = self.writers.get(peer)
            && let Err(e) = cell.set(w)
        {
            let (SetError::AlreadyInitializedError(w) | SetError::InitializingError(w)) = e;
            self.spare_writers().push(w);
        }
    }

    /// Records a link made outside a dial or an accept (one taken up from
    /// an earlier generation): sends to `peer` may take it.
    pub(crate) fn made(&self, peer: Rank) {
        self.pairs().on_link(peer);
        self.made.notify_waiters();
    }

    fn spare_writers(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Mutex<W>>>> {
        self.spare.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Peers reached through shared memory, in rank order.
    pub(crate) fn shared_memory_peers(&self) -> Vec<Rank> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many links this rank has.
    pub(crate) fn count(&self) -> usize {
        self.readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Every writing half (each peer's link and the spares, for the
    /// goodbye) and the reader tasks (to stop once it is said).
    pub(crate) fn into_parts(self) -> (Vec<W>, Vec<JoinHandle<()>>) {
        let spare = self
            .spare
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let out: Vec<W> = (self.writers.into_iter())
            .filter_map(OnceCell::into_inner)
            .chain(spare)
            .filter_map(|w| Arc::try_unwrap(w).ok())
            .map(Mutex::into_inner)
            .collect();
        let readers = self
            .readers
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (out, readers)
    }

    /// Once the generation breaks by a loss, closes every link this rank
    /// holds (without a goodbye): with connections on demand not every rank
    /// is linked to the one that was lost, and the loss then reaches them
    /// through the links of those that were, as in the full mesh it
    /// reaches every rank directly. A generation its owner ended
    /// ([`TransportError::Ended`]: a reset, the next generation) keeps its
    /// links until the owner shuts the transport down or drops it. A writer
    /// busy in a send is left to it.
    /// Links that park ([`Links::carry`]) are not closed but say that they
    /// leave the generation, which reaches their peers as the close would
    /// (an ended generation's say so when the owner shuts it down).
    pub(crate) async fn close_on_break(self: Arc<Self>) {
        if let TransportError::Ended { .. } = self.mailbox.break_seen().await {
            return;
        }
        match self.carry {
            Some(_) => self.say_carry(false, CLOSE_WITHIN).await,
            None => self.end_writers(None, CLOSE_WITHIN).await,
        }
    }

    /// Says goodbye (`header`) on every link, through the writers' locks,
    /// and stops reading them: for a transport leaving while something else
    /// still holds its links (a carrying pool, an accept task's last
    /// answers).
    pub(crate) async fn goodbye(&self, header: &[u8], within: Duration) {
        self.end_writers(Some(header), within).await;
        self.abort_readers();
    }

    /// Ends every writing half, each within `within`: after the goodbye
    /// `bye`, waiting for a writer busy in a send; or, without one (a
    /// broken generation), skipping a busy writer.
    async fn end_writers(&self, bye: Option<&[u8]>, within: Duration) {
        let spare: Vec<Arc<Mutex<W>>> = std::mem::take(&mut *self.spare_writers());
        for w in self.writers.iter().filter_map(OnceCell::get) {
            let ended = async {
                let mut w = match bye {
                    Some(_) => w.lock().await,
                    None => match w.try_lock() {
                        Ok(w) => w,
                        Err(_) => return,
                    },
                };
                let _ = end_writer(&mut *w, bye).await;
            };
            let _ = tokio::time::timeout(within, ended).await;
        }
        for w in spare {
            let ended = async { end_writer(&mut *w.lock().await, bye).await };
            let _ = tokio::time::timeout(within, ended).await;
        }
    }
}

/// Links that carry on into the next generation (`carry.rs`).
impl<R: ReadHalf, W: WriteHalf> Links<R, W> {
    /// Takes up the link to `peer` parked in an earlier generation, if
    /// its process has one: its writer, or `None` (then dial).
    async fn take_up(&self, peer: Rank, dialer: &dyn Dialer<R, W>) -> Option<&Mutex<W>> {
        let carry = self.carry.as_ref()?;
        let process = dialer.process(peer).await.ok().flatten()?;
        let generation = self.mailbox.generation();
        let slot = carry
            .carried
            .take(process, generation, SETTLE_WITHIN)
            .await?;
        if self.claim(&slot, peer).await {
            self.writer(peer)
        } else {
            None
        }
    }

    /// Claims `slot` as this generation's link to `peer` (once, whoever
    /// asks first: a send, or the peer's rehello): whether it is this
    /// generation's now. A link that cannot be claimed is closed.
    async fn claim(&self, slot: &Arc<Slot<W>>, peer: Rank) -> bool {
        let Some(carry) = &self.carry else {
            return false;
        };
        let at = (self.mailbox.generation(), peer);
        let me = carry.carried.me();
        match slot.claim(at, self.rank, me, carry.patience).await {
            Ok(false) => slot.claimed() == Some(at),
            Ok(true) => {
                self.keep(slot);
                self.place(peer, slot.writer.clone());
                carry.carried.count_carried();
                self.made(peer);
                true
            }
            Err(e) => {
                tracing::debug!(peer, %e, "a parked data-plane link could not be taken up");
                slot.close();
                false
            }
        }
    }

    /// Reads on a parked link whose peer said it is `peer` of this
    /// generation, and claims it for this side's sends to `peer`.
    pub(crate) async fn adopt(&self, slot: Arc<Slot<W>>, peer: Rank, reader: Reader<R>) {
        if peer >= self.size() || peer == self.rank {
            slot.close();
            return;
        }
        self.mailbox.opened(peer);
        self.read_on(peer, reader, slot.shared_memory, Some(slot.clone()));
        if !self.claim(&slot, peer).await {
            self.mailbox.peer_lost(peer, LossCause::Closed);
        }
    }

    /// Says on every link that it leaves this generation: through a busy
    /// writer too if `wait`, else past it.
    pub(crate) async fn say_carry(&self, wait: bool, within: Duration) {
        let Some(carry) = &self.carry else { return };
        let slots: Vec<Arc<Slot<W>>> = self.lock_slots().clone();
        for slot in slots {
            let said = async {
                let mut w = match wait {
                    true => slot.writer.lock().await,
                    false => match slot.writer.try_lock() {
                        Ok(w) => w,
                        Err(_) => return,
                    },
                };
                let me = carry.carried.me();
                let _ = slot.say_carry(&mut *w, me, self.mailbox.generation()).await;
            };
            let _ = tokio::time::timeout(within, said).await;
        }
    }

    /// A frame to `peer` was left half-written: its link cannot carry on.
    pub(crate) fn poison(&self, peer: Rank) {
        let Some(w) = self.writers.get(peer).and_then(OnceCell::get) else {
            return;
        };
        let slots = self.lock_slots();
        if let Some(slot) = slots.iter().find(|s| Arc::ptr_eq(&s.writer, w)) {
            slot.poison();
        }
    }
}

/// Ends `w`: after the goodbye `bye` if there is one.
async fn end_writer<W: WriteHalf>(w: &mut W, bye: Option<&[u8]>) -> std::io::Result<()> {
    match bye {
        Some(header) => super::say_goodbye(w, header).await,
        None => w.shutdown().await,
    }
}

/// How long a send waits for the links of earlier generations to park
/// before it dials a peer whose link has not.
const SETTLE_WITHIN: Duration = Duration::from_millis(500);

/// Counts a parking reader's end, however it ends (aborted too).
struct Ended<R: ReadHalf, W: WriteHalf>(Arc<Carried<R, W>>, crate::tag::Generation);

impl<R: ReadHalf, W: WriteHalf> Drop for Ended<R, W> {
    fn drop(&mut self) {
        self.0.reader_ended(self.1);
    }
}

/// How long closing one link of a broken generation may take.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

impl<R, W> Links<R, W> {
    /// Where this transport's links park, if they do.
    pub(crate) fn carry(&self) -> Option<&CarryTo<R, W>> {
        self.carry.as_ref()
    }

    /// Stops every reader task: the links close without a goodbye.
    pub(crate) fn abort_readers(&self) {
        for r in self
            .readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            r.abort();
        }
    }
}

/// Breaks the generation if a dial is abandoned half-way (its send's future
/// dropped): the link's count would otherwise never come back down.
struct Abandoned<'a, R> {
    mailbox: &'a StreamMailbox<R>,
    peer: Rank,
    armed: bool,
}

impl<R> Drop for Abandoned<'_, R> {
    fn drop(&mut self) {
        if self.armed {
            self.mailbox.peer_lost(self.peer, LossCause::AbandonedSend);
        }
    }
}
