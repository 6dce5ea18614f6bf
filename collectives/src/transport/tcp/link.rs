//! A TCP mesh's per-peer link: the socket itself, or, for a peer on the
//! same host, a shared-memory link ([`crate::transport::shm`]) whose
//! doorbell is that socket.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::transport::shm::{ShmRead, ShmWrite};

/// The reading half of a TCP mesh's link to one peer.
#[derive(Debug)]
pub enum TcpRead {
    Socket(OwnedReadHalf),
    Shm(ShmRead),
}

/// The writing half of a TCP mesh's link to one peer.
#[derive(Debug)]
pub enum TcpWrite {
    Socket(OwnedWriteHalf),
    Shm(ShmWrite),
}

impl AsyncRead for TcpRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            TcpRead::Socket(s) => Pin::new(s).poll_read(cx, buf),
            TcpRead::Shm(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for TcpWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        src: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            TcpWrite::Socket(s) => Pin::new(s).poll_write(cx, src),
            TcpWrite::Shm(s) => Pin::new(s).poll_write(cx, src),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            TcpWrite::Socket(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            TcpWrite::Shm(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            TcpWrite::Socket(s) => s.is_write_vectored(),
            TcpWrite::Shm(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            TcpWrite::Socket(s) => Pin::new(s).poll_flush(cx),
            TcpWrite::Shm(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            TcpWrite::Socket(s) => Pin::new(s).poll_shutdown(cx),
            TcpWrite::Shm(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
