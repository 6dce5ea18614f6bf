//! Reusable receive buffers. Large payloads are read into buffers that return to
//! their connection's pool when the last view of the payload is dropped, so a
//! steady stream of segments reuses memory that is already mapped instead of
//! faulting in fresh pages for every message (which profiling showed costing more
//! than the copy out of the socket).

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Payloads below this size are read into plain allocations (the allocator reuses
/// small blocks by itself).
pub(crate) const POOLED_MIN: usize = 64 * 1024;

/// Most bytes a pool keeps for reuse.
const POOL_MAX_BYTES: usize = 256 << 20;

#[derive(Debug, Default)]
struct Shelf {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct RecvPool {
    shelf: Arc<Mutex<Shelf>>,
}

/// A buffer on loan from a [`RecvPool`]; `len` bytes of it are the payload.
pub(crate) struct Loan {
    buf: Vec<u8>,
    len: usize,
    home: RecvPool,
}

impl RecvPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shelf> {
        self.shelf.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A buffer with at least `len` initialised bytes: the smallest pooled one that
    /// fits, or a new one; when none fits, one pooled buffer is retired, so the
    /// pool follows the sizes in use.
    pub(crate) fn take(&self, len: usize) -> Loan {
        let found = {
            let mut shelf = self.lock();
            let fit = (0..shelf.bufs.len())
                .filter(|&i| shelf.bufs[i].len() >= len)
                .min_by_key(|&i| shelf.bufs[i].len());
            let pick = fit.or_else(|| (!shelf.bufs.is_empty()).then(|| shelf.bufs.len() - 1));
            pick.map(|i| {
                let b = shelf.bufs.swap_remove(i);
                shelf.bytes -= b.len();
                b
            })
        };
        // A fresh zeroed allocation (calloc) commits pages only as data lands in
        // them, so a peer's announced length costs memory only once sent.
        let buf = found
            .filter(|b| b.len() >= len)
            .unwrap_or_else(|| vec![0u8; len]);
        Loan {
            buf,
            len,
            home: self.clone(),
        }
    }

    fn give_back(&self, buf: Vec<u8>) {
        let mut shelf = self.lock();
        if shelf.bytes + buf.len() <= POOL_MAX_BYTES {
            shelf.bytes += buf.len();
            shelf.bufs.push(buf);
        }
    }

    #[cfg(test)]
    fn pooled(&self) -> (usize, usize) {
        let s = self.lock();
        (s.bufs.len(), s.bytes)
    }
}

impl Loan {
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }

    /// Hands the payload out as `Bytes`; the buffer comes home when it is dropped.
    pub(crate) fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for Loan {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        self.home.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_are_reused() {
        let pool = RecvPool::default();
        let mut a = pool.take(100_000);
        a.as_mut_slice()[0] = 7;
        let bytes = a.into_bytes();
        assert_eq!(bytes.len(), 100_000);
        assert_eq!(bytes[0], 7);
        assert_eq!(pool.pooled(), (0, 0));
        let view = bytes.slice(10..20);
        drop(bytes);
        assert_eq!(pool.pooled(), (0, 0), "still lent while a view lives");
        drop(view);
        assert_eq!(pool.pooled(), (1, 100_000));
        let b = pool.take(70_000);
        assert_eq!(b.as_ref().len(), 70_000);
        assert_eq!(pool.pooled(), (0, 0), "reused the pooled buffer");
    }

    #[test]
    fn the_smallest_fitting_buffer_is_chosen() {
        let pool = RecvPool::default();
        let both = (pool.take(300_000), pool.take(100_000));
        drop(both);
        let l = pool.take(90_000);
        assert_eq!(l.buf.len(), 100_000);
    }

    #[test]
    fn the_pool_is_bounded() {
        let pool = RecvPool::default();
        let loans: Vec<_> = (0..3).map(|_| pool.take(POOL_MAX_BYTES / 2)).collect();
        drop(loans);
        assert_eq!(pool.pooled().0, 2);
    }
}
