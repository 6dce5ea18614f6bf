//! A transport over one ordered byte stream per pair of ranks (TCP
//! connections, or QUIC bi-directional streams): a reader task per stream
//! that splits frames and fills the [`Mailbox`], and sends written straight
//! from the caller's slice (header and payload in one vectored write, no copy).
//!
//! Zero-copy receive: [`Transport::recv_into`] posts a direct receive; when the
//! reader task sees that (large) frame arrive, it lends the stream's reader to
//! the receiving future, which reads the payload straight into its own buffer and
//! hands the reader back. If that future is dropped half-way, the reader goes with
//! it and the peer is lost ([`LossCause::AbandonedRecv`]); no buffer is ever
//! borrowed across tasks.
//!
//! Loss: a stream that ends without a goodbye frame, an i/o error or a
//! malformed frame breaks the generation at once; a peer that is silent for
//! `io_timeout` gives [`TransportError::Timeout`]. A rank that finishes calls
//! [`Transport::shutdown`], which sends a goodbye and ends its writing halves,
//! so peers still finishing are not disturbed; a transport dropped without it
//! looks like a crash.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::task::JoinHandle;

use super::end::Breaker;
use super::mailbox::{Delivery, Mailbox};
use super::pieces::{self, Pieces, scatter_exact};
use super::{Transport, check_peer};
use crate::error::{LossCause, TransportError};
use crate::tag::{Generation, Rank, Tag};

pub(crate) mod carry;
pub(crate) mod frame;
pub(crate) mod greet;
pub(crate) mod handshake;
pub(crate) mod links;
mod pairing;
mod pool;
#[cfg(test)]
mod props;

use carry::{Carried, Park};
use links::{CarryTo, Dialer, Link, Links};

/// What a stream transport needs to know of its configuration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StreamLimits {
    /// Longest wait for one message, or for the stream to take one send.
    pub(crate) io_timeout: Duration,
    /// Largest payload accepted in one frame.
    pub(crate) max_frame_bytes: u32,
}

/// Tag of the goodbye frame: op id `u64::MAX` is never used by a collective.
fn goodbye(generation: Generation) -> Tag {
    Tag::new(generation, u64::MAX, u32::MAX)
}

/// The reading half of a peer's stream.
pub trait ReadHalf: AsyncRead + Unpin + Send + std::fmt::Debug + 'static {}
impl<T: AsyncRead + Unpin + Send + std::fmt::Debug + 'static> ReadHalf for T {}

/// The writing half of a peer's stream.
pub trait WriteHalf: AsyncWrite + Unpin + Send + std::fmt::Debug + 'static {}
impl<T: AsyncWrite + Unpin + Send + std::fmt::Debug + 'static> WriteHalf for T {}

type Reader<R> = BufReader<R>;

/// A stream's reader on loan to a direct receive, with the payload's length
/// and the way home.
#[derive(Debug)]
pub(crate) struct Handoff<R> {
    reader: Reader<R>,
    len: usize,
    home: tokio::sync::oneshot::Sender<Reader<R>>,
}

type StreamMailbox<R> = Mailbox<Handoff<R>>;

/// One rank's end of a mesh of byte streams: one per peer, made before the
/// generation starts, or made on demand (`links.rs`).
#[derive(Debug)]
pub struct StreamTransport<R, W> {
    rank: Rank,
    generation: Generation,
    mailbox: Arc<StreamMailbox<R>>,
    links: Arc<Links<R, W>>,
    /// Makes a link a send needs (connections on demand; `None` for a
    /// mesh made whole before the generation).
    dialer: Option<Arc<dyn Dialer<R, W>>>,
    /// Accepts the links peers dial (connections on demand).
    acceptor: Option<JoinHandle<()>>,
    limits: StreamLimits,
}

