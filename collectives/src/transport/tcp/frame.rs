//! Data frames on a TCP connection: a fixed 24-byte little-endian header, then the
//! payload.
//!
//! ```text
//! 0        8        16    20    24
//! +--------+--------+-----+-----+--------------
//! | gen    | op id  | step| len | payload (len bytes)
//! +--------+--------+-----+-----+--------------
//! ```

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;

use crate::error::LossCause;
use crate::tag::{Generation, Tag};

pub(crate) const HEADER_LEN: usize = 24;

pub(crate) fn encode_header(tag: Tag, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&tag.generation.0.to_le_bytes());
    h[8..16].copy_from_slice(&tag.op_id.to_le_bytes());
    h[16..20].copy_from_slice(&tag.step.to_le_bytes());
    h[20..24].copy_from_slice(&len.to_le_bytes());
    h
}

/// One decoded data frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) tag: Tag,
    pub(crate) payload: Bytes,
}

/// Why a connection's byte stream could not be decoded.
#[derive(Debug)]
pub(crate) enum FrameError {
    Io(std::io::ErrorKind),
    TooLarge { len: u64, limit: u64 },
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        FrameError::Io(e.kind())
    }
}

impl From<FrameError> for LossCause {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Io(std::io::ErrorKind::UnexpectedEof) => LossCause::Closed,
            FrameError::Io(kind) => LossCause::Io(kind),
            FrameError::TooLarge { len, limit } => LossCause::FrameTooLarge { len, limit },
        }
    }
}

/// Splits a connection's byte stream into frames without copying payloads: each
/// payload is a view into the read buffer, which is reclaimed once the view is
/// dropped.
#[derive(Debug)]
pub(crate) struct FrameDecoder {
    pub(crate) max_payload: u64,
}

impl Decoder for FrameDecoder {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if src.len() < HEADER_LEN {
            return Ok(None);
        }
        let mut h = &src[..HEADER_LEN];
        let generation = Generation(h.get_u64_le());
        let op_id = h.get_u64_le();
        let step = h.get_u32_le();
        let len = h.get_u32_le();
        if u64::from(len) > self.max_payload {
            return Err(FrameError::TooLarge {
                len: len.into(),
                limit: self.max_payload,
            });
        }
        let total = HEADER_LEN + len as usize;
        if src.len() < total {
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(HEADER_LEN);
        let payload = src.split_to(len as usize).freeze();
        Ok(Some(Frame {
            tag: Tag::new(generation, op_id, step),
            payload,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec() -> FrameDecoder {
        FrameDecoder { max_payload: 1024 }
    }

    #[test]
    fn round_trip_across_partial_input() {
        let tag = Tag::new(Generation(5), 77, 3);
        let mut wire = encode_header(tag, 4).to_vec();
        wire.extend_from_slice(b"abcd");
        let mut d = dec();
        let mut buf = BytesMut::new();
        for (i, b) in wire.iter().enumerate() {
            buf.extend_from_slice(&[*b]);
            let out = d.decode(&mut buf).unwrap();
            if i + 1 < wire.len() {
                assert!(out.is_none(), "frame completed early at byte {i}");
            } else {
                let f = out.unwrap();
                assert_eq!(f.tag, tag);
                assert_eq!(f.payload, "abcd");
            }
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn several_frames_in_one_read() {
        let mut buf = BytesMut::new();
        for step in 0..3u32 {
            buf.extend_from_slice(&encode_header(Tag::new(Generation(1), 2, step), 1));
            buf.extend_from_slice(&[step as u8]);
        }
        let mut d = dec();
        for step in 0..3u32 {
            let f = d.decode(&mut buf).unwrap().unwrap();
            assert_eq!((f.tag.step, f.payload[0]), (step, step as u8));
        }
        assert!(d.decode(&mut buf).unwrap().is_none());
    }

    #[test]
    fn oversized_length_is_an_error_before_any_allocation() {
        let mut buf = BytesMut::from(&encode_header(Tag::new(Generation(0), 0, 0), u32::MAX)[..]);
        let cap = buf.capacity();
        match dec().decode(&mut buf) {
            Err(FrameError::TooLarge { len, limit: 1024 }) => assert_eq!(len, u64::from(u32::MAX)),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert_eq!(buf.capacity(), cap);
    }

    #[test]
    fn empty_payload_is_a_frame() {
        let mut buf = BytesMut::from(&encode_header(Tag::new(Generation(0), 1, 1), 0)[..]);
        let f = dec().decode(&mut buf).unwrap().unwrap();
        assert!(f.payload.is_empty());
    }
}
