//! A single-producer, single-consumer byte ring in a shared segment.
//!
//! ```text
//!  base ─┬─ tail (producer's)   ─┐  its own 128-byte line
//!        ├─ closed              ─┘
//!        ├─ head (consumer's)      its own line
//!        ├─ data waiter            set by a consumer about to sleep
//!        ├─ space waiter           set by a producer about to sleep
//!        └─ data: cap bytes at base + HEADER, position i at i % cap
//! ```
//! `tail` and `head` count bytes ever written and read. Each side keeps its
//! own index in its own memory and only *reads* the other's from the segment,
//! checking it: a peer that writes nonsense there makes this side report a
//! corrupt ring, never read or write outside the data area.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::sys::SharedMap;

const LINE: usize = 128;
const TAIL: usize = 0;
const CLOSED: usize = 8;
const HEAD: usize = LINE;
const DATA_WAITER: usize = 2 * LINE;
const SPACE_WAITER: usize = 3 * LINE;
/// Bytes of a ring's header, before its data.
pub(crate) const HEADER: usize = 4 * LINE;

/// What a side finds when the other broke the ring's rules.
pub(crate) fn corrupt() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "the peer left its shared-memory ring inconsistent",
    )
}

/// The (offset, length) pieces of the data area that `len` bytes starting
/// at position `pos` occupy: one piece, or two when they wrap around.
pub(crate) fn spans(pos: u64, len: usize, cap: usize) -> [(usize, usize); 2] {
    let start = (pos % cap as u64) as usize;
    let first = len.min(cap - start);
    [(start, first), (0, len - first)]
}

/// One direction's ring: where it lies in a mapped segment.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    map: Arc<SharedMap>,
    base: usize,
    cap: usize,
}

impl Ring {
    /// The ring at `base` with `cap` data bytes, if it fits the mapping.
    pub(crate) fn new(map: Arc<SharedMap>, base: usize, cap: usize) -> Option<Self> {
        let end = base.checked_add(HEADER)?.checked_add(cap)?;
        if cap == 0 || end > map.len() || !base.is_multiple_of(LINE) {
            return None;
        }
        Some(Self { map, base, cap })
    }

    fn u64(&self, at: usize) -> &AtomicU64 {
        // In bounds and aligned: checked once in `new`.
        self.map
            .u64_at(self.base + at)
            .unwrap_or_else(|| unreachable!())
    }

    fn u32(&self, at: usize) -> &AtomicU32 {
        self.map
            .u32_at(self.base + at)
            .unwrap_or_else(|| unreachable!())
    }

    pub(crate) fn data_waiter(&self) -> &AtomicU32 {
        self.u32(DATA_WAITER)
    }

    pub(crate) fn space_waiter(&self) -> &AtomicU32 {
        self.u32(SPACE_WAITER)
    }
}

/// The writing side of a ring.
#[derive(Debug)]
pub(crate) struct Producer {
    ring: Ring,
    tail: u64,
}

impl Producer {
    pub(crate) fn new(ring: Ring) -> Self {
        Self { ring, tail: 0 }
    }

    pub(crate) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Bytes that can be written now.
    pub(crate) fn free(&self) -> std::io::Result<usize> {
        let head = self.ring.u64(HEAD).load(Ordering::Acquire);
        match self.tail.checked_sub(head) {
            Some(used) if used <= self.ring.cap as u64 => Ok(self.ring.cap - used as usize),
            _ => Err(corrupt()),
        }
    }

    /// Writes as much of `src` as fits and publishes it; returns how much.
    pub(crate) fn push(&mut self, src: &[u8]) -> std::io::Result<usize> {
        let n = src.len().min(self.free()?);
        let data = self.ring.base + HEADER;
        let mut done = 0;
        for (off, len) in spans(self.tail, n, self.ring.cap) {
            self.ring
                .map
                .write(data + off, &src[done..done + len])
                .ok_or_else(corrupt)?;
            done += len;
        }
        self.tail += n as u64;
        self.ring.u64(TAIL).store(self.tail, Ordering::Release);
        Ok(n)
    }