impl<R: ReadHalf, W: WriteHalf> StreamTransport<R, W> {
    /// Starts the reader tasks over `streams[peer]` (`None` at this rank's
    /// own index), each a connected, proven stream's two halves.
    pub(crate) fn start(
        rank: Rank,
        generation: Generation,
        streams: Vec<Option<(R, W)>>,
        limits: StreamLimits,
    ) -> Self {
        let size = streams.len();
        let links = streams
            .into_iter()
            .enumerate()
            .filter_map(|(peer, s)| s.map(|(read, write)| (peer, read, write)))
            .map(|(peer, read, write)| Link {
                peer,
                read,
                write,
                shared_memory: false,
            });
        Self::linked(rank, generation, size, links, limits)
    }

    /// Starts a transport of `size` ranks over `links` (one per peer, the
    /// full mesh: nothing is dialed later).
    pub(crate) fn linked(
        rank: Rank,
        generation: Generation,
        size: usize,
        links: impl IntoIterator<Item = Link<R, W>>,
        limits: StreamLimits,
    ) -> Self {
        let t = Self::empty(rank, generation, size, limits);
        for link in links {
            t.mailbox.opened(link.peer);
            let peer = link.peer;
            let w = t.links.reading(link);
            t.links.place(peer, w);
        }
        t
    }

    /// A transport with no link yet: `dialer` makes those its sends need,
    /// and `accept` (given the links, to hand what it accepts to) those
    /// its peers dial.
    /// With `carry`, links park when the generation ends and the next
    /// one takes them up where it can (`carry.rs`).
    pub(crate) fn on_demand<A>(
        (rank, generation, size): (Rank, Generation, usize),
        limits: StreamLimits,
        (dialer, accept): (Arc<dyn Dialer<R, W>>, impl FnOnce(Arc<Links<R, W>>) -> A),
        carry: Option<Arc<Carried<R, W>>>,
    ) -> Self
    where
        A: Future<Output = ()> + Send + 'static,
    {
        let patience = dialer.patience();
        let carry = carry.map(|carried| CarryTo { carried, patience });
        let mut t = Self::with_links(rank, generation, size, limits, carry);
        if let Some(c) = t.links.carry() {
            c.carried.enter(generation, &t.links);
        }
        let links = t.links.clone();
        let accepting = accept(t.links.clone());
        // One task accepts, and closes the links once the generation breaks.
        t.acceptor = Some(tokio::spawn(async move {
            tokio::join!(accepting, links.close_on_break());
        }));
        t.dialer = Some(dialer);
        t
    }

    fn empty(rank: Rank, generation: Generation, size: usize, limits: StreamLimits) -> Self {
        Self::with_links(rank, generation, size, limits, None)
    }

    fn with_links(
        rank: Rank,
        generation: Generation,
        size: usize,
        limits: StreamLimits,
        carry: Option<CarryTo<R, W>>,
    ) -> Self {
        let mailbox = Arc::new(Mailbox::new(generation));
        let max = limits.max_frame_bytes;
        let links = Links::new(rank, size, mailbox.clone(), max, carry);
        Self {
            rank,
            generation,
            mailbox,
            links: Arc::new(links),
            dialer: None,
            acceptor: None,
            limits,
        }
    }

    /// The peers this rank reaches through shared memory, in rank order
    /// (none but over TCP on one host; with connections on demand, only
    /// those linked so far).
    pub fn shared_memory_peers(&self) -> Vec<Rank> {
        self.links.shared_memory_peers()
    }

    /// How many links this rank holds: every other rank's once the full
    /// mesh is made; with connections on demand, those its collectives
    /// needed so far (one link a pair).
    pub fn link_count(&self) -> usize {
        self.links.count()
    }

