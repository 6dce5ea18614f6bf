//! One pair's shared-memory link as the two halves of a byte stream, so
//! that the stream transport's framing, direct receives, goodbyes and loss
//! work over it unchanged.
//!
//! A side that finds nothing to do spins for a while, then flags itself as
//! waiting in the ring and sleeps on its doorbell pipe; the other side,
//! seeing the flag after it moved the ring, writes one byte to it. The
//! pair's TCP connection stays open beside the rings as their proof of
//! life: when a peer dies its kernel closes the socket (and its pipe ends),
//! which wakes every sleeper at once: no futex to wait out, no timeout to
//! guess.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering, fence};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;

use super::ring::{Consumer, Producer};
use super::segment::{Bells, Segment};
use crate::transport::patience::Patience;

/// Who sleeps on a pair's doorbell, and whether the peer is gone.
#[derive(Debug, Default)]
struct Sleepers {
    data: AtomicWaker,
    space: AtomicWaker,
    gone: AtomicBool,
}

impl Sleepers {
    fn wake(&self) {
        self.data.wake();
        self.space.wake();
    }
}

/// A pair's doorbell: a pipe to the peer, rung by writing a byte; and the
/// TCP connection, kept open as the proof of life.
#[derive(Debug)]
struct Bell {
    /// Written directly (non-blocking), not through the runtime: a runtime
    /// handle would refuse a write until it had seen the pipe writable.
    out: std::os::fd::OwnedFd,
    /// Kept open: dropping it would end the peer's stream.
    _tcp: OwnedWriteHalf,
    sleepers: Arc<Sleepers>,
    listener: JoinHandle<()>,
}

impl Bell {
    fn new(stream: TcpStream, bells: Bells) -> std::io::Result<Self> {
        let (r, tcp) = stream.into_split();
        let out = bells.ring_peer;
        let wake_me = pipe::Receiver::from_owned_fd(bells.wake_me)?;
        let sleepers = Arc::new(Sleepers::default());
        let listener = tokio::spawn(listen(r, wake_me, sleepers.clone()));
        Ok(Self {
            out,
            _tcp: tcp,
            sleepers,
            listener,
        })
    }

