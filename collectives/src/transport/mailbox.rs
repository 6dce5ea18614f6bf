//! Tag matching for incoming messages, shared by every transport.
//!
//! Drivers call [`Mailbox::deliver`] for each message that arrives,
//! [`Mailbox::depart`] when a peer leaves cleanly and [`Mailbox::fail`] when one is
//! lost; [`Mailbox::recv`] hands messages to callers in order per (source, tag).
//! A caller may instead wait with [`Mailbox::recv_direct`]: a driver that sees that
//! message arrive can then [`Mailbox::claim_direct`] the waiter and hand it a `D`
//! (for TCP: the connection itself, so the payload is read straight into the
//! caller's buffer).
//!
//! A message that arrived before a failure or departure is still handed out: only
//! waits for messages that can no longer come fail. A failure fails every wait (the
//! generation is over); a clean departure fails only waits on the departed rank.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, oneshot};

use crate::error::{LossCause, TransportError};
use crate::tag::{Generation, Rank, Tag};

/// What a direct waiter gets: the whole message, or the driver's handle to it.
#[derive(Debug)]
pub(crate) enum Delivery<D> {
    Whole(Bytes),
    Direct(D),
}

pub(crate) type DirectSender<D> = oneshot::Sender<Result<Delivery<D>, TransportError>>;

enum Waiter<D> {
    Whole(oneshot::Sender<Result<Bytes, TransportError>>),
    Direct(DirectSender<D>),
}

impl<D> Waiter<D> {
    fn fail(self, err: TransportError) {
        match self {
            Waiter::Whole(tx) => drop(tx.send(Err(err))),
            Waiter::Direct(tx) => drop(tx.send(Err(err))),
        }
    }

    /// Hands over `payload`; gives it back if this waiter has gone away.
    fn offer(self, payload: Bytes) -> Option<Bytes> {
        match self {
            Waiter::Whole(tx) => tx.send(Ok(payload)).err().and_then(Result::ok),
            Waiter::Direct(tx) => match tx.send(Ok(Delivery::Whole(payload))) {
                Err(Ok(Delivery::Whole(p))) => Some(p),
                _ => None,
            },
        }
    }
}

enum Slot<D> {
    Queued(VecDeque<Bytes>),
    Waiting(VecDeque<Waiter<D>>),
}

struct State<D> {
    slots: HashMap<(Rank, Tag), Slot<D>>,
    broken: Option<TransportError>,
    departed: HashSet<Rank>,
    /// Streams open from each peer (connections on demand may make two per
    /// pair): a peer departs once every one of them said goodbye.
    streams: HashMap<Rank, u32>,
}

pub(crate) struct Mailbox<D = Infallible> {
    generation: Generation,
    state: Mutex<State<D>>,
    stale: AtomicU64,
    /// Woken when a message is queued, a peer departs or the generation breaks.
    news: Notify,
}

impl<D> std::fmt::Debug for Mailbox<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("generation", &self.generation)
            .field("stale", &self.stale)
            .finish_non_exhaustive()
    }
}

