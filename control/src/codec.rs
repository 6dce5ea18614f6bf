//! Frames: a 4-byte big-endian length (tokio-util's `LengthDelimitedCodec`, with a
//! maximum) around one bincode-encoded message (with the same limit, so a forged
//! length inside a message cannot allocate either), and after the handshake a
//! 32-byte tag that authenticates the frame ([`crate::seal`]).

use std::marker::PhantomData;

use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

use crate::seal::{Sealing, TAG};

/// Largest control frame. Messages are small; an assignment for 10 000 ranks is
/// about 300 KiB.
pub const MAX_FRAME: usize = 1 << 20;

/// Bytes of a frame's length field (`LengthDelimitedCodec`'s default: big
/// endian, counting what follows it).
const LENGTH: usize = 4;

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
    /// The tag of frame `frame` (counted from the handshake) does not verify:
    /// it was injected, replayed, reordered or altered.
    #[error("frame {frame} after the handshake is not authentic")]
    Forged { frame: u64 },
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
    /// Set once the handshake has proven both ends.
    sealing: Option<Sealing>,
    _types: PhantomData<fn() -> (In, Out)>,
}

impl<In, Out> FrameCodec<In, Out> {
    /// A codec in the same state (tests: try a frame without consuming it).
    #[cfg(test)]
    fn clone_state(&self) -> Self {
        Self {
            frames: LengthDelimitedCodec::builder()
                .max_frame_length(MAX_FRAME + TAG)
                .new_codec(),
            sealing: self.sealing.clone(),
            _types: PhantomData,
        }
    }

    /// From now on every frame sent is tagged under `send` and every frame
    /// received must verify under `recv`.
    pub(crate) fn seal(&mut self, send: &[u8; 32], recv: &[u8; 32]) {
        self.sealing = Some(Sealing::new(send, recv));
    }
}