    /// Says that nothing more will be written.
    pub(crate) fn close(&self) {
        self.ring.u32(CLOSED).store(1, Ordering::Release);
    }
}

/// The reading side of a ring.
#[derive(Debug)]
pub(crate) struct Consumer {
    ring: Ring,
    head: u64,
}

impl Consumer {
    pub(crate) fn new(ring: Ring) -> Self {
        Self { ring, head: 0 }
    }

    pub(crate) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Bytes waiting to be read.
    pub(crate) fn available(&self) -> std::io::Result<usize> {
        let tail = self.ring.u64(TAIL).load(Ordering::Acquire);
        match tail.checked_sub(self.head) {
            Some(n) if n <= self.ring.cap as u64 => Ok(n as usize),
            _ => Err(corrupt()),
        }
    }

    /// Reads up to `dst.len()` waiting bytes and frees their room; returns how many.
    pub(crate) fn pop(&mut self, dst: &mut [u8]) -> std::io::Result<usize> {
        let n = dst.len().min(self.available()?);
        let data = self.ring.base + HEADER;
        let mut done = 0;
        for (off, len) in spans(self.head, n, self.ring.cap) {
            self.ring
                .map
                .read(data + off, &mut dst[done..done + len])
                .ok_or_else(corrupt)?;
            done += len;
        }
        self.head += n as u64;
        self.ring.u64(HEAD).store(self.head, Ordering::Release);
        Ok(n)
    }

    /// Whether the producer said it will write no more (what it wrote before
    /// may still be waiting).
    pub(crate) fn closed(&self) -> bool {
        self.ring.u32(CLOSED).load(Ordering::Acquire) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::shm::segment::Segment;

    fn pair(cap: usize) -> (Producer, Consumer, Segment) {
        let seg = Segment::create(cap).unwrap();
        let (p, c) = (seg.ring(0).unwrap(), seg.ring(0).unwrap());
        (Producer::new(p), Consumer::new(c), seg)
    }

    #[test]
    fn spans_wrap_around_the_end() {
        assert_eq!(spans(0, 10, 16), [(0, 10), (0, 0)]);
        assert_eq!(spans(12, 10, 16), [(12, 4), (0, 6)]);
        assert_eq!(spans(32, 16, 16), [(0, 16), (0, 0)]);
        assert_eq!(spans(17, 0, 16), [(1, 0), (0, 0)]);
    }

    #[test]
    fn bytes_come_out_in_order_across_the_wrap() {
        let (mut p, mut c, _seg) = pair(4096);
        let mut expect = Vec::new();
        let mut got = Vec::new();
        for round in 0..40u32 {
            let chunk: Vec<u8> = (0..1000 + round).map(|i| (i * 7 + round) as u8).collect();
            let mut sent = 0;
            while sent < chunk.len() {
                sent += p.push(&chunk[sent..]).unwrap();
                let mut buf = vec![0u8; 700];
                let n = c.pop(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            expect.extend_from_slice(&chunk);
        }
        let mut rest = vec![0u8; 4096];
        let n = c.pop(&mut rest).unwrap();
        got.extend_from_slice(&rest[..n]);
        assert_eq!(got, expect);
    }

    #[test]
    fn a_full_ring_takes_nothing_more_until_read() {
        let (mut p, mut c, _seg) = pair(4096);
        assert_eq!(p.push(&[1u8; 5000]).unwrap(), 4096);
        assert_eq!(p.push(&[2u8; 10]).unwrap(), 0);
        assert_eq!(c.pop(&mut [0u8; 100]).unwrap(), 100);
        assert_eq!(p.free().unwrap(), 100);
        assert!(!c.closed());
        p.close();
        assert!(c.closed());
        assert_eq!(c.available().unwrap(), 3996);
    }

    #[test]
    fn nonsense_indices_are_reported_not_followed() {
        let (mut p, mut c, seg) = pair(4096);
        let ring = seg.ring(0).unwrap();
        ring.u64(TAIL).store(1 << 40, Ordering::Release);
        assert_eq!(
            c.pop(&mut [0u8; 16]).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
        ring.u64(HEAD).store(77, Ordering::Release);
        assert_eq!(
            p.push(b"x").unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }
}
