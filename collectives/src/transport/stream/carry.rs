//! Links that outlive their generation: when a generation ends, a rank
//! keeps each on-demand link (its connection, and the pair's shared memory)
//! instead of closing it, and the next generation takes it up again where
//! both ends are in it, so that a reset reconnects only what changed.
//!
//! ```text
//!  generation g ends ──> carry frame (g, my process) on each link's writer;
//!                        the peer's reader of g breaks g and parks the link
//!  parked ──limbo reads──> rehello (g', the sender's rank, its process)
//!  g' send to rank r whose process holds a parked link ──> claim it: carry
//!    frame if not said yet, rehello (g', my rank), then g' frames
//!  rehello heard ──> adopt: read on into g' as that rank (and claim it
//!    back, answering with a rehello of our own)
//! ```
//! Every frame on a link is written whole under its writer's lock, so the
//! peer reads g's frames, the carry frame, the rehello and g''s frames in
//! that order. A link goes on only into the generation right after the
//! one it left (a number both ends know alike); parked and not taken up
//! then, it is closed when a later one starts, at both ends; a link whose
//! frame was left half-written, or whose peer is gone, is closed at once,
//! and the peer's end sees it end. Both ends decide alike, from what the link said.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex, PoisonError, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, Notify};

use super::links::Links;
use super::{Header, ReadHalf, Reader, WriteHalf, frame, goodbye};
use crate::error::LossCause;
use crate::tag::{Generation, Rank, Tag};

/// The step of the carry frame's tag (op id `u64::MAX`, as the goodbye's).
const CARRY_STEP: u32 = u32::MAX - 1;
/// The step of the rehello frame's tag.
const REHELLO_STEP: u32 = u32::MAX - 2;
/// How long closing a parked link's writer may take.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

/// The carry frame's tag: the link leaves `generation`.
pub(crate) fn carry_tag(generation: Generation) -> Tag {
    Tag::new(generation, u64::MAX, CARRY_STEP)
}

fn rehello_tag(generation: Generation) -> Tag {
    Tag::new(generation, u64::MAX, REHELLO_STEP)
}

/// Writes one whole frame of `payload` and flushes it.
async fn write_whole<W: AsyncWrite + Unpin>(
    w: &mut W,
    tag: Tag,
    payload: &[u8],
) -> std::io::Result<()> {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut bytes = frame::encode_header(tag, len).to_vec();
    bytes.extend_from_slice(payload);
    w.write_all(&bytes).await?;
    w.flush().await
}

/// A link's state between generations, as its writer's end sees it.
#[derive(Debug)]
struct SlotState {
    /// The generation the link serves (or last served).
    generation: Generation,
    /// The carry frame of `generation` is written.
    said: bool,
    /// A frame was left half-written: the link cannot go on.
    poisoned: bool,
    /// The generation whose links took this one up, and the peer's rank there.
    claimed: Option<(Generation, Rank)>,
    /// The generation the link left, once the peer's carry frame was read.
    parked_in: Option<Generation>,
}

/// One link that may carry into the next generation: its writer (shared
/// with the links of the generation that holds it) and its state.
#[derive(Debug)]
pub(crate) struct Slot<W> {
    pub(crate) writer: Arc<Mutex<W>>,
    pub(crate) shared_memory: bool,
    state: SyncMutex<SlotState>,
    /// Told when the link is closed: its limbo stops reading.
    closed: Notify,
}