    /// Writes one frame of `len` bytes (the parts' total, checked against
    /// the frame limit by the caller) from `parts`.
    async fn write_frame(
        &self,
        to: Rank,
        tag: Tag,
        parts: &[&[u8]],
        len: u32,
    ) -> Result<(), TransportError> {
        let writer = match (self.links.writer(to), &self.dialer) {
            (Some(w), _) => w,
            (None, Some(dialer)) => self.links.dialed(to, dialer.as_ref()).await?,
            (None, None) => {
                return Err(TransportError::InvalidRank {
                    rank: to,
                    size: self.size(),
                });
            }
        };
        let header = frame::encode_header(tag, len);
        let write = async {
            let mut w = writer.lock().await;
            if self.mailbox.broken().is_some() {
                // Broken while this send waited: its link may be another
                // generation's by now (`carry.rs`).
                return Err(std::io::ErrorKind::NotConnected.into());
            }
            let mut guard = AbandonGuard {
                links: &self.links,
                peer: to,
                armed: true,
            };
            let mut buf = Buf::chain(&header[..], Pieces::new(parts));
            // A TLS session may keep sealed bytes the socket did not take
            // yet until it is flushed; TCP's and QUIC's flushes are no-ops.
            let res = match w.write_all_buf(&mut buf).await {
                Ok(()) => w.flush().await,
                Err(e) => Err(e),
            };
            guard.armed = false;
            res
        };
        self.within_deadline(to, tag, write).await
    }

    /// Runs one socket operation on `peer`'s connection within `io_timeout`; an
    /// i/o error or the timeout breaks the generation.
    async fn within_deadline<T>(
        &self,
        peer: Rank,
        tag: Tag,
        op: impl Future<Output = std::io::Result<T>>,
    ) -> Result<T, TransportError> {
        match tokio::time::timeout(self.limits.io_timeout, op).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.mailbox.peer_lost(peer, io_cause(e));
                Err(self.broken_or(peer))
            }
            Err(_) => {
                self.mailbox.fail(TransportError::Timeout {
                    rank: peer,
                    tag,
                    after: self.limits.io_timeout,
                });
                Err(self.broken_or(peer))
            }
        }
    }

    fn broken_or(&self, peer: Rank) -> TransportError {
        self.mailbox.broken().unwrap_or(TransportError::PeerLost {
            rank: peer,
            generation: self.generation,
            cause: LossCause::Shutdown,
        })
    }
}

/// Breaks the generation if a send is abandoned half-written: the peer would
/// otherwise read the next frame's header from the middle of this payload.
/// The link cannot carry on either.
struct AbandonGuard<'a, R: ReadHalf, W: WriteHalf> {
    links: &'a Links<R, W>,
    peer: Rank,
    armed: bool,
}

impl<R: ReadHalf, W: WriteHalf> Drop for AbandonGuard<'_, R, W> {
    fn drop(&mut self) {
        if self.armed {
            self.links.poison(self.peer);
            self.links
                .mailbox
                .peer_lost(self.peer, LossCause::AbandonedSend);
        }
    }
}

/// Buffered reads for headers and small payloads; large payloads bypass it. Kept
/// small because whatever of a large payload it reads ahead is copied once more.
const READ_BUFFER: usize = 8 * 1024;

/// Reads `peer`'s frames from `r` into `mailbox` until the link ends: after
/// a goodbye, cleanly; at the peer's carry frame, by handing the reader to
/// `park` (the peer left this generation, which is over for this rank too;
/// without `park`, a loss).
pub(crate) async fn read_frames<R: ReadHalf>(
    peer: Rank,
    mut r: Reader<R>,
    max_payload: u32,
    mailbox: Arc<StreamMailbox<R>>,
    park: Option<Park<R>>,
) {
    let bye = goodbye(mailbox.generation());
    let pool = pool::RecvPool::default();
    let mut said_goodbye = false;
    let cause = loop {
        let (tag, len) = match read_header(&mut r, max_payload, bye).await {
            Ok(Header::Frame { tag, len }) => (tag, len),
            Ok(Header::Goodbye) => {
                said_goodbye = true;
                continue;
            }
            Ok(Header::Carry(process)) => match park {
                Some(park) => {
                    mailbox.peer_lost(peer, LossCause::Carried);
                    return park(r, process);
                }
                None => break LossCause::Carried,
            },
            Ok(Header::End) if said_goodbye => {
                mailbox.closed_cleanly(peer);
                return;
            }
            Ok(Header::End) => break LossCause::Closed,
            Err(cause) => break cause,
        };
        if len >= pool::POOLED_MIN {
            match lend(r, len, claim_soon(&mailbox, peer, tag).await).await {
                Loan::Returned(back) => {
                    r = back;
                    continue;
                }
                Loan::Declined(back) => r = back,
                Loan::Lost => break LossCause::AbandonedRecv,
            }
        }
        match read_payload(&mut r, len, &pool).await {
            Ok(payload) => mailbox.deliver(peer, tag, payload),
            Err(cause) => break cause,
        }
    };
    tracing::debug!(peer, %cause, "data-plane connection lost");
    mailbox.peer_lost(peer, cause);
}