impl<D> Mailbox<D> {
    pub(crate) fn new(generation: Generation) -> Self {
        Self {
            generation,
            state: Mutex::new(State {
                slots: HashMap::new(),
                broken: None,
                departed: HashSet::new(),
                streams: HashMap::new(),
            }),
            stale: AtomicU64::new(0),
            news: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<D>> {
        // A poisoned lock only means another thread panicked while holding it; the
        // map itself is always left consistent, so keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn generation(&self) -> Generation {
        self.generation
    }

    pub(crate) fn stale_refused(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// The error that broke this generation, if any.
    pub(crate) fn broken(&self) -> Option<TransportError> {
        self.lock().broken.clone()
    }

    /// Hands an arrived message to its waiter or queues it. Messages of another
    /// generation are refused (older ones counted in [`Mailbox::stale_refused`]).
    pub(crate) fn deliver(&self, from: Rank, tag: Tag, payload: Bytes) {
        if tag.generation != self.generation {
            if tag.generation < self.generation {
                self.stale.fetch_add(1, Ordering::Relaxed);
            }
            tracing::debug!(from, %tag, current = %self.generation, "refused message of another generation");
            return;
        }
        let mut st = self.lock();
        if st.broken.is_some() {
            return;
        }
        let key = (from, tag);
        let mut payload = payload;
        if let Some(Slot::Waiting(ws)) = st.slots.get_mut(&key) {
            while let Some(w) = ws.pop_front() {
                match w.offer(payload) {
                    None => {
                        if ws.is_empty() {
                            st.slots.remove(&key);
                        }
                        return;
                    }
                    // That receiver gave up (its future was dropped): try the next.
                    Some(back) => payload = back,
                }
            }
            st.slots.remove(&key);
        }
        match st.slots.entry(key) {
            Entry::Occupied(mut o) => {
                if let Slot::Queued(q) = o.get_mut() {
                    q.push_back(payload);
                }
            }
            Entry::Vacant(v) => {
                v.insert(Slot::Queued(VecDeque::from([payload])));
            }
        }
        drop(st);
        self.news.notify_waiters();
    }

    /// Resolves once a message of an operation numbered in `ops` is queued
    /// here (arrived, not yet received), a peer has departed, or the
    /// generation is broken: something a receive would now find at once.
    pub(crate) async fn arrival(&self, ops: Range<u64>) {
        loop {
            let news = self.news.notified();
            tokio::pin!(news);
            news.as_mut().enable();
            if self.has_news(&ops) {
                return;
            }
            news.await;
        }
    }

    /// Resolves once the generation is broken, with what broke it.
    pub(crate) async fn break_seen(&self) -> TransportError {
        loop {
            let news = self.news.notified();
            tokio::pin!(news);
            news.as_mut().enable();
            if let Some(e) = self.lock().broken.clone() {
                return e;
            }
            news.await;
        }
    }

    fn has_news(&self, ops: &Range<u64>) -> bool {
        let st = self.lock();
        st.broken.is_some()
            || !st.departed.is_empty()
            || st
                .slots
                .iter()
                .any(|((_, tag), slot)| matches!(slot, Slot::Queued(_)) && ops.contains(&tag.op_id))
    }

    /// Takes the first waiter for (`from`, `tag`) if it asked for direct delivery.
    /// Whether anyone waits for the next message from `from` with `tag`.
    pub(crate) fn awaited(&self, from: Rank, tag: Tag) -> bool {
        matches!(self.lock().slots.get(&(from, tag)), Some(Slot::Waiting(ws)) if !ws.is_empty())
    }

    pub(crate) fn claim_direct(&self, from: Rank, tag: Tag) -> Option<DirectSender<D>> {
        let mut st = self.lock();
        let key = (from, tag);
        let Some(Slot::Waiting(ws)) = st.slots.get_mut(&key) else {
            return None;
        };
        // Drop waiters that gave up; stop at the first live one.
        while let Some(Waiter::Direct(tx)) = ws.front() {
            if !tx.is_closed() {
                break;
            }
            ws.pop_front();
        }
        let claimed = match ws.front() {
            Some(Waiter::Direct(_)) => match ws.pop_front() {
                Some(Waiter::Direct(tx)) => Some(tx),
                _ => None,
            },
            _ => None,
        };
        if ws.is_empty() {
            st.slots.remove(&key);
        }
        claimed
    }

    /// Breaks the generation: every waiter and every later call gets `err`.
    pub(crate) fn fail(&self, err: TransportError) {
        let mut st = self.lock();
        if st.broken.is_some() {
            return;
        }
        tracing::debug!(%err, "data plane broken");
        st.slots.retain(|_, slot| match slot {
            Slot::Queued(_) => true,
            Slot::Waiting(ws) => {
                ws.drain(..).for_each(|w| w.fail(err.clone()));
                false
            }
        });
        st.broken = Some(err);
        drop(st);
        self.news.notify_waiters();
    }

    /// `rank` left cleanly: what it sent stays receivable, waits for more from it fail.
    pub(crate) fn depart(&self, rank: Rank) {
        let err = TransportError::PeerLost {
            rank,
            generation: self.generation,
            cause: LossCause::Departed,
        };
        let mut st = self.lock();
        st.departed.insert(rank);
        st.slots.retain(|(from, _), slot| match slot {
            Slot::Waiting(ws) if *from == rank => {
                ws.drain(..).for_each(|w| w.fail(err.clone()));
                false
            }
            _ => true,
        });
        drop(st);
        self.news.notify_waiters();
    }

    /// A stream from `rank` was opened (before anything can be said on it).
    pub(crate) fn opened(&self, rank: Rank) {
        *self.lock().streams.entry(rank).or_insert(0) += 1;
    }

    /// A stream from `rank` counted by [`Mailbox::opened`] was never made.
    pub(crate) fn unopened(&self, rank: Rank) {
        if let Some(n) = self.lock().streams.get_mut(&rank) {
            *n = n.saturating_sub(1);
        }
    }

    /// A stream from `rank` ended after its goodbye: `rank` departs
    /// ([`Mailbox::depart`]) once none of its streams is left open.
    pub(crate) fn closed_cleanly(&self, rank: Rank) {
        let left = {
            let mut st = self.lock();
            let n = st.streams.entry(rank).or_insert(1);
            *n = n.saturating_sub(1);
            *n
        };
        if left == 0 {
            self.depart(rank);
        }
    }

    pub(crate) fn peer_lost(&self, rank: Rank, cause: LossCause) {
        self.fail(TransportError::PeerLost {
            rank,
            generation: self.generation,
            cause,
        });
    }

    /// Waits up to `timeout` for the next message from `from` with `tag`. A timeout
    /// breaks the generation.
    pub(crate) async fn recv(
        &self,
        from: Rank,
        tag: Tag,
        timeout: Duration,
    ) -> Result<Bytes, TransportError> {
        self.wait(from, tag, timeout, Waiter::Whole, |b| b).await
    }

    /// Like [`Mailbox::recv`], but a driver may hand over the message in place.
    pub(crate) async fn recv_direct(
        &self,
        from: Rank,
        tag: Tag,
        timeout: Duration,
    ) -> Result<Delivery<D>, TransportError> {
        self.wait(from, tag, timeout, Waiter::Direct, Delivery::Whole)
            .await
    }

    async fn wait<T>(
        &self,
        from: Rank,
        tag: Tag,
        timeout: Duration,
        waiter: fn(oneshot::Sender<Result<T, TransportError>>) -> Waiter<D>,
        queued: fn(Bytes) -> T,
    ) -> Result<T, TransportError> {
        let rx = {
            let mut st = self.lock();
            let has_queued = matches!(st.slots.get(&(from, tag)), Some(Slot::Queued(_)));
            if !has_queued {
                if let Some(e) = &st.broken {
                    return Err(e.clone());
                }
                if st.departed.contains(&from) {
                    return Err(TransportError::PeerLost {
                        rank: from,
                        generation: self.generation,
                        cause: LossCause::Departed,
                    });
                }
            }
            let (tx, rx) = oneshot::channel();
            match st.slots.entry((from, tag)) {
                // Queues are removed as soon as they empty, so a queue has a message.
                Entry::Occupied(mut o) => match o.get_mut() {
                    Slot::Queued(q) => {
                        let p = q.pop_front();
                        if q.is_empty() {
                            o.remove();
                        }
                        if let Some(p) = p {
                            return Ok(queued(p));
                        }
                    }
                    Slot::Waiting(ws) => ws.push_back(waiter(tx)),
                },
                Entry::Vacant(v) => {
                    v.insert(Slot::Waiting(VecDeque::from([waiter(tx)])));
                }
            }
            rx
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            // Senders are only dropped after sending, except when the mailbox goes.
            Ok(Err(_)) => Err(self.broken().unwrap_or(TransportError::PeerLost {
                rank: from,
                generation: self.generation,
                cause: LossCause::Shutdown,
            })),
            Err(_) => {
                let err = TransportError::Timeout {
                    rank: from,
                    tag,
                    after: timeout,
                };
                self.fail(err.clone());
                Err(self.broken().unwrap_or(err))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    fn tag(g: u64, step: u32) -> Tag {
        Tag::new(Generation(g), 1, step)
    }

    #[tokio::test]
    async fn queued_messages_keep_order_per_tag() {
        let m = Mailbox::<Infallible>::new(Generation(3));
        m.deliver(1, tag(3, 0), Bytes::from_static(b"a"));
        m.deliver(1, tag(3, 0), Bytes::from_static(b"b"));
        m.deliver(1, tag(3, 1), Bytes::from_static(b"c"));
        assert_eq!(m.recv(1, tag(3, 1), T).await.unwrap(), "c");
        assert_eq!(m.recv(1, tag(3, 0), T).await.unwrap(), "a");
        assert_eq!(m.recv(1, tag(3, 0), T).await.unwrap(), "b");
    }

    #[tokio::test]
    async fn arrival_tells_of_queued_messages_of_its_ops_and_of_a_break() {
        use futures::FutureExt;
        let m = std::sync::Arc::new(Mailbox::<Infallible>::new(Generation(4)));
        let ops = 1..2;
        assert!(m.arrival(ops.clone()).now_or_never().is_none(), "empty");
        m.deliver(0, Tag::new(Generation(4), 9, 0), Bytes::from_static(b"o"));
        assert!(
            m.arrival(ops.clone()).now_or_never().is_none(),
            "a message of another operation"
        );
        let m2 = m.clone();
        let woken = tokio::spawn(async move { m2.arrival(1..2).await });
        tokio::task::yield_now().await;
        m.deliver(1, tag(4, 0), Bytes::from_static(b"x"));
        tokio::time::timeout(T, woken)
            .await
            .expect("a delivery wakes a waiting arrival")
            .unwrap();
        assert_eq!(m.recv(1, tag(4, 0), T).await.unwrap(), "x");
        assert!(
            m.arrival(ops.clone()).now_or_never().is_none(),
            "a received message is no news"
        );
        m.peer_lost(2, LossCause::Closed);
        assert!(m.arrival(ops).now_or_never().is_some(), "a break is news");
    }

    #[tokio::test]
    async fn waiter_gets_a_later_delivery() {
        let m = std::sync::Arc::new(Mailbox::<Infallible>::new(Generation(0)));
        let m2 = m.clone();
        let h = tokio::spawn(async move { m2.recv(2, tag(0, 5), T).await });
        tokio::task::yield_now().await;
        m.deliver(2, tag(0, 5), Bytes::from_static(b"x"));
        assert_eq!(h.await.unwrap().unwrap(), "x");
    }

    #[tokio::test]
    async fn older_generation_is_refused_and_counted() {
        let m = Mailbox::<Infallible>::new(Generation(2));
        m.deliver(0, tag(1, 0), Bytes::from_static(b"old"));
        m.deliver(0, tag(2, 0), Bytes::from_static(b"new"));
        assert_eq!(m.stale_refused(), 1);
        assert_eq!(m.recv(0, tag(2, 0), T).await.unwrap(), "new");
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_breaks_the_generation() {
        let m = Mailbox::<Infallible>::new(Generation(0));
        let err = m.recv(1, tag(0, 0), Duration::from_millis(50)).await;
        assert!(
            matches!(err, Err(TransportError::Timeout { rank: 1, .. })),
            "{err:?}"
        );
        let later = m.recv(0, tag(0, 1), T).await;
        assert!(
            matches!(later, Err(TransportError::Timeout { .. })),
            "{later:?}"
        );
    }

    #[tokio::test]
    async fn peer_loss_wakes_every_waiter() {
        let m = std::sync::Arc::new(Mailbox::<Infallible>::new(Generation(7)));
        let hs: Vec<_> = (0..3)
            .map(|i| {
                let m = m.clone();
                tokio::spawn(async move { m.recv(i, tag(7, 0), T).await })
            })
            .collect();
        tokio::task::yield_now().await;
        m.peer_lost(2, LossCause::Closed);
        for h in hs {
            let e = h.await.unwrap().unwrap_err();
            assert!(
                matches!(
                    e,
                    TransportError::PeerLost {
                        rank: 2,
                        generation: Generation(7),
                        ..
                    }
                ),
                "{e:?}"
            );
        }
    }

    #[tokio::test]
    async fn messages_that_arrived_before_a_failure_are_still_received() {
        let m = Mailbox::<Infallible>::new(Generation(0));
        m.deliver(1, tag(0, 0), Bytes::from_static(b"early"));
        m.peer_lost(1, LossCause::Closed);
        assert_eq!(m.recv(1, tag(0, 0), T).await.unwrap(), "early");
        assert!(m.recv(1, tag(0, 1), T).await.is_err());
        assert!(m.recv(2, tag(0, 1), T).await.is_err());
    }

    #[tokio::test]
    async fn departure_fails_only_waits_on_the_departed_rank() {
        let m = std::sync::Arc::new(Mailbox::<Infallible>::new(Generation(0)));
        m.deliver(1, tag(0, 0), Bytes::from_static(b"last words"));
        let m2 = m.clone();
        let on_one = tokio::spawn(async move { m2.recv(1, tag(0, 1), T).await });
        tokio::task::yield_now().await;
        m.depart(1);
        let e = on_one.await.unwrap().unwrap_err();
        assert!(
            matches!(
                e,
                TransportError::PeerLost {
                    rank: 1,
                    cause: LossCause::Departed,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(m.recv(1, tag(0, 0), T).await.unwrap(), "last words");
        m.deliver(2, tag(0, 0), Bytes::from_static(b"alive"));
        assert_eq!(m.recv(2, tag(0, 0), T).await.unwrap(), "alive");
    }

    #[tokio::test]
    async fn a_direct_waiter_can_be_claimed_or_served_whole() {
        let m = std::sync::Arc::new(Mailbox::<&'static str>::new(Generation(0)));
        let m2 = m.clone();
        let h = tokio::spawn(async move { m2.recv_direct(1, tag(0, 0), T).await });
        tokio::task::yield_now().await;
        let tx = m.claim_direct(1, tag(0, 0)).expect("a direct waiter");
        assert!(m.claim_direct(1, tag(0, 0)).is_none(), "claimed once");
        tx.send(Ok(Delivery::Direct("handle"))).unwrap();
        assert!(matches!(h.await.unwrap(), Ok(Delivery::Direct("handle"))));
        // A plain delivery reaches a direct waiter whole.
        let m2 = m.clone();
        let h = tokio::spawn(async move { m2.recv_direct(1, tag(0, 1), T).await });
        tokio::task::yield_now().await;
        m.deliver(1, tag(0, 1), Bytes::from_static(b"whole"));
        match h.await.unwrap() {
            Ok(Delivery::Whole(b)) => assert_eq!(b, "whole"),
            other => panic!("{other:?}"),
        }
        // Plain waiters are never claimed.
        let m2 = m.clone();
        let h = tokio::spawn(async move { m2.recv(1, tag(0, 2), T).await });
        tokio::task::yield_now().await;
        assert!(m.claim_direct(1, tag(0, 2)).is_none());
        m.deliver(1, tag(0, 2), Bytes::from_static(b"x"));
        assert_eq!(h.await.unwrap().unwrap(), "x");
    }

    #[tokio::test]
    async fn abandoned_receiver_does_not_swallow_the_message() {
        let m = Mailbox::<Infallible>::new(Generation(0));
        let fut = m.recv(1, tag(0, 0), T);
        // Poll once so the waiter registers, then drop it.
        let _ = futures_poll_once(fut).await;
        m.deliver(1, tag(0, 0), Bytes::from_static(b"kept"));
        assert_eq!(m.recv(1, tag(0, 0), T).await.unwrap(), "kept");
    }

    async fn futures_poll_once<F: std::future::Future>(f: F) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match f.as_mut().poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