impl<W: WriteHalf> Slot<W> {
    pub(crate) fn new(writer: Arc<Mutex<W>>, shared_memory: bool, generation: Generation) -> Self {
        Self {
            writer,
            shared_memory,
            closed: Notify::new(),
            state: SyncMutex::new(SlotState {
                generation,
                said: false,
                poisoned: false,
                claimed: None,
                parked_in: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the link may go on in `generation`: only in the one right
    /// after the generation it left, which both ends know alike (a process
    /// that sat a generation out does not take up what its peers closed).
    pub(crate) fn takes_up(&self, generation: Generation) -> bool {
        self.state()
            .parked_in
            .is_some_and(|g| g.0.checked_add(1) == Some(generation.0))
    }

    /// A send left a frame half-written on this link.
    pub(crate) fn poison(&self) {
        self.state().poisoned = true;
    }

    /// The generation that took the link up, and the peer's rank there.
    pub(crate) fn claimed(&self) -> Option<(Generation, Rank)> {
        self.state().claimed
    }

    /// Says, through the locked writer `w`, that the link leaves
    /// `generation` (once; nothing once the link serves a later one, or
    /// on a poisoned link).
    pub(crate) async fn say_carry(
        &self,
        w: &mut W,
        me: u64,
        generation: Generation,
    ) -> std::io::Result<()> {
        let (now, said, poisoned) = {
            let st = self.state();
            (st.generation, st.said, st.poisoned)
        };
        if poisoned {
            return Err(std::io::Error::other("a frame was left half-written"));
        }
        if now == generation && !said {
            write_whole(w, carry_tag(generation), &me.to_le_bytes()).await?;
            self.state().said = true;
        }
        Ok(())
    }

    /// Takes the link up into `generation` as this side's link to `peer`:
    /// the carry frame if it is not said yet, then a rehello naming `rank`
    /// (this side's rank there) and `me` (its process). `Ok(false)`: the
    /// link was claimed into `generation` already.
    pub(crate) async fn claim(
        &self,
        (generation, peer): (Generation, Rank),
        rank: Rank,
        me: u64,
        within: Duration,
    ) -> std::io::Result<bool> {
        let claim = async {
            let mut w = self.writer.lock().await;
            let left = {
                let st = self.state();
                if st.claimed.is_some_and(|(g, _)| g == generation) {
                    return Ok(false);
                }
                st.generation
            };
            self.say_carry(&mut *w, me, left).await?;
            let mut hello = [0u8; 16];
            hello[..8].copy_from_slice(&(rank as u64).to_le_bytes());
            hello[8..].copy_from_slice(&me.to_le_bytes());
            write_whole(&mut *w, rehello_tag(generation), &hello).await?;
            let mut st = self.state();
            st.claimed = Some((generation, peer));
            (st.generation, st.said) = (generation, false);
            Ok(true)
        };
        tokio::time::timeout(within, claim)
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
    }

    /// Ends the link's writing half (the peer's end sees the link end),
    /// and its reading in limbo.
    pub(crate) fn close(self: &Arc<Self>) {
        self.closed.notify_one();
        let writer = self.writer.clone();
        tokio::spawn(async move {
            let end = async { writer.lock().await.shutdown().await };
            let _ = tokio::time::timeout(CLOSE_WITHIN, end).await;
        });
    }
}

/// What a reader hands over when its peer's carry frame ends its
/// generation: the reader, where the frames left off, and the peer's
/// process.
pub(crate) type Park<R> = Box<dyn FnOnce(Reader<R>, u64) + Send>;

/// The parked links of one process and the generation that may take them
/// up, shared by its generations.
#[derive(Debug)]
pub(crate) struct Carried<R, W> {
    /// This process ([`control::DataEndpoint::Process`]).
    me: u64,
    pool: SyncMutex<Pool<R, W>>,
    /// Woken when a generation registers.
    entered: Notify,
    /// Links taken up into a later generation, counted at this end.
    carried: AtomicU64,
    /// Woken when a link parks or its reader ends.
    settled: Notify,
}

#[derive(Debug)]
struct Pool<R, W> {
    /// Parked links by the peer's process, not yet claimed.
    parked: HashMap<u64, Arc<Slot<W>>>,
    /// The generation whose links take parked ones up.
    current: Option<(Generation, Weak<Links<R, W>>)>,
    /// Links still read by their generation's reader, by generation.
    reading: std::collections::BTreeMap<Generation, usize>,
}

impl<R, W> Carried<R, W> {
    pub(crate) fn new(me: u64) -> Self {
        Self {
            me,
            pool: SyncMutex::new(Pool {
                parked: HashMap::new(),
                current: None,
                reading: std::collections::BTreeMap::new(),
            }),
            entered: Notify::new(),
            carried: AtomicU64::new(0),
            settled: Notify::new(),
        }
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool<R, W>> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This process.
    pub(crate) fn me(&self) -> u64 {
        self.me
    }

    /// Links taken up into a later generation so far, at this end.
    pub(crate) fn carried(&self) -> u64 {
        self.carried.load(Ordering::Relaxed)
    }

    pub(crate) fn count_carried(&self) {
        self.carried.fetch_add(1, Ordering::Relaxed);
    }

    /// A reader of a link of `generation` started.
    pub(crate) fn reader_started(&self, generation: Generation) {
        *self.pool().reading.entry(generation).or_default() += 1;
    }

    /// A reader of a link of `generation` ended (its link parked, or lost).
    pub(crate) fn reader_ended(&self, generation: Generation) {
        {
            let mut pool = self.pool();
            if let Some(n) = pool.reading.get_mut(&generation) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    pool.reading.remove(&generation);
                }
            }
        }
        self.settled.notify_waiters();
    }

    /// `generation` is over: nothing more is taken up into it.
    pub(crate) fn leave(&self, generation: Generation) {
        let mut pool = self.pool();
        if pool.current.as_ref().is_some_and(|(g, _)| *g == generation) {
            pool.current = None;
        }
    }
}

impl<R: ReadHalf, W: WriteHalf> Carried<R, W> {
    /// `links` serve `generation` from now on: links parked by the one
    /// before are taken up into it; those parked earlier, which can never
    /// be ([`Slot::takes_up`]), are closed.
    pub(crate) fn enter(&self, generation: Generation, links: &Arc<Links<R, W>>) {
        let stale: Vec<Arc<Slot<W>>> = {
            let mut pool = self.pool();
            pool.current = Some((generation, Arc::downgrade(links)));
            let old: Vec<u64> = (pool.parked.iter())
                .filter(|(_, s)| !s.takes_up(generation))
                .map(|(k, _)| *k)
                .collect();
            old.iter().filter_map(|k| pool.parked.remove(k)).collect()
        };
        stale.iter().for_each(Slot::close);
        self.entered.notify_waiters();
    }

    /// The parked link to process `peer`, taken out for a claim by
    /// `generation`: waiting (up to `within`) while links of earlier
    /// generations are still read there, one of them perhaps `peer`'s
    /// whose carry frame is on its way.
    pub(crate) async fn take(
        &self,
        peer: u64,
        generation: Generation,
        within: Duration,
    ) -> Option<Arc<Slot<W>>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            {
                let mut pool = self.pool();
                if let Some(slot) = pool.parked.remove(&peer) {
                    if slot.takes_up(generation) {
                        return Some(slot);
                    }
                    // Parked too long ago: the peer closes it too.
                    slot.close();
                    return None;
                }
                // Nothing of an earlier generation is still read.
                pool.reading.range(..generation).next()?;
            }
            tokio::time::timeout_at(deadline, settled).await.ok()?;
        }
    }

    fn forget(&self, peer: u64, slot: &Arc<Slot<W>>) {
        let mut pool = self.pool();
        if pool.parked.get(&peer).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            pool.parked.remove(&peer);
        }
    }

