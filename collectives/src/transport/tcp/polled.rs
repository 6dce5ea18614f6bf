//! A TCP link's reading half that looks for its next bytes for a while
//! before it waits for the socket's readiness.
//!
//! The runtime learns of a socket's readiness from epoll, which it asks only
//! when it has nothing else to run or between rounds of task polls; a rank
//! that waits for a message due in microseconds then sleeps in epoll and is
//! woken when it comes, 20 to 50 µs later on a virtual machine whose idle CPU
//! halted. So the half, finding the runtime's socket not ready, reads the
//! socket itself (`recv` with `MSG_DONTWAIT`, one system call) and yields,
//! for as long as its [`Patience`] lasts, the way Open MPI's TCP transport
//! polls; then it sleeps on the runtime's readiness. [`PolledTcp`] does the
//! same under a TLS session.

use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, recv};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;

use crate::transport::patience::Patience;

/// A TCP link's socket, or its reading half, whose reads look for their
/// bytes for a while before they sleep (see the module's text).
#[derive(Debug)]
pub struct Polled<S> {
    inner: S,
    patience: Patience,
}

/// The reading half of a TCP link.
pub type PolledRead = Polled<OwnedReadHalf>;

/// A whole TCP connection whose reads look as [`PolledRead`]'s do, for a
/// layer that wraps the connection before splitting it (TLS).
pub type PolledTcp = Polled<TcpStream>;

/// What a [`Polled`] reads: a TCP socket, or its reading half.
pub trait OnSocket {
    /// The socket's descriptor.
    fn fd(&self) -> RawFd;
}

impl OnSocket for OwnedReadHalf {
    fn fd(&self) -> RawFd {
        self.as_ref().as_raw_fd()
    }
}

impl OnSocket for TcpStream {
    fn fd(&self) -> RawFd {
        self.as_raw_fd()
    }
}

impl<S> Polled<S> {
    /// `inner`, looking for its bytes for up to `spin` before it sleeps.
    pub(crate) fn new(inner: S, spin: Duration) -> Self {
        Self {
            inner,
            patience: Patience::new(spin),
        }
    }

    /// Sets how long reads look again before they sleep.
    pub(crate) fn set_spin(&mut self, spin: Duration) {
        self.patience = Patience::new(spin);
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    pub(crate) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + OnSocket + Unpin> AsyncRead for Polled<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(r) = Pin::new(&mut this.inner).poll_read(cx, buf) {
            this.patience.reset();
            return Poll::Ready(r);
        }
        // The runtime will wake this task when the socket turns readable;
        // until the budget is spent, look without it.
        if !this.patience.again() {
            return Poll::Pending;
        }
        match read_now(this.inner.fd(), buf) {
            Ok(Some(())) => {
                this.patience.reset();
                Poll::Ready(Ok(()))
            }
            Ok(None) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Polled<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        src: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, src)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Reads what the socket `fd` holds now, without waiting: `None` when it
/// holds nothing; an empty read is the stream's end.
fn read_now(fd: RawFd, buf: &mut ReadBuf<'_>) -> std::io::Result<Option<()>> {
    match recv(fd, buf.initialize_unfilled(), MsgFlags::MSG_DONTWAIT) {
        Ok(n) => {
            buf.advance(n);
            Ok(Some(()))
        }
        Err(Errno::EAGAIN | Errno::EINTR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    type Pair = (
        PolledRead,
        tokio::net::TcpStream,
        tokio::net::tcp::OwnedWriteHalf,
    );

    async fn pair(spin: Duration) -> Pair {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dial = tokio::net::TcpStream::connect(l.local_addr().unwrap());
        let (dialed, (accepted, _)) = tokio::join!(dial, async { l.accept().await.unwrap() });
        let (r, w) = accepted.into_split();
        (PolledRead::new(r, spin), dialed.unwrap(), w)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn bytes_come_through_whether_looked_for_or_slept_for_and_the_end_is_seen() {
        for spin in [Duration::from_millis(50), Duration::ZERO] {
            let (mut r, mut peer, _w) = pair(spin).await;
            let writer = tokio::spawn(async move {
                for i in 0..200u32 {
                    peer.write_all(&i.to_le_bytes()).await.unwrap();
                    if i % 50 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                peer.shutdown().await.unwrap();
            });
            let mut got = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut got));
            read.await.expect("the stream's end within 10 s").unwrap();
            writer.await.unwrap();
            let want: Vec<u8> = (0..200u32).flat_map(u32::to_le_bytes).collect();
            assert_eq!(got, want, "spin {spin:?}");
        }
    }
}
