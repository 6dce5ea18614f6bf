//! Property tests of the control plane's decoders, which read what any
//! process that reaches the coordinator's port (or pretends to be the
//! coordinator) sends: frames in both directions, split at random points as
//! partial reads split them, and the authentication handshake at both ends.
//! Inputs are random bytes and valid encodings with bits flipped, cut short
//! or with forged lengths ([`testkit`]); every one must decode to a message
//! or end in a typed error, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use control::{
    Assignment, Autotune, CodecError, CoordinatorMsg, FrameCodec, Generation, HandshakeError, Knob,
    Knobs, PeerAddress, PendingReport, Registration, Secret, WorkerMsg,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use testkit::proptest::collection::vec;
use testkit::proptest::prelude::*;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio_util::codec::{Decoder, Encoder};

fn addr(port: u16) -> PeerAddress {
    PeerAddress::tcp(SocketAddr::from(([10, 0, 0, 7], port)))
}

/// One of each worker message, with every field used.
fn worker_msgs() -> Vec<WorkerMsg> {
    let names = ["grad.0", "layer/7/weights", "\u{e9}t\u{e9}", ""];
    vec![
        WorkerMsg::Prove {
            nonce: [7; 32],
            proof: [0xa5; 32],
        },
        WorkerMsg::Register(Registration {
            host: "node-1.example".into(),
            slot: 3,
            pid: 4242,
            data_addr: addr(40000),
            generation: Generation(0),
        }),
        WorkerMsg::Heartbeat {
            generation: Generation(12),
            steps: 0,
            collective_bytes: 0,
            collective_wait: std::time::Duration::ZERO,
            pending: PendingReport::bounded(
                names.iter().map(|n| (*n, Duration::from_millis(1500))),
            ),
        },
        WorkerMsg::Rejoin {
            generation: Generation(u64::MAX),
            data_addr: PeerAddress {
                endpoints: std::sync::Arc::new([]),
            },
        },
    ]
}

/// One of each coordinator message, with every field used.
fn coordinator_msgs() -> Vec<CoordinatorMsg> {
    let knobs = Knobs {
        timeline: Some("/tmp/timeline.json".into()),
        stall_warning_ms: Some(60_000),
        stall_shutdown_ms: Some(1),
        autotune: Some(Autotune {
            log_file: Some("at.csv".into()),
            warmup_samples: 3,
            steps_per_sample: 10,
            max_samples: 20,
            gaussian_process_noise: 0.8,
            fixed: vec![Knob::CycleTime, Knob::SegmentSize],
        }),
        ..Knobs::default()
    };
    vec![
        CoordinatorMsg::Challenge { nonce: [1; 32] },
        CoordinatorMsg::Proven { proof: [2; 32] },
        CoordinatorMsg::Assign(Assignment {
            generation: Generation(3),
            rank: 1,
            size: 4,
            local_rank: 1,
            local_size: 2,
            cross_rank: 0,
            cross_size: 2,
            peers: (0..4).map(|p| addr(5000 + p)).collect::<Vec<_>>().into(),
            hosts: vec![0, 0, 1, 1].into(),
            data_token: 0xdead_beef,
            knobs,
            tls: Some(control::TlsGrant {
                ca: vec![0x30; 300],
                leaf: vec![0x30; 280],
            }),
        }),
        CoordinatorMsg::Stop {
            reason: "rank 2 failed".into(),
        },
        CoordinatorMsg::Reset {
            generation: Generation(4),
        },
        CoordinatorMsg::HostsUpdated {
            generation: Generation(5),
        },
        CoordinatorMsg::Leave {
            reason: "host removed".into(),
        },
    ]
}

/// `m` in a frame.
fn frame<M: Serialize>(m: M) -> Vec<u8> {
    let mut b = BytesMut::new();
    FrameCodec::<(), M>::default().encode(m, &mut b).unwrap();
    b.to_vec()
}

/// Every message framed alone, and pairs of them back to back.
fn frames<M: Clone + Serialize>(msgs: &[M]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = msgs.iter().cloned().map(frame).collect();
    for (a, b) in msgs.iter().zip(msgs.iter().skip(1)) {
        out.push([frame(a.clone()), frame(b.clone())].concat());
    }
    out
}

/// Checks that `m` encodes again to something that decodes to the same
/// encoding: whatever the decoder accepts is a well-formed message.
fn round_trips<M: Clone + Serialize + DeserializeOwned>(m: &M) {
    let first = frame(m.clone());
    let mut buf = BytesMut::from(&first[..]);
    let again: M = FrameCodec::<M, M>::default()
        .decode(&mut buf)
        .unwrap()
        .unwrap();
    assert_eq!(first, frame(again), "a decoded message does not round-trip");
}