    /// The hand-over for a link's reader: when the peer's carry frame ends
    /// `generation`, the link parks under the peer's process and waits in
    /// limbo for a rehello.
    pub(crate) fn parking(
        self: &Arc<Self>,
        slot: Arc<Slot<W>>,
        max_frame: u32,
        patience: Duration,
    ) -> Park<R> {
        let carried = self.clone();
        Box::new(move |reader, peer| {
            let parked_in = {
                let mut st = slot.state();
                st.parked_in = Some(st.generation);
                st.generation
            };
            let replaced = carried.pool().parked.insert(peer, slot.clone());
            if let Some(old) = replaced.filter(|old| !Arc::ptr_eq(old, &slot)) {
                old.close();
            }
            let limbo = carried.limbo(peer, slot, reader, (parked_in, max_frame, patience));
            tokio::spawn(limbo);
        })
    }

    /// Reads a parked link until the peer's rehello, then hands it to the
    /// generation it names; a link that ends, or says anything else, or
    /// whose generation does not come within `patience`, is closed.
    async fn limbo(
        self: Arc<Self>,
        peer: u64,
        slot: Arc<Slot<W>>,
        mut reader: Reader<R>,
        (parked_in, max_frame, patience): (Generation, u32, Duration),
    ) {
        let heard = tokio::select! {
            heard = hear_rehello(&mut reader, peer, parked_in, max_frame) => heard,
            () = slot.closed.notified() => Err(LossCause::Shutdown),
        };
        let links = match heard {
            Ok((generation, rank)) if slot.takes_up(generation) => {
                self.links_of(generation, patience).await.map(|l| (l, rank))
            }
            Ok((generation, _)) => {
                tracing::debug!(peer, %generation, "a rehello for a generation the link may not go on to");
                None
            }
            Err(cause) => {
                tracing::debug!(peer, %cause, "a parked data-plane link ended");
                None
            }
        };
        self.forget(peer, &slot);
        match links {
            Some((links, rank)) => links.adopt(slot, rank, reader).await,
            None => slot.close(),
        }
    }

