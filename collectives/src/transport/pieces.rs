//! A message made of several slices, sent and received without joining
//! them: a fused collective's cell lies in several tensors, one after
//! another, and goes on the wire as one message.

use std::io::IoSlice;

use bytes::Buf;

use crate::error::TransportError;
use crate::tag::{Rank, Tag};

/// Total bytes of `parts`.
pub(crate) fn total(parts: &[&mut [u8]]) -> usize {
    parts.iter().map(|p| p.len()).sum()
}

/// Copies a whole received message across `dst`'s parts, in order, if the
/// lengths agree.
pub(crate) fn scatter_exact(
    from: Rank,
    tag: Tag,
    payload: &[u8],
    dst: &mut [&mut [u8]],
) -> Result<(), TransportError> {
    let expected = total(dst);
    if payload.len() != expected {
        return Err(TransportError::WrongLength {
            rank: from,
            tag,
            expected,
            got: payload.len(),
        });
    }
    let mut rest = payload;
    for d in dst.iter_mut() {
        let (head, tail) = rest.split_at(d.len());
        d.copy_from_slice(head);
        rest = tail;
    }
    Ok(())
}

/// The slices of a message as one [`Buf`], for vectored writes.
#[derive(Debug)]
pub(crate) struct Pieces<'a> {
    parts: &'a [&'a [u8]],
    /// Bytes of `parts[0]` already consumed.
    at: usize,
}

impl<'a> Pieces<'a> {
    pub(crate) fn new(parts: &'a [&'a [u8]]) -> Self {
        let mut p = Pieces { parts, at: 0 };
        p.skip_empty();
        p
    }

    fn skip_empty(&mut self) {
        while let Some((first, rest)) = self.parts.split_first() {
            if self.at < first.len() {
                break;
            }
            self.parts = rest;
            self.at = 0;
        }
    }
}

impl Buf for Pieces<'_> {
    fn remaining(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum::<usize>() - self.at
    }

    fn chunk(&self) -> &[u8] {
        self.parts.first().map_or(&[], |p| &p[self.at..])
    }

    fn advance(&mut self, mut cnt: usize) {
        while cnt > 0 {
            let Some(first) = self.parts.first() else {
                return;
            };
            let step = cnt.min(first.len() - self.at);
            self.at += step;
            cnt -= step;
            self.skip_empty();
        }
    }

    fn chunks_vectored<'b>(&'b self, dst: &mut [IoSlice<'b>]) -> usize {
        let mut n = 0;
        let mut at = self.at;
        for p in self.parts {
            if n == dst.len() {
                break;
            }
            if at < p.len() {
                dst[n] = IoSlice::new(&p[at..]);
                n += 1;
            }
            at = 0;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_read_as_their_concatenation_whatever_the_steps() {
        let parts: [&[u8]; 5] = [b"ab", b"", b"cde", b"f", b""];
        for step in 1..=6 {
            let mut b = Pieces::new(&parts);
            let mut got = Vec::new();
            while b.has_remaining() {
                assert_eq!(b.remaining(), 6 - got.len());
                let mut io = [IoSlice::new(&[]); 2];
                let n = b.chunks_vectored(&mut io);
                assert!(n >= 1 && !io[0].is_empty(), "step {step}");
                let take = step.min(b.chunk().len());
                got.extend_from_slice(&b.chunk()[..take]);
                b.advance(take);
            }
            assert_eq!(got, b"abcdef", "step {step}");
        }
    }

    #[test]
    fn a_message_is_scattered_only_when_the_lengths_agree() {
        let (mut a, mut b) = ([0u8; 2], [0u8; 3]);
        let tag = Tag::new(crate::tag::Generation(1), 0, 0);
        scatter_exact(0, tag, b"hello", &mut [&mut a, &mut b]).unwrap();
        assert_eq!((&a, &b), (b"he", b"llo"));
        let e = scatter_exact(3, tag, b"hi", &mut [&mut a, &mut b]).unwrap_err();
        assert!(
            matches!(
                e,
                TransportError::WrongLength {
                    rank: 3,
                    expected: 5,
                    got: 2,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