/// Times the reader yields for a direct receive of a large frame that no one
/// waits for yet, before it reads the payload into a pooled buffer.
const CLAIM_YIELDS: u32 = 8;

/// The direct receive of the frame `(peer, tag)`, waiting a few yields for
/// one when no one waits for that frame at all: a collective posts its
/// receive as it sends, and a peer that is a little ahead (common over
/// shared memory) would otherwise have its payload copied twice, into the
/// pool and out of it (16% of a 16 MiB allreduce's CPU).
async fn claim_soon<R>(
    mailbox: &StreamMailbox<R>,
    peer: Rank,
    tag: Tag,
) -> Option<super::mailbox::DirectSender<Handoff<R>>> {
    for _ in 0..CLAIM_YIELDS {
        if let Some(tx) = mailbox.claim_direct(peer, tag) {
            return Some(tx);
        }
        if mailbox.awaited(peer, tag) {
            return None;
        }
        tokio::task::yield_now().await;
    }
    mailbox.claim_direct(peer, tag)
}

enum Loan<R> {
    /// The direct receive read the payload and gave the reader back.
    Returned(Reader<R>),
    /// Nobody took it; the payload is still to be read.
    Declined(Reader<R>),
    /// The receiving future was dropped while it held the reader.
    Lost,
}

async fn lend<R>(
    r: Reader<R>,
    len: usize,
    to: Option<super::mailbox::DirectSender<Handoff<R>>>,
) -> Loan<R> {
    let Some(tx) = to else {
        return Loan::Declined(r);
    };
    let (home, back) = tokio::sync::oneshot::channel();
    match tx.send(Ok(Delivery::Direct(Handoff {
        reader: r,
        len,
        home,
    }))) {
        Ok(()) => back.await.map_or(Loan::Lost, Loan::Returned),
        Err(Ok(Delivery::Direct(h))) => Loan::Declined(h.reader),
        Err(_) => Loan::Lost,
    }
}

fn io_cause(e: std::io::Error) -> LossCause {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            LossCause::Malformed("connection closed inside a frame")
        }
        kind => LossCause::Io(kind),
    }
}

/// What the next bytes on a connection are.
#[derive(Debug, PartialEq, Eq)]
enum Header {
    /// A clean end of stream, between frames.
    End,
    /// The peer's goodbye (tag `bye`, no payload): it is done, not lost.
    Goodbye,
    /// A frame, whose `len` payload bytes follow.
    Frame { tag: Tag, len: usize },
    /// The peer's carry frame (`carry.rs`): its link leaves this
    /// generation; the peer is this process.
    Carry(u64),
}

/// The next frame's header. A length above `max_payload`, or a goodbye that
/// announces a payload, is an error before anything is read for it.
async fn read_header<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max_payload: u32,
    bye: Tag,
) -> Result<Header, LossCause> {
    if r.fill_buf().await.map_err(io_cause)?.is_empty() {
        return Ok(Header::End);
    }
    let mut header = [0u8; frame::HEADER_LEN];
    r.read_exact(&mut header).await.map_err(io_cause)?;
    let (tag, len) = frame::decode_header(&header, max_payload)?;
    if tag == carry::carry_tag(bye.generation) {
        let mut process = [0u8; 8];
        if len != 8 {
            return Err(LossCause::Malformed("a carry frame of the wrong length"));
        }
        r.read_exact(&mut process).await.map_err(io_cause)?;
        return Ok(Header::Carry(u64::from_le_bytes(process)));
    }
    match (tag == bye, len) {
        (true, 0) => Ok(Header::Goodbye),
        (true, _) => Err(LossCause::Malformed("a goodbye frame with a payload")),
        (false, len) => Ok(Header::Frame {
            tag,
            len: len as usize,
        }),
    }
}