/// Feeds `input` to a decoder in chunks of the given sizes (the rest at
/// once), as reads deliver it, then ends the stream; returns what was
/// decoded, or the first error. Every decoded message must have used up
/// bytes and must round-trip.
fn decode_stream<M>(input: &[u8], chunks: &[usize]) -> Result<Vec<M>, CodecError>
where
    M: Clone + Serialize + DeserializeOwned,
{
    let mut codec = FrameCodec::<M, M>::default();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut rest = input;
    for size in chunks.iter().copied().chain(std::iter::once(usize::MAX)) {
        let (now, later) = rest.split_at(size.min(rest.len()));
        buf.extend_from_slice(now);
        rest = later;
        loop {
            let before = buf.len();
            match codec.decode(&mut buf)? {
                Some(m) => {
                    assert!(buf.len() < before, "a message from no bytes");
                    round_trips(&m);
                    got.push(m);
                }
                None => break,
            }
        }
        if rest.is_empty() {
            break;
        }
    }
    if let Some(m) = codec.decode_eof(&mut buf)? {
        round_trips(&m);
        got.push(m);
    }
    Ok(got)
}

fn chunks() -> impl Strategy<Value = Vec<usize>> {
    vec(1usize..64, 0..8)
}

/// Frames of `msgs` as [`testkit::bytes`] makes inputs of them, and half as
/// many again whose message bytes are mutated under a length prefix that
/// fits them, so that the mutations reach the message decoder.
fn inputs<M: Clone + Serialize>(msgs: &[M]) -> impl Strategy<Value = Vec<u8>> + use<M> {
    let bodies: Vec<Vec<u8>> = msgs
        .iter()
        .map(|m| frame(m.clone())[4..].to_vec())
        .collect();
    let reframed = testkit::mutated(bodies).prop_map(|body| {
        let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
        [&len.to_be_bytes()[..], &body].concat()
    });
    prop_oneof![2 => testkit::bytes(frames(msgs)), 1 => reframed]
}

#[test]
fn frames_from_workers_decode_or_fail_typed() {
    testkit::check(
        "worker frames",
        (inputs(&worker_msgs()), chunks()),
        |(input, chunks)| {
            let _ = decode_stream::<WorkerMsg>(&input, &chunks);
            Ok(())
        },
    );
}

#[test]
fn frames_from_the_coordinator_decode_or_fail_typed() {
    testkit::check(
        "coordinator frames",
        (inputs(&coordinator_msgs()), chunks()),
        |(input, chunks)| {
            let _ = decode_stream::<CoordinatorMsg>(&input, &chunks);
            Ok(())
        },
    );
}

/// A valid frame stream is decoded whole, however it is split (the corpus
/// the mutations start from is right).
#[test]
fn valid_frames_decode_whatever_the_split() {
    let msgs = worker_msgs();
    let wire: Vec<u8> = frames(&msgs)[..msgs.len()].concat();
    testkit::runner(1000)
        .run(&chunks(), |chunks| {
            let got = decode_stream::<WorkerMsg>(&wire, &chunks).unwrap();
            prop_assert_eq!(&got, &msgs);
            Ok(())
        })
        .unwrap();
}

/// What one end of the handshake ends with against a peer that sends
/// `input` and then closes its sending side.
fn handshake_against<T, F>(
    rt: &tokio::runtime::Runtime,
    input: &[u8],
    end: impl FnOnce(DuplexStream, Secret) -> F,
) -> Result<T, HandshakeError>
where
    F: Future<Output = Result<T, HandshakeError>>,
{
    let secret = Secret::from_hex(&"11".repeat(32)).unwrap();
    rt.block_on(async {
        // Big enough for all our end writes: nobody reads it.
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        theirs.write_all(input).await.unwrap();
        theirs.shutdown().await.unwrap();
        let out = end(ours, secret).await;
        drop(theirs);
        out
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

const LIMIT: Duration = Duration::from_secs(5);

#[test]
fn the_coordinators_handshake_refuses_whatever_it_is_sent() {
    let mut corpus = frames(&worker_msgs());
    corpus.extend(frames(&coordinator_msgs()));
    let rt = runtime();
    testkit::check("accept", testkit::bytes(corpus), |input| {
        let out = handshake_against(&rt, &input, |io, k| async move {
            control::accept(io, &k, LIMIT).await.map(drop)
        });
        // No proof can be right: the challenge is new every time.
        prop_assert!(out.is_err());
        Ok(())
    });
}

#[test]
fn a_workers_handshake_refuses_whatever_it_is_sent() {
    let mut corpus = frames(&coordinator_msgs());
    corpus.extend(frames(&worker_msgs()));
    let rt = runtime();
    testkit::check("connect", testkit::bytes(corpus), |input| {
        let out = handshake_against(&rt, &input, |io, k| async move {
            control::connect(io, &k, LIMIT).await.map(drop)
        });
        prop_assert!(out.is_err());
        Ok(())
    });
}
