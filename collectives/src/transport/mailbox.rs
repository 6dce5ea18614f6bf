//! Tag matching for incoming messages, shared by every transport.
//!
//! Drivers call [`Mailbox::deliver`] for each message that arrives,
//! [`Mailbox::depart`] when a peer leaves cleanly and [`Mailbox::fail`] when one is
//! lost; [`Mailbox::recv`] hands messages to callers in order per (source, tag).
//!
//! A message that arrived before a failure or departure is still handed out: only
//! waits for messages that can no longer come fail. A failure fails every wait (the
//! generation is over); a clean departure fails only waits on the departed rank.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::error::{LossCause, TransportError};
use crate::tag::{Generation, Rank, Tag};

type Waiter = oneshot::Sender<Result<Bytes, TransportError>>;

enum Slot {
    Queued(VecDeque<Bytes>),
    Waiting(VecDeque<Waiter>),
}

#[derive(Default)]
struct State {
    slots: HashMap<(Rank, Tag), Slot>,
    broken: Option<TransportError>,
    departed: HashSet<Rank>,
}

pub(crate) struct Mailbox {
    generation: Generation,
    state: Mutex<State>,
    stale: AtomicU64,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("generation", &self.generation)
            .field("stale", &self.stale)
            .finish_non_exhaustive()
    }
}

impl Mailbox {
    pub(crate) fn new(generation: Generation) -> Self {
        Self {
            generation,
            state: Mutex::new(State::default()),
            stale: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
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
                match w.send(Ok(payload)) {
                    Ok(()) => {
                        if ws.is_empty() {
                            st.slots.remove(&key);
                        }
                        return;
                    }
                    // That receiver gave up (its future was dropped): try the next.
                    Err(Ok(back)) => payload = back,
                    Err(Err(_)) => return,
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
                for w in ws.drain(..) {
                    let _ = w.send(Err(err.clone()));
                }
                false
            }
        });
        st.broken = Some(err);
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
                for w in ws.drain(..) {
                    let _ = w.send(Err(err.clone()));
                }
                false
            }
            _ => true,
        });
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
        let rx = {
            let mut st = self.lock();
            let queued = matches!(st.slots.get(&(from, tag)), Some(Slot::Queued(_)));
            if !queued {
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
                            return Ok(p);
                        }
                    }
                    Slot::Waiting(ws) => ws.push_back(tx),
                },
                Entry::Vacant(v) => {
                    v.insert(Slot::Waiting(VecDeque::from([tx])));
                }
            }
            rx
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            // The sender side is only dropped by `fail`, which sends first; a drop
            // without a value means the mailbox is going away.
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
        let m = Mailbox::new(Generation(3));
        m.deliver(1, tag(3, 0), Bytes::from_static(b"a"));
        m.deliver(1, tag(3, 0), Bytes::from_static(b"b"));
        m.deliver(1, tag(3, 1), Bytes::from_static(b"c"));
        assert_eq!(m.recv(1, tag(3, 1), T).await.unwrap(), "c");
        assert_eq!(m.recv(1, tag(3, 0), T).await.unwrap(), "a");
        assert_eq!(m.recv(1, tag(3, 0), T).await.unwrap(), "b");
    }

    #[tokio::test]
    async fn waiter_gets_a_later_delivery() {
        let m = std::sync::Arc::new(Mailbox::new(Generation(0)));
        let m2 = m.clone();
        let h = tokio::spawn(async move { m2.recv(2, tag(0, 5), T).await });
        tokio::task::yield_now().await;
        m.deliver(2, tag(0, 5), Bytes::from_static(b"x"));
        assert_eq!(h.await.unwrap().unwrap(), "x");
    }

    #[tokio::test]
    async fn older_generation_is_refused_and_counted() {
        let m = Mailbox::new(Generation(2));
        m.deliver(0, tag(1, 0), Bytes::from_static(b"old"));
        m.deliver(0, tag(2, 0), Bytes::from_static(b"new"));
        assert_eq!(m.stale_refused(), 1);
        assert_eq!(m.recv(0, tag(2, 0), T).await.unwrap(), "new");
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_breaks_the_generation() {
        let m = Mailbox::new(Generation(0));
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
        let m = std::sync::Arc::new(Mailbox::new(Generation(7)));
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
        let m = Mailbox::new(Generation(0));
        m.deliver(1, tag(0, 0), Bytes::from_static(b"early"));
        m.peer_lost(1, LossCause::Closed);
        assert_eq!(m.recv(1, tag(0, 0), T).await.unwrap(), "early");
        assert!(m.recv(1, tag(0, 1), T).await.is_err());
        assert!(m.recv(2, tag(0, 1), T).await.is_err());
    }

    #[tokio::test]
    async fn departure_fails_only_waits_on_the_departed_rank() {
        let m = std::sync::Arc::new(Mailbox::new(Generation(0)));
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
    async fn abandoned_receiver_does_not_swallow_the_message() {
        let m = Mailbox::new(Generation(0));
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