/// Reads a payload across `dst`'s parts: what the buffer read ahead with
/// the frame's header first, then straight from the link. Reading each part
/// through the buffer copied almost every byte twice: once the read-ahead
/// had put the parts out of step with the buffer, each part's last few bytes
/// refilled it with the next part's first 8 KiB (a fused step of 100 x 16
/// KiB tensors spent 80 µs of its 180 in that copy).
async fn read_parts<R: AsyncRead + Unpin>(
    reader: &mut Reader<R>,
    dst: &mut [&mut [u8]],
) -> std::io::Result<()> {
    for d in dst.iter_mut() {
        let ahead = reader.buffer();
        let n = ahead.len().min(d.len());
        d[..n].copy_from_slice(&ahead[..n]);
        std::pin::Pin::new(&mut *reader).consume(n);
        if n < d.len() {
            reader.get_mut().read_exact(&mut d[n..]).await?;
        }
    }
    Ok(())
}

async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    pool: &pool::RecvPool,
) -> Result<Bytes, LossCause> {
    if len < pool::POOLED_MIN {
        let mut v = vec![0u8; len];
        r.read_exact(&mut v).await.map_err(io_cause)?;
        Ok(Bytes::from(v))
    } else {
        let mut loan = pool.take(len);
        r.read_exact(loan.as_mut_slice()).await.map_err(io_cause)?;
        Ok(loan.into_bytes())
    }
}

impl<R: ReadHalf, W: WriteHalf> StreamTransport<R, W> {
    /// Reads a lent payload across `dst`'s parts and sends the reader home.
    async fn read_lent(
        &self,
        from: Rank,
        tag: Tag,
        h: Handoff<R>,
        dst: &mut [&mut [u8]],
    ) -> Result<(), TransportError> {
        let Handoff {
            mut reader,
            len,
            home,
        } = h;
        let expected = pieces::total(dst);
        if len != expected {
            // Keep the stream in step, then report the disagreement.
            let mut skip = vec![0u8; len];
            let read =
                tokio::time::timeout(self.limits.io_timeout, reader.read_exact(&mut skip)).await;
            if matches!(read, Ok(Ok(_))) {
                let _ = home.send(reader);
            }
            return Err(TransportError::WrongLength {
                rank: from,
                tag,
                expected,
                got: len,
            });
        }
        let res = tokio::time::timeout(self.limits.io_timeout, read_parts(&mut reader, dst)).await;
        match res {
            Ok(Ok(_)) => {
                let _ = home.send(reader);
                Ok(())
            }
            Ok(Err(e)) => {
                self.mailbox.peer_lost(from, io_cause(e));
                Err(self.broken_or(from))
            }
            Err(_) => {
                self.mailbox.fail(TransportError::Timeout {
                    rank: from,
                    tag,
                    after: self.limits.io_timeout,
                });
                Err(self.broken_or(from))
            }
        }
    }
}

impl<R: ReadHalf, W: WriteHalf> Transport for StreamTransport<R, W> {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> usize {
        self.links.size()
    }

    fn generation(&self) -> Generation {
        self.generation
    }

    async fn send(&self, to: Rank, tag: Tag, payload: &[u8]) -> Result<(), TransportError> {
        self.send_parts(to, tag, &[payload]).await
    }

