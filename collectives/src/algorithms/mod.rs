//! Collective algorithms over any [`Transport`]. Each takes its schedule from
//! [`crate::schedule`] and only moves and combines bytes.

use bytes::Bytes;

use crate::dtype::Element;
use crate::error::{CollectiveError, Result, TransportError};
use crate::reduce::Combine;
use crate::tag::{Rank, Tag};
use crate::transport::Transport;

mod alltoall;
mod announce;
mod broadcast;
mod cells;
mod doubling;
mod gather;
mod hierarchical;
mod ring;

pub(crate) use alltoall::{alltoall, count_from_wire, exchange_counts};
pub(crate) use announce::announce;
pub(crate) use broadcast::pipeline_broadcast;
pub(crate) use cells::Cutter;
pub(crate) use doubling::{doubling_allreduce, doubling_parts};
pub(crate) use hierarchical::{hierarchical_allgatherv, hierarchical_allreduce};
pub(crate) use ring::{ring_pass, ring_pass_parts};

/// One collective operation in flight: its transport and op id.
pub(crate) struct Op<'a, X> {
    pub(crate) tr: &'a X,
    pub(crate) id: u64,
}

impl<X: Transport> Op<'_, X> {
    pub(crate) fn tag(&self, step: usize) -> Result<Tag> {
        let step = u32::try_from(step).map_err(|_| CollectiveError::TooManyMessages)?;
        Ok(Tag::new(self.tr.generation(), self.id, step))
    }

    pub(crate) async fn send<T: Element>(&self, to: Rank, step: usize, data: &[T]) -> Result<()> {
        let tag = self.tag(step)?;
        Ok(self.tr.send(to, tag, bytemuck::cast_slice(data)).await?)
    }

    /// Receives a message that must hold exactly `expected` elements of `T`.
    pub(crate) async fn recv<T: Element>(
        &self,
        from: Rank,
        step: usize,
        expected: usize,
    ) -> Result<Bytes> {
        let tag = self.tag(step)?;
        let payload = self.tr.recv(from, tag).await?;
        let want = expected * std::mem::size_of::<T>();
        if payload.len() != want {
            return Err(CollectiveError::LengthMismatch {
                from: self.tr.world_rank(from),
                tag,
                expected: want,
                got: payload.len(),
            });
        }
        Ok(payload)
    }
}

impl<X: Transport> Op<'_, X> {
    /// Sends the concatenation of `parts` as one message.
    pub(crate) async fn send_parts<T: Element>(
        &self,
        to: Rank,
        step: usize,
        parts: &[&[T]],
    ) -> Result<()> {
        let tag = self.tag(step)?;
        let bytes: Vec<&[u8]> = parts.iter().map(|p| bytemuck::cast_slice(p)).collect();
        Ok(self.tr.send_parts(to, tag, &bytes).await?)
    }

    /// Receives a message of exactly `dst.len()` elements straight into `dst`.
    pub(crate) async fn recv_into<T: Element>(
        &self,
        from: Rank,
        step: usize,
        dst: &mut [T],
    ) -> Result<()> {
        self.recv_into_parts(from, step, &mut [dst]).await
    }

    /// Receives a message of exactly the parts' total length across them.
    pub(crate) async fn recv_into_parts<T: Element>(
        &self,
        from: Rank,
        step: usize,
        dst: &mut [&mut [T]],
    ) -> Result<()> {
        let tag = self.tag(step)?;
        let mut bytes: Vec<&mut [u8]> = dst
            .iter_mut()
            .map(|p| bytemuck::cast_slice_mut(p))
            .collect();
        match self.tr.recv_into_parts(from, tag, &mut bytes).await {
            Ok(()) => Ok(()),
            Err(TransportError::WrongLength {
                rank,
                tag,
                expected,
                got,
            }) => Err(CollectiveError::LengthMismatch {
                from: rank,
                tag,
                expected,
                got,
            }),
            Err(e) => Err(e.into()),
        }
    }
}

/// The pieces of a cell, to read.
pub(crate) fn shared<'p, T>(parts: &'p [&mut [T]]) -> Vec<&'p [T]> {
    parts.iter().map(|p| &**p).collect()
}

/// Combines `payload` into the concatenation of `dst`'s parts. The caller
/// has checked that the lengths agree.
pub(crate) fn apply_parts<T: Element>(dst: &mut [&mut [T]], payload: &[u8], combine: Combine) {
    let mut rest = payload;
    for d in dst.iter_mut() {
        let (head, tail) = rest.split_at(std::mem::size_of_val(&**d).min(rest.len()));
        apply(d, head, Some(combine));
        rest = tail;
    }
}

/// Combines `payload` (elements of `T`, any alignment) into `dst`, or copies it
/// when `combine` is `None`. The caller has checked the length.
pub(crate) fn apply<T: Element>(dst: &mut [T], payload: &[u8], combine: Option<Combine>) {
    let Some(op) = combine else {
        bytemuck::cast_slice_mut::<T, u8>(dst).copy_from_slice(payload);
        return;
    };
    match bytemuck::try_cast_slice::<u8, T>(payload) {
        Ok(src) => T::combine(dst, src, op),
        // Received buffers are usually aligned; copy the rare one that is not.
        Err(_) => T::combine(dst, &bytemuck::pod_collect_to_vec::<u8, T>(payload), op),
    }
}