    /// Wakes the peer if it flagged itself waiting on `flag`.
    fn ring_if(&self, flag: &AtomicU32) {
        fence(Ordering::SeqCst);
        if flag.swap(0, Ordering::AcqRel) != 0 {
            // A full pipe already holds rings the peer has yet to read; a
            // dead peer is noticed by this side's own listener (and its
            // closed pipe gives EPIPE: Rust programs and Python both ignore
            // SIGPIPE).
            let _ = nix::unistd::write(&self.out, &[1]);
        }
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Wakes the sleepers at every ring, and for good when the peer is gone
/// (its socket or its pipe closed).
async fn listen(mut tcp: OwnedReadHalf, mut bell: pipe::Receiver, sleepers: Arc<Sleepers>) {
    let (mut buf, mut rings) = ([0u8; 16], [0u8; 64]);
    loop {
        let n = tokio::select! {
            n = bell.read(&mut rings) => n,
            // Nothing comes on the socket but its end.
            n = tcp.read(&mut buf) => n,
        };
        match n {
            Ok(n) if n > 0 => sleepers.wake(),
            _ => break,
        }
    }
    sleepers.gone.store(true, Ordering::Release);
    sleepers.wake();
}

/// What a half that found nothing to do does before it returns `Pending`:
/// yields and looks again while `patience` lasts; then registers `waker`,
/// flags itself waiting in `flag` for the peer to ring, and looks once more
/// (`ready`), since the peer may have moved the ring before it saw the flag.
/// Returns whether the peer is gone with nothing ready: nothing will ring.
fn wait(
    patience: &mut Patience,
    cx: &mut Context<'_>,
    waker: &AtomicWaker,
    flag: &AtomicU32,
    sleepers: &Sleepers,
    ready: impl FnOnce() -> std::io::Result<bool>,
) -> std::io::Result<bool> {
    if patience.again() {
        cx.waker().wake_by_ref();
        return Ok(false);
    }
    waker.register(cx.waker());
    flag.store(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    if ready()? {
        cx.waker().wake_by_ref();
        return Ok(false);
    }
    Ok(sleepers.gone.load(Ordering::Acquire))
}

/// The reading half of a shared-memory link.
#[derive(Debug)]
pub struct ShmRead {
    ring: Consumer,
    bell: Arc<Bell>,
    patience: Patience,
}

/// The writing half of a shared-memory link.
#[derive(Debug)]
pub struct ShmWrite {
    ring: Producer,
    bell: Arc<Bell>,
    patience: Patience,
}

/// The two halves of a link over `segment`, whose ring `tx` this side
/// writes and the other it reads, with the segment's pipes as doorbells and
/// `stream` as the proof of life.
pub(crate) fn halves(
    segment: &mut Segment,
    tx: usize,
    stream: TcpStream,
    spin: Duration,
) -> Option<(ShmRead, ShmWrite)> {
    let bell = Arc::new(Bell::new(stream, segment.take_bells()?).ok()?);
    let read = ShmRead {
        ring: Consumer::new(segment.ring(1 - tx)?),
        bell: bell.clone(),
        patience: Patience::new(spin),
    };
    let write = ShmWrite {
        ring: Producer::new(segment.ring(tx)?),
        bell,
        patience: Patience::new(spin),
    };
    Some((read, write))
}

impl ShmRead {
    /// Reads what is waiting; `None` when nothing is and the ring is open.
    fn try_read(&mut self, buf: &mut ReadBuf<'_>) -> std::io::Result<Option<()>> {
        let n = self.ring.pop(buf.initialize_unfilled())?;
        if n > 0 {
            buf.advance(n);
            self.bell.ring_if(self.ring.ring().space_waiter());
            return Ok(Some(()));
        }
        // Closed and drained: the end of the stream.
        Ok(self.ring.closed().then_some(()))
    }
}

impl AsyncRead for ShmRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if let Some(()) = self.try_read(buf)? {
            self.patience.reset();
            return Poll::Ready(Ok(()));
        }
        let this = &mut *self;
        let sleepers = &this.bell.sleepers;
        let ring = &this.ring;
        let flag = ring.ring().data_waiter();
        if wait(
            &mut this.patience,
            cx,
            &sleepers.data,
            flag,
            sleepers,
            || Ok(ring.available()? > 0 || ring.closed()),
        )? {
            // The peer is gone without closing: end of stream, which the
            // transport reads as a loss unless a goodbye came first.
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl AsyncWrite for ShmWrite {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        src: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if src.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let n = self.ring.push(src)?;
        if n > 0 {
            self.patience.reset();
            self.bell.ring_if(self.ring.ring().data_waiter());
            return Poll::Ready(Ok(n));
        }
        let this = &mut *self;
        let sleepers = &this.bell.sleepers;
        let ring = &this.ring;
        let flag = ring.ring().space_waiter();
        if wait(
            &mut this.patience,
            cx,
            &sleepers.space,
            flag,
            sleepers,
            || Ok(ring.free()? > 0),
        )? {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        Poll::Pending
    }

    /// Writes a frame's header and payload with one doorbell check.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let mut done = 0;
        for b in bufs.iter().filter(|b| !b.is_empty()) {
            let n = self.ring.push(b)?;
            done += n;
            if n < b.len() {
                break;
            }
        }
        if done > 0 {
            self.patience.reset();
            self.bell.ring_if(self.ring.ring().data_waiter());
            return Poll::Ready(Ok(done));
        }
        match bufs.iter().find(|b| !b.is_empty()) {
            Some(b) => self.poll_write(cx, b),
            None => Poll::Ready(Ok(0)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.ring.close();
        self.bell.ring_if(self.ring.ring().data_waiter());
        Poll::Ready(Ok(()))
    }
}
