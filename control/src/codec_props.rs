//! Property test of sealed frames (after the handshake): a stream of frames
//! a worker sealed, mutated by [`testkit`] (bit flips, truncation, forged
//! lengths, inserted, removed and repeated bytes), read by the coordinator's
//! sealed codec. Whatever arrives, the codec hands on only messages the
//! worker sent, in order, and ends with a typed error at the first frame
//! that is not one of them; it never panics.

use bytes::BytesMut;
use testkit::proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

use super::{CodecError, FrameCodec};
use crate::Generation;
use crate::messages::{PendingReport, WorkerMsg};

const TO_COORDINATOR: [u8; 32] = [3; 32];
const TO_WORKER: [u8; 32] = [4; 32];

fn sent() -> Vec<WorkerMsg> {
    (0..4)
        .map(|g| WorkerMsg::Heartbeat {
            generation: Generation(g),
            steps: 0,
            collective_bytes: 0,
            collective_wait: std::time::Duration::ZERO,
            pending: PendingReport::bounded([("grad.0", std::time::Duration::from_millis(g))]),
        })
        .collect()
}

/// The worker's sealed stream of [`sent`].
fn stream() -> Vec<u8> {
    let mut worker = FrameCodec::<(), WorkerMsg>::default();
    worker.seal(&TO_COORDINATOR, &TO_WORKER);
    let mut out = BytesMut::new();
    for m in sent() {
        worker.encode(m, &mut out).expect("encodable");
    }
    out.to_vec()
}

#[test]
fn sealed_frames_are_the_senders_or_a_typed_error() {
    let sent = sent();
    testkit::check("sealed frames", testkit::mutated(vec![stream()]), |input| {
        let mut coordinator = FrameCodec::<WorkerMsg, ()>::default();
        coordinator.seal(&TO_WORKER, &TO_COORDINATOR);
        let mut buf = BytesMut::from(&input[..]);
        let mut got = Vec::new();
        let end = loop {
            match coordinator.decode(&mut buf) {
                Ok(Some(m)) => got.push(m),
                Ok(None) => break coordinator.decode_eof(&mut buf).map(|_| ()),
                Err(e) => break Err(e),
            }
        };
        prop_assert!(got.len() <= sent.len());
        prop_assert_eq!(&got[..], &sent[..got.len()]);
        if got.len() < sent.len() && end.is_ok() {
            // Frames missing at a clean end: only a cut between frames.
            prop_assert!(buf.is_empty());
        }
        if let Err(e) = end {
            let typed = matches!(
                e,
                CodecError::Forged { .. }
                    | CodecError::TooLarge
                    | CodecError::Decode(_)
                    | CodecError::Io(_)
            );
            prop_assert!(typed, "{e:?}");
        }
        Ok(())
    });
}