    /// The links of `generation`, once it is registered (within `patience`).
    async fn links_of(
        &self,
        generation: Generation,
        patience: Duration,
    ) -> Option<Arc<Links<R, W>>> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let entered = self.entered.notified();
            tokio::pin!(entered);
            entered.as_mut().enable();
            match &self.pool().current {
                Some((g, links)) if *g == generation => return links.upgrade(),
                Some((g, _)) if *g > generation => return None,
                _ => {}
            }
            if tokio::time::timeout_at(deadline, entered).await.is_err() {
                return None;
            }
        }
    }
}

/// Reads a parked link up to the peer's rehello: `(its generation, the
/// peer's rank there)`. Frames of the generations before (a send that
/// raced the carry frame) are skipped.
async fn hear_rehello<R: ReadHalf>(
    r: &mut Reader<R>,
    peer: u64,
    parked_in: Generation,
    max_frame: u32,
) -> Result<(Generation, Rank), LossCause> {
    loop {
        let (tag, len) = match super::read_header(r, max_frame, goodbye(parked_in)).await? {
            Header::End => return Err(LossCause::Closed),
            // The last generation's own goodbye or carry frame.
            Header::Goodbye | Header::Carry(_) => continue,
            Header::Frame { tag, len } => (tag, len as u64),
        };
        if tag.generation <= parked_in {
            let skipped = tokio::io::copy(&mut (&mut *r).take(len), &mut tokio::io::sink()).await;
            if skipped.map_err(super::io_cause)? != len {
                return Err(LossCause::Malformed("a carried link ended inside a frame"));
            }
            continue;
        }
        if tag != rehello_tag(tag.generation) || len != 16 {
            return Err(LossCause::Malformed(
                "a carried link's first frame is no rehello",
            ));
        }
        let mut hello = [0u8; 16];
        r.read_exact(&mut hello).await.map_err(super::io_cause)?;
        let word = |i: usize| u64::from_le_bytes(hello[i..i + 8].try_into().unwrap_or_default());
        if word(8) != peer {
            return Err(LossCause::Malformed("a rehello from another process"));
        }
        let rank = usize::try_from(word(0))
            .map_err(|_| LossCause::Malformed("a rehello's rank is out of range"))?;
        return Ok((tag.generation, rank));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: Tag, payload: &[u8]) -> Vec<u8> {
        let mut v = frame::encode_header(tag, payload.len() as u32).to_vec();
        v.extend_from_slice(payload);
        v
    }

    fn rehello(g: u64, rank: u64, process: u64) -> Vec<u8> {
        let mut p = rank.to_le_bytes().to_vec();
        p.extend_from_slice(&process.to_le_bytes());
        frame(rehello_tag(Generation(g)), &p)
    }

    fn hear(bytes: Vec<u8>) -> Result<(Generation, Rank), LossCause> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut r = Reader::new(std::io::Cursor::new(bytes));
        rt.block_on(hear_rehello(&mut r, 7, Generation(4), 1 << 20))
    }

    #[test]
    fn a_rehello_after_stale_frames_names_the_generation_and_rank() {
        let mut bytes = frame(Tag::new(Generation(4), 3, 0), &[9; 100]);
        bytes.extend(frame(Tag::new(Generation(2), 1, 1), &[]));
        bytes.extend(rehello(6, 12, 7));
        assert_eq!(hear(bytes), Ok((Generation(6), 12)));
    }

    #[test]
    fn anything_else_on_a_parked_link_ends_it() {
        let malformed =
            |r: Result<(Generation, Rank), LossCause>| matches!(r, Err(LossCause::Malformed(_)));
        assert_eq!(hear(Vec::new()), Err(LossCause::Closed));
        assert!(malformed(hear(rehello(6, 12, 8))), "another process");
        assert!(
            malformed(hear(frame(Tag::new(Generation(5), 1, 0), &[1; 16]))),
            "a later frame"
        );
        assert!(
            malformed(hear(frame(rehello_tag(Generation(5)), &[1; 8]))),
            "a short rehello"
        );
        let mut cut = frame(Tag::new(Generation(3), 3, 0), &[9; 100]);
        cut.truncate(60);
        assert!(hear(cut).is_err(), "a stale frame cut short");
        let huge = frame::encode_header(Tag::new(Generation(3), 3, 0), u32::MAX).to_vec();
        assert!(matches!(hear(huge), Err(LossCause::FrameTooLarge { .. })));
    }
}
