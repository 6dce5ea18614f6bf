//! Frames: a 4-byte big-endian length (tokio-util's `LengthDelimitedCodec`, with a
//! maximum) around one bincode-encoded message (with the same limit, so a forged
//! length inside a message cannot allocate either).

use std::marker::PhantomData;

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

/// Largest control frame. Messages are small; an assignment for 10 000 ranks is
/// about 300 KiB.
pub const MAX_FRAME: usize = 1 << 20;

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("frame longer than {MAX_FRAME} bytes")]
    TooLarge,
    #[error("undecodable frame: {0}")]
    Decode(String),
    #[error("message cannot be encoded: {0}")]
    Encode(String),
    #[error("i/o error: {0:?}")]
    Io(std::io::ErrorKind),
}

impl From<std::io::Error> for CodecError {
    fn from(e: std::io::Error) -> Self {
        // LengthDelimitedCodec reports an oversized frame as InvalidData.
        match e.kind() {
            std::io::ErrorKind::InvalidData => CodecError::TooLarge,
            k => CodecError::Io(k),
        }
    }
}

/// Decodes `In` and encodes `Out`.
#[derive(Debug)]
pub struct FrameCodec<In, Out> {
    frames: LengthDelimitedCodec,
    _types: PhantomData<fn() -> (In, Out)>,
}

impl<In, Out> Default for FrameCodec<In, Out> {
    fn default() -> Self {
        Self {
            frames: LengthDelimitedCodec::builder()
                .max_frame_length(MAX_FRAME)
                .new_codec(),
            _types: PhantomData,
        }
    }
}

impl<In: DeserializeOwned, Out> Decoder for FrameCodec<In, Out> {
    type Item = In;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, CodecError> {
        let Some(frame) = self.frames.decode(src)? else {
            return Ok(None);
        };
        let (msg, used) = bincode::serde::decode_from_slice(&frame, bincode_config())
            .map_err(|e| CodecError::Decode(e.to_string()))?;
        if used != frame.len() {
            return Err(CodecError::Decode(format!(
                "{} bytes after the message",
                frame.len() - used
            )));
        }
        Ok(Some(msg))
    }
}

impl<In, Out: Serialize> Encoder<Out> for FrameCodec<In, Out> {
    type Error = CodecError;

    fn encode(&mut self, msg: Out, dst: &mut BytesMut) -> Result<(), CodecError> {
        let bytes = bincode::serde::encode_to_vec(&msg, bincode_config())
            .map_err(|e| CodecError::Encode(e.to_string()))?;
        if bytes.len() > MAX_FRAME {
            return Err(CodecError::TooLarge);
        }
        self.frames.encode(Bytes::from(bytes), dst)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{
        CoordinatorMsg, MAX_PENDING_NAME, MAX_PENDING_REPORTED, PendingReport, WorkerMsg,
    };

    type Coord = FrameCodec<WorkerMsg, CoordinatorMsg>;
    type Work = FrameCodec<CoordinatorMsg, WorkerMsg>;

    #[test]
    fn round_trip_across_partial_input() {
        let msg = WorkerMsg::Heartbeat {
            generation: crate::Generation(7),
            pending: PendingReport::default(),
        };
        let mut wire = BytesMut::new();
        Work::default().encode(msg.clone(), &mut wire).unwrap();
        Work::default().encode(msg.clone(), &mut wire).unwrap();
        let mut dec = Coord::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in wire.iter() {
            buf.extend_from_slice(&[*b]);
            if let Some(m) = dec.decode(&mut buf).unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, vec![msg.clone(), msg]);
    }

    #[test]
    fn the_largest_heartbeat_fits_in_a_frame() {
        let names: Vec<String> = (0..MAX_PENDING_REPORTED * 2)
            .map(|i| format!("{i}{}", "\u{e9}".repeat(MAX_PENDING_NAME)))
            .collect();
        let pending =
            PendingReport::bounded(names.iter().map(|n| (n.as_str(), std::time::Duration::MAX)));
        let msg = WorkerMsg::Heartbeat {
            generation: crate::Generation(u64::MAX),
            pending,
        };
        let mut wire = BytesMut::new();
        Work::default().encode(msg.clone(), &mut wire).unwrap();
        assert!(wire.len() < MAX_FRAME / 4, "{} bytes", wire.len());
        assert_eq!(Coord::default().decode(&mut wire).unwrap(), Some(msg));
    }

    #[test]
    fn oversized_length_prefix_is_refused_before_allocation() {
        let mut buf = BytesMut::from(&(u32::MAX).to_be_bytes()[..]);
        assert_eq!(Coord::default().decode(&mut buf), Err(CodecError::TooLarge));
    }

    #[test]
    fn garbage_and_trailing_bytes_are_decode_errors() {
        let mut buf = BytesMut::from(&[0, 0, 0, 3, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            Coord::default().decode(&mut buf),
            Err(CodecError::Decode(_))
        ));
        let mut one = BytesMut::new();
        Work::default()
            .encode(
                WorkerMsg::Heartbeat {
                    generation: crate::Generation(1),
                    pending: PendingReport::default(),
                },
                &mut one,
            )
            .unwrap();
        let body = one.split_off(4);
        let mut padded = BytesMut::from(&((body.len() as u32 + 2).to_be_bytes())[..]);
        padded.extend_from_slice(&body);
        padded.extend_from_slice(&[0, 0]);
        assert!(matches!(
            Coord::default().decode(&mut padded),
            Err(CodecError::Decode(_))
        ));
    }

    #[test]
    fn a_forged_length_inside_a_message_does_not_allocate() {
        // Register's host string claiming 2^40 bytes, inside a small frame.
        let mut body = vec![1u8]; // variant index of Register
        body.extend_from_slice(&[253]); // bincode varint marker for u64
        body.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let mut buf = BytesMut::from(&(body.len() as u32).to_be_bytes()[..]);
        buf.extend_from_slice(&body);
        assert!(matches!(
            Coord::default().decode(&mut buf),
            Err(CodecError::Decode(_))
        ));
    }
}
