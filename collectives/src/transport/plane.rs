//! A data plane chosen at run time: the transports are not object-safe
//! (their methods return `impl Future`), so [`DataPlane`] is an enum over
//! them that implements [`Transport`] by delegation. A worker runs on it; a
//! program that picks its transport at run time (collbench, the grid tests)
//! builds the collectives once for it instead of once per transport. A new
//! transport is a new variant here and a new [`crate::Endpoint`].

use bytes::Bytes;

use super::Transport;
use super::end::Breaker;
use super::mem::MemTransport;
use super::quic::QuicTransport;
use super::tcp::TcpTransport;
use super::tls::TlsTransport;
use crate::error::TransportError;
use crate::tag::{Generation, Rank, Tag};

/// One generation's connected transport, whichever kind it is.
#[derive(Debug)]
pub enum DataPlane {
    /// The TCP mesh of a launched job.
    Tcp(TcpTransport),
    /// The QUIC mesh of a launched job (`--transport quic`).
    Quic(QuicTransport),
    /// The TLS-over-TCP mesh of a launched job (`--transport tls`).
    Tls(TlsTransport),
    /// The in-process transport: a world of one, or ranks in one process.
    Mem(MemTransport),
}

impl From<TcpTransport> for DataPlane {
    fn from(t: TcpTransport) -> Self {
        DataPlane::Tcp(t)
    }
}

impl From<QuicTransport> for DataPlane {
    fn from(t: QuicTransport) -> Self {
        DataPlane::Quic(t)
    }
}

impl From<TlsTransport> for DataPlane {
    fn from(t: TlsTransport) -> Self {
        DataPlane::Tls(t)
    }
}

impl From<MemTransport> for DataPlane {
    fn from(t: MemTransport) -> Self {
        DataPlane::Mem(t)
    }
}

impl Transport for DataPlane {
    fn rank(&self) -> Rank {
        each_plane!(DataPlane, self, t => t.rank())
    }

    fn size(&self) -> usize {
        each_plane!(DataPlane, self, t => t.size())
    }

    fn generation(&self) -> Generation {
        each_plane!(DataPlane, self, t => t.generation())
    }

    async fn send(&self, to: Rank, tag: Tag, payload: &[u8]) -> Result<(), TransportError> {
        each_plane!(DataPlane, self, t => t.send(to, tag, payload).await)
    }

    async fn recv(&self, from: Rank, tag: Tag) -> Result<Bytes, TransportError> {
        each_plane!(DataPlane, self, t => t.recv(from, tag).await)
    }

    async fn recv_into(&self, from: Rank, tag: Tag, dst: &mut [u8]) -> Result<(), TransportError> {
        each_plane!(DataPlane, self, t => t.recv_into(from, tag, dst).await)
    }

    async fn send_parts(&self, to: Rank, tag: Tag, parts: &[&[u8]]) -> Result<(), TransportError> {
        each_plane!(DataPlane, self, t => t.send_parts(to, tag, parts).await)
    }

    async fn recv_into_parts(
        &self,
        from: Rank,
        tag: Tag,
        dst: &mut [&mut [u8]],
    ) -> Result<(), TransportError> {
        each_plane!(DataPlane, self, t => t.recv_into_parts(from, tag, dst).await)
    }

    fn arrival(
        &self,
        ops: std::ops::Range<u64>,
    ) -> Option<impl std::future::Future<Output = ()> + Send + '_> {
        type Arrival<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
        each_plane!(DataPlane, self, t => t.arrival(ops).map(|f| Box::pin(f) as Arrival<'_>))
    }

    fn stale_refused(&self) -> u64 {
        each_plane!(DataPlane, self, t => t.stale_refused())
    }

    fn breaker(&self) -> Breaker {
        each_plane!(DataPlane, self, t => t.breaker())
    }

    async fn shutdown(self) {
        each_plane!(DataPlane, self, t => t.shutdown().await)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_mem_plane_delegates_and_ends() {
        let mut w: Vec<DataPlane> = MemTransport::world(2, Generation(2), Duration::from_secs(5))
            .into_iter()
            .map(DataPlane::from)
            .collect();
        let tag = Tag::new(Generation(2), 0, 0);
        w[0].send(1, tag, b"hi").await.unwrap();
        assert_eq!(w[1].recv(0, tag).await.unwrap(), "hi");
        assert_eq!((w[1].rank(), w[1].size()), (1, 2));
        w[1].end("reset");
        let e = w[1].recv(0, tag).await.unwrap_err();
        assert!(matches!(e, TransportError::Ended { .. }), "{e:?}");
        w.remove(0).shutdown().await;
    }
}
