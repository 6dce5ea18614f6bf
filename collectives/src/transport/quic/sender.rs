//! The writing half of a QUIC stream as the stream transport uses it: each
//! write is copied into a buffer from a per-stream pool and handed to quinn
//! whole ([`SendStream::write_chunk`]), and the buffer comes back to the pool
//! once quinn drops it (the peer acknowledged every byte of it).
//!
//! quinn's own write copies into a fresh allocation kept until acknowledged.
//! For a 512 KiB ring segment that is above glibc's mapping threshold, so
//! every segment mapped, faulted in, zeroed and unmapped its pages again:
//! ~12% of the CPU of a 16 MiB allreduce (docs/BENCHMARKS.md). Pooled
//! buffers keep their pages.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use quinn::{SendStream, WriteError};
use tokio::io::AsyncWrite;

/// The most bytes one buffer takes.
const CHUNK: usize = 256 << 10;
/// The most free buffers a stream's pool keeps (8 MiB).
const POOL_MAX: usize = 32;

type Pool = Arc<Mutex<Vec<Vec<u8>>>>;

/// A pooled buffer holding `len` bytes; back to its pool when dropped.
struct Pooled {
    buf: Vec<u8>,
    pool: Pool,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let mut free = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() < POOL_MAX {
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            free.push(buf);
        }
    }
}

type Pending = Pin<Box<dyn Future<Output = (SendStream, Result<(), WriteError>)> + Send>>;

enum State {
    Idle(SendStream),
    /// A chunk of `usize` bytes being handed to quinn.
    Writing(Pending, usize),
    /// The stream was lost with a write that failed.
    Gone,
}

/// A QUIC stream's writing half, writing through pooled buffers.
pub(crate) struct Sender {
    state: State,
    pool: Pool,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sender(..)")
    }
}

impl Sender {
    pub(crate) fn new(stream: SendStream) -> Self {
        Self {
            state: State::Idle(stream),
            pool: Pool::default(),
        }
    }

    /// The stream, when no write is under way.
    pub(crate) fn stream(&self) -> Option<&SendStream> {
        match &self.state {
            State::Idle(s) => Some(s),
            _ => None,
        }
    }

    /// `data` in a buffer of the pool.
    fn chunk(&self, data: &[u8]) -> Bytes {
        let mut buf = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(CHUNK));
        buf.extend_from_slice(data);
        Bytes::from_owner(Pooled {
            buf,
            pool: self.pool.clone(),
        })
    }

    /// Drives the write under way, if any, to its end: the bytes it took.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<Option<usize>>> {
        let State::Writing(fut, n) = &mut self.state else {
            return Poll::Ready(Ok(None));
        };
        let n = *n;
        let (stream, res) = ready!(fut.as_mut().poll(cx));
        match res {
            Ok(()) => {
                self.state = State::Idle(stream);
                Poll::Ready(Ok(Some(n)))
            }
            Err(e) => {
                self.state = State::Gone;
                Poll::Ready(Err(e.into()))
            }
        }
    }
}

fn gone() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotConnected, "the QUIC stream was lost")
}

impl AsyncWrite for Sender {
    /// Writes up to [`CHUNK`] bytes of `buf`. A caller that gets `Pending`
    /// calls again with the same bytes (as `write_all` does), and is then
    /// told how many the write under way took.
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if let Some(n) = ready!(this.poll_pending(cx))? {
            return Poll::Ready(Ok(n));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let State::Idle(mut stream) = std::mem::replace(&mut this.state, State::Gone) else {
            return Poll::Ready(Err(gone()));
        };
        let n = buf.len().min(CHUNK);
        let chunk = this.chunk(&buf[..n]);
        let fut: Pending = Box::pin(async move {
            let res = stream.write_chunk(chunk).await;
            (stream, res)
        });
        this.state = State::Writing(fut, n);
        match ready!(this.poll_pending(cx))? {
            Some(n) => Poll::Ready(Ok(n)),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        match &mut this.state {
            State::Idle(s) => AsyncWrite::poll_flush(Pin::new(s), cx),
            _ => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        match &mut this.state {
            State::Idle(s) => AsyncWrite::poll_shutdown(Pin::new(s), cx),
            _ => Poll::Ready(Err(gone())),
        }
    }
}