impl<In, Out> Default for FrameCodec<In, Out> {
    fn default() -> Self {
        Self {
            frames: LengthDelimitedCodec::builder()
                .max_frame_length(MAX_FRAME + TAG)
                .new_codec(),
            sealing: None,
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
        let frame = match self.sealing.as_mut() {
            Some(s) => s
                .open(&frame)
                .map_err(|frame| CodecError::Forged { frame })?,
            None => &frame[..],
        };
        if frame.len() > MAX_FRAME {
            return Err(CodecError::TooLarge);
        }
        let (msg, used) = bincode::serde::decode_from_slice(frame, bincode_config())
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

    /// Writes the frame straight into `dst` (the connection's write buffer,
    /// whose room outlives the frame): the length, the message, the tag.
    /// The same bytes as `LengthDelimitedCodec` around the encoded message,
    /// with no buffer of its own per frame. A message that cannot be encoded
    /// or is too long leaves `dst` as it was.
    fn encode(&mut self, msg: Out, dst: &mut BytesMut) -> Result<(), CodecError> {
        let start = dst.len();
        dst.put_u32(0);
        let written =
            bincode::serde::encode_into_std_write(&msg, &mut dst.writer(), bincode_config());
        let body = dst.len() - start - LENGTH;
        let tag = if self.sealing.is_some() { TAG } else { 0 };
        let length = match (written, u32::try_from(body + tag)) {
            (Ok(_), Ok(length)) if body <= MAX_FRAME => length,
            (Err(e), _) => {
                dst.truncate(start);
                return Err(CodecError::Encode(e.to_string()));
            }
            _ => {
                dst.truncate(start);
                return Err(CodecError::TooLarge);
            }
        };
        if let Some(s) = self.sealing.as_mut() {
            let tag = s.tag(&dst[start + LENGTH..]);
            dst.extend_from_slice(&tag);
        }
        dst[start..start + LENGTH].copy_from_slice(&length.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
#[path = "codec_props.rs"]
mod props;

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
            steps: 0,
            collective_bytes: 0,
            collective_wait: std::time::Duration::ZERO,
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
            steps: 0,
            collective_bytes: 0,
            collective_wait: std::time::Duration::ZERO,
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
                    steps: 0,
                    collective_bytes: 0,
                    collective_wait: std::time::Duration::ZERO,
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

    fn heartbeat(g: u64) -> WorkerMsg {
        WorkerMsg::Heartbeat {
            generation: crate::Generation(g),
            steps: 0,
            collective_bytes: 0,
            collective_wait: std::time::Duration::ZERO,
            pending: PendingReport::default(),
        }
    }

    /// The frame the encoder writes into the connection's buffer is, byte
    /// for byte, `LengthDelimitedCodec` around the encoded message and its
    /// tag, after whatever the buffer held; a message too long for a frame
    /// leaves the buffer as it was.
    #[test]
    fn frames_are_written_in_place_as_length_delimited_messages() {
        let keys = crate::FrameKeys {
            to_worker: [1; 32],
            to_coordinator: [2; 32],
        };
        let msg = CoordinatorMsg::Stop {
            reason: "x".repeat(300),
        };
        for sealed in [false, true] {
            let mut codec = Coord::default();
            let mut sealing = Sealing::new(&keys.to_worker, &keys.to_coordinator);
            if sealed {
                codec.seal(&keys.to_worker, &keys.to_coordinator);
            }
            let mut expected = BytesMut::from(&b"held"[..]);
            let mut wire = expected.clone();
            for _ in 0..3 {
                codec.encode(msg.clone(), &mut wire).unwrap();
                let mut body = bincode::serde::encode_to_vec(&msg, bincode_config()).unwrap();
                if sealed {
                    let tag = sealing.tag(&body);
                    body.extend_from_slice(&tag);
                }
                LengthDelimitedCodec::new()
                    .encode(bytes::Bytes::from(body), &mut expected)
                    .unwrap();
            }
            assert_eq!(wire, expected, "sealed: {sealed}");
            let huge = CoordinatorMsg::Stop {
                reason: "x".repeat(MAX_FRAME),
            };
            assert_eq!(codec.encode(huge, &mut wire), Err(CodecError::TooLarge));
            assert_eq!(
                wire, expected,
                "a refused message leaves the buffer (sealed: {sealed})"
            );
        }
    }

    /// A worker's and a coordinator's codec of one connection, sealed.
    fn sealed(keys: &crate::FrameKeys) -> (Work, Coord) {
        let (mut w, mut c) = (Work::default(), Coord::default());
        w.seal(&keys.to_coordinator, &keys.to_worker);
        c.seal(&keys.to_worker, &keys.to_coordinator);
        (w, c)
    }

    #[test]
    fn sealed_frames_refuse_injection_replay_reordering_and_other_links() {
        let k = crate::Secret::generate().unwrap();
        let (n1, n2) = (crate::nonce().unwrap(), crate::nonce().unwrap());
        let keys = k.frame_keys(&n1, &n2);
        let (mut w, mut c) = sealed(&keys);
        let frame = |w: &mut Work, g| {
            let mut b = BytesMut::new();
            w.encode(heartbeat(g), &mut b).unwrap();
            b
        };
        let (f0, f1, f2) = (frame(&mut w, 0), frame(&mut w, 1), frame(&mut w, 2));
        assert_eq!(c.decode(&mut f0.clone()).unwrap(), Some(heartbeat(0)));
        // The same frame again: a replay.
        assert_eq!(
            c.clone_state().decode(&mut f0.clone()),
            Err(CodecError::Forged { frame: 1 })
        );
        // Frame 2 before frame 1: reordered (or 1 dropped).
        assert_eq!(
            c.clone_state().decode(&mut f2.clone()),
            Err(CodecError::Forged { frame: 1 })
        );
        // Unsealed, though well formed: injected.
        let mut plain = BytesMut::new();
        Work::default().encode(heartbeat(1), &mut plain).unwrap();
        assert_eq!(
            c.clone_state().decode(&mut plain),
            Err(CodecError::Forged { frame: 1 })
        );
        // Sealed for another connection of the same job.
        let other = k.frame_keys(&crate::nonce().unwrap(), &n2);
        let (mut ow, _) = sealed(&other);
        let mut foreign = frame(&mut ow, 1);
        assert_eq!(
            c.clone_state().decode(&mut foreign),
            Err(CodecError::Forged { frame: 1 })
        );
        // One bit flipped.
        let mut flipped = f1.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            c.clone_state().decode(&mut flipped),
            Err(CodecError::Forged { frame: 1 })
        );
        // Too short to hold a tag.
        let mut short = BytesMut::from(&[0, 0, 0, 3, 1, 2, 3][..]);
        assert_eq!(
            c.clone_state().decode(&mut short),
            Err(CodecError::Forged { frame: 1 })
        );
        // The real next frame still verifies.
        assert_eq!(c.decode(&mut f1.clone()).unwrap(), Some(heartbeat(1)));
        assert_eq!(c.decode(&mut f2.clone()).unwrap(), Some(heartbeat(2)));
    }
}
