//! A buffer cut into cells (block x segment) that two halves of one collective pass
//! between them: the receiving half writes a cell, the sending half reads it once
//! the schedule says it is final. Whoever holds a cell owns it outright (no lock is
//! held across an await), so the collective's future stays `Send`.
//!
//! The buffer may lie in several pieces (the tensors of a fused group, laid
//! end to end without being copied together): a cell is then the run of
//! piece slices that covers its range of the whole.

use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::schedule::{segment, segment_count};

/// Cuts consecutive runs of elements off pieces of memory laid end to end.
pub(crate) struct Cutter<'a, T, I> {
    pieces: I,
    rest: &'a mut [T],
}

impl<'a, T, I: Iterator<Item = &'a mut [T]>> Cutter<'a, T, I> {
    pub(crate) fn new(pieces: impl IntoIterator<IntoIter = I>) -> Self {
        Self {
            pieces: pieces.into_iter(),
            rest: &mut [],
        }
    }

    /// Appends to `out` the slices that hold the next `n` elements (fewer
    /// when the pieces run out).
    pub(crate) fn cut(&mut self, mut n: usize, out: &mut Vec<&'a mut [T]>) {
        while n > 0 {
            if self.rest.is_empty() {
                match self.pieces.next() {
                    Some(p) => self.rest = p,
                    None => return,
                }
                continue;
            }
            let len = n.min(self.rest.len());
            let (head, tail) = std::mem::take(&mut self.rest).split_at_mut(len);
            out.push(head);
            self.rest = tail;
            n -= len;
        }
    }
}

/// One cell: consecutive slices of the buffer's pieces.
pub(crate) type Cell<'a, T> = Vec<&'a mut [T]>;

pub(crate) struct Cells<'a, T> {
    slots: Mutex<Vec<Option<Cell<'a, T>>>>,
    /// `first[b]`: index of block `b`'s first cell.
    first: Vec<usize>,
    received: AtomicUsize,
    sent: AtomicUsize,
    changed: Notify,
}

/// When a cell may be taken: once at least this many cells have been received and
/// sent (each counted in schedule order).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Ready {
    pub(crate) received: usize,
    pub(crate) sent: usize,
}

impl<'a, T> Cells<'a, T> {
    /// Cuts the concatenation of `pieces` along `blocks` (contiguous, in
    /// order, covering it) into `seg`-element segments.
    pub(crate) fn new(pieces: Vec<&'a mut [T]>, blocks: &[Range<usize>], seg: usize) -> Self {
        let mut slots = Vec::new();
        let mut first = Vec::with_capacity(blocks.len());
        let mut cutter = Cutter::new(pieces);
        for b in blocks {
            first.push(slots.len());
            for k in 0..segment_count(b.len(), seg) {
                let mut cell = Vec::with_capacity(1);
                cutter.cut(segment(b, seg, k).len(), &mut cell);
                slots.push(Some(cell));
            }
        }
        Self {
            slots: Mutex::new(slots),
            first,
            received: AtomicUsize::new(0),
            sent: AtomicUsize::new(0),
            changed: Notify::new(),
        }
    }

    pub(crate) fn index(&self, block: usize, seg: usize) -> usize {
        self.first[block] + seg
    }

    fn try_take(&self, idx: usize, ready: Ready) -> Option<Cell<'a, T>> {
        if self.received.load(Ordering::Acquire) < ready.received
            || self.sent.load(Ordering::Acquire) < ready.sent
        {
            return None;
        }
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.get_mut(idx).and_then(Option::take)
    }

    /// Takes cell `idx` once it is back in the table and `ready` holds.
    pub(crate) async fn take(&self, idx: usize, ready: Ready) -> Cell<'a, T> {
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if let Some(c) = self.try_take(idx, ready) {
                return c;
            }
            notified.await;
        }
    }

    pub(crate) fn put(&self, idx: usize, cell: Cell<'a, T>) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots[idx] = Some(cell);
        drop(slots);
        self.changed.notify_waiters();
    }

    /// Records that one more cell (in schedule order) has been received.
    pub(crate) fn mark_received(&self) {
        self.received.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Records that one more cell (in schedule order) has been sent.
    pub(crate) fn mark_sent(&self) {
        self.sent.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }
}