    async fn send_parts(&self, to: Rank, tag: Tag, parts: &[&[u8]]) -> Result<(), TransportError> {
        check_peer(self.size(), self.generation, to, tag)?;
        if let Some(e) = self.mailbox.broken() {
            return Err(e);
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let Some(frame_len) = u32::try_from(len)
            .ok()
            .filter(|&l| l <= self.limits.max_frame_bytes)
        else {
            return Err(TransportError::PayloadTooLarge {
                len,
                limit: self.limits.max_frame_bytes.into(),
            });
        };
        if to == self.rank {
            self.mailbox
                .deliver(self.rank, tag, Bytes::from(parts.concat()));
            return Ok(());
        }
        self.write_frame(to, tag, parts, frame_len).await
    }

    async fn recv(&self, from: Rank, tag: Tag) -> Result<Bytes, TransportError> {
        check_peer(self.size(), self.generation, from, tag)?;
        self.mailbox.recv(from, tag, self.limits.io_timeout).await
    }

    async fn recv_into(&self, from: Rank, tag: Tag, dst: &mut [u8]) -> Result<(), TransportError> {
        self.recv_into_parts(from, tag, &mut [dst]).await
    }

    async fn recv_into_parts(
        &self,
        from: Rank,
        tag: Tag,
        dst: &mut [&mut [u8]],
    ) -> Result<(), TransportError> {
        check_peer(self.size(), self.generation, from, tag)?;
        match self
            .mailbox
            .recv_direct(from, tag, self.limits.io_timeout)
            .await?
        {
            Delivery::Whole(payload) => scatter_exact(from, tag, &payload, dst),
            Delivery::Direct(h) => self.read_lent(from, tag, h, dst).await,
        }
    }

    fn arrival(
        &self,
        ops: std::ops::Range<u64>,
    ) -> Option<impl std::future::Future<Output = ()> + Send + '_> {
        Some(self.mailbox.arrival(ops))
    }

    fn stale_refused(&self) -> u64 {
        self.mailbox.stale_refused()
    }

    fn breaker(&self) -> Breaker {
        Breaker::new(self.generation, self.mailbox.clone())
    }

    async fn shutdown(self) {
        drop(self.leave().await);
    }
}

impl<R: ReadHalf, W: WriteHalf> StreamTransport<R, W> {
    /// Says goodbye to every peer and ends the writing halves; returns them,
    /// for a transport whose streams need more to be closed well (a QUIC
    /// stream is kept until the peer has acknowledged the goodbye).
    pub(crate) async fn leave(mut self) -> Vec<W> {
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.abort();
            let _ = acceptor.await;
        }
        if let Some(c) = self.links.carry() {
            c.carried.leave(self.generation);
            if self.mailbox.broken().is_some() {
                // Over: the links park (their readers end at the peers'
                // carry frames) instead of saying goodbye.
                self.links.say_carry(true, self.limits.io_timeout).await;
                self.links = Arc::new(Links::new(0, 0, self.mailbox.clone(), 0, None));
                return Vec::new();
            }
            // Done: a goodbye on every link, through the writers its slots
            // share.
            let header = frame::encode_header(goodbye(self.generation), 0);
            self.links.goodbye(&header, self.limits.io_timeout).await;
            return Vec::new();
        }
        let empty = Arc::new(Links::new(0, 0, self.mailbox.clone(), 0, None));
        let links = std::mem::replace(&mut self.links, empty);
        let header = frame::encode_header(goodbye(self.generation), 0);
        let within = self.limits.io_timeout;
        let (writers, readers) = match Arc::try_unwrap(links) {
            Ok(links) => links.into_parts(),
            // An accept task's last answers may still hold the links for a
            // moment: the goodbye then goes through them.
            Err(links) => {
                links.goodbye(&header, within).await;
                return Vec::new();
            }
        };
        let mut out = Vec::with_capacity(writers.len());
        for mut w in writers {
            let _ = tokio::time::timeout(within, say_goodbye(&mut w, &header)).await;
            out.push(w);
        }
        readers.iter().for_each(JoinHandle::abort);
        out
    }
}

/// Writes the goodbye `header` on `w` and ends it.
pub(crate) async fn say_goodbye<W: AsyncWrite + Unpin>(
    w: &mut W,
    header: &[u8],
) -> std::io::Result<()> {
    w.write_all(header).await?;
    w.shutdown().await
}

impl<R, W> Drop for StreamTransport<R, W> {
    fn drop(&mut self) {
        // Closing the streams without a goodbye: peers treat this rank as crashed.
        if let Some(c) = self.links.carry() {
            c.carried.leave(self.generation);
        }
        if let Some(acceptor) = &self.acceptor {
            acceptor.abort();
        }
        self.links.abort_readers();
    }
}
