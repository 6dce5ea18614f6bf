//! Property tests of what a data-plane connection reads from its peer: the
//! dialer's proven hello (and the acceptor's answer) and the stream of
//! frames, read by the reader task's own functions ([`read_header`],
//! [`read_payload`]) into a [`Mailbox`]. Inputs are random bytes and valid
//! encodings mutated by [`testkit`]; each must give a hello, a refusal, the
//! frames it holds or a typed loss cause, never a panic.

use bytes::Bytes;
use testkit::proptest::prelude::*;

use super::frame::{HEADER_LEN, encode_header};
use control::DataKey;

use super::handshake::{Dialers, HELLO_LEN, Hello, Refusal};
use super::pool::RecvPool;
use super::{Header, StreamMailbox, goodbye, read_header, read_parts, read_payload};
use crate::error::LossCause;
use crate::tag::{Generation, Tag};

/// The acceptor of these tests: rank 1 of 4 in generation 3 of job 42.
fn me() -> Hello {
    Hello {
        generation: Generation(3),
        rank: 1,
        size: 4,
    }
}

/// The key of job `job`.
fn key(job: u8) -> DataKey {
    DataKey::new([job; 32])
}

/// The acceptor's nonce in these tests.
const NONCE: [u8; 32] = [5; 32];

/// Hellos every acceptor in a job sees: from each rank, of this and other
/// generations and jobs, proven for this nonce and for another (replays).
fn hellos() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for rank in 0..5 {
        for (job, generation, a) in [
            (42, 3, NONCE),
            (42, 2, NONCE),
            (7, 3, NONCE),
            (42, 3, [6; 32]),
            (u8::MAX, u64::MAX, NONCE),
        ] {
            let h = Hello {
                generation: Generation(generation),
                rank,
                size: 4,
            };
            out.push(h.encode(&key(job), &a, &[rank as u8; 32]).to_vec());
        }
    }
    out
}

#[test]
fn hellos_are_accepted_only_from_the_peers_expected() {
    testkit::check("hellos", testkit::bytes(hellos()), |input| {
        let mut b = [0u8; HELLO_LEN];
        let n = input.len().min(HELLO_LEN);
        b[..n].copy_from_slice(&input[..n]);
        let me = me();
        match Hello::decode(&b, &key(42), &NONCE)
            .and_then(|h| h.check_dialer(&me, Dialers::Above).map(|()| h))
        {
            Ok(h) => {
                prop_assert_eq!(&b[0..4], b"ERDP");
                // Only a hello made with the job's key for this nonce passes.
                let mut d = [0u8; 32];
                d.copy_from_slice(&b[24..56]);
                let made = h.encode(&key(42), &NONCE, &d);
                prop_assert_eq!(&made[..], &b[..]);
                prop_assert_eq!(h.generation, me.generation);
                prop_assert!(h.size == me.size && h.rank > me.rank && h.rank < me.size);
            }
            Err(r) => {
                // The dialer reads the refusal back from its code.
                prop_assert_eq!(Refusal::from_code(r as u8), Some(r));
            }
        }
        // Whatever answer byte comes back, the dialer understands it or
        // names it unknown.
        let _ = Refusal::from_code(input.first().copied().unwrap_or(0)).map(Refusal::reason);
        Ok(())
    });
}

/// The largest payload the tests' connections accept: above the pooled-read
/// threshold, so both payload paths are taken.
const MAX_PAYLOAD: u32 = 1 << 17;

/// A valid stream of `frames` (tag, payload length), ending with a goodbye
/// when `bye`.
fn stream(frames: &[(Tag, usize)], bye: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for &(tag, len) in frames {
        out.extend_from_slice(&encode_header(tag, len as u32));
        out.extend((0..len).map(|i| i as u8));
    }
    if bye {
        out.extend_from_slice(&encode_header(goodbye(Generation(3)), 0));
    }
    out
}

fn streams() -> Vec<Vec<u8>> {
    let t = |generation, op, step| Tag::new(Generation(generation), op, step);
    vec![
        stream(&[(t(3, 0, 0), 16)], false),
        stream(&[(t(3, 1, 0), 0), (t(3, 1, 1), 40), (t(2, 9, 9), 8)], true),
        stream(&[(t(3, 7, 2), 70_000)], true),
        stream(&[(t(4, 0, 0), 3), (t(3, u64::MAX - 1, u32::MAX), 1)], false),
        stream(&[], true),
    ]
}

/// What a connection's reader makes of `input`: how the stream ended, and
/// the frames it delivered, of which those of older generations were
/// refused as stale.
fn read_stream(input: Vec<u8>) -> (Result<bool, LossCause>, usize, u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mailbox = StreamMailbox::<&[u8]>::new(Generation(3));
    let bye = goodbye(Generation(3));
    let pool = RecvPool::default();
    let mut r = tokio::io::BufReader::with_capacity(64, &input[..]);
    let mut delivered = 0;
    let end = rt.block_on(async {
        let mut said_goodbye = false;
        loop {
            match read_header(&mut r, MAX_PAYLOAD, bye).await? {
                Header::End => return Ok(said_goodbye),
                Header::Goodbye => said_goodbye = true,
                Header::Carry(_) => return Err(LossCause::Carried),
                Header::Frame { tag, len } => {
                    assert!(len <= MAX_PAYLOAD as usize, "{len} bytes let through");
                    let payload: Bytes = read_payload(&mut r, len, &pool).await?;
                    assert_eq!(payload.len(), len);
                    mailbox.deliver(0, tag, payload);
                    delivered += 1;
                }
            }
        }
    });
    (end, delivered, mailbox.stale_refused())
}

#[test]
fn frame_streams_give_frames_or_a_typed_loss() {
    testkit::check("frame streams", testkit::bytes(streams()), |input| {
        let whole = input.len();
        let (end, delivered, stale) = read_stream(input);
        prop_assert!(stale <= delivered as u64);
        if let Err(cause) = end {
            prop_assert!(
                matches!(
                    cause,
                    LossCause::Malformed(_) | LossCause::FrameTooLarge { .. }
                ),
                "{cause:?} from {whole} bytes"
            );
        }
        Ok(())
    });
}

#[test]
fn valid_streams_are_read_whole() {
    let s = streams();
    assert_eq!(read_stream(s[1].clone()), (Ok(true), 3, 1));
    assert_eq!(read_stream(s[2].clone()), (Ok(true), 1, 0));
    assert_eq!(read_stream(s[3].clone()), (Ok(false), 2, 0));
    // Cut inside a header, inside a payload; a goodbye with a payload.
    let cut = |n: usize| read_stream(s[1][..n].to_vec()).0;
    assert!(matches!(cut(HEADER_LEN - 1), Err(LossCause::Malformed(_))));
    assert!(matches!(
        cut(HEADER_LEN + 40 + 5),
        Err(LossCause::Malformed(_))
    ));
    let mut bad_bye = encode_header(goodbye(Generation(3)), 2).to_vec();
    bad_bye.extend_from_slice(&[0, 0]);
    assert_eq!(
        read_stream(bad_bye).0,
        Err(LossCause::Malformed("a goodbye frame with a payload"))
    );
}

proptest! {
    /// A payload read across parts of any sizes, after a header whose read
    /// filled the buffer with some of it, comes out whole and in order, and
    /// the next frame's header is read where it begins.
    #[test]
    fn a_payload_lands_across_its_parts_whatever_the_buffer_read_ahead(
        parts in testkit::proptest::collection::vec(0usize..300, 1..12),
        buffer in 1usize..200,
        seed in any::<u8>(),
    ) {
        let len: usize = parts.iter().sum();
        let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        let mut input = encode_header(Tag::new(Generation(3), 7, 1), len as u32).to_vec();
        input.extend_from_slice(&payload);
        input.extend_from_slice(&encode_header(Tag::new(Generation(3), 8, 1), 0));
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        let bye = goodbye(Generation(3));
        let mut r = tokio::io::BufReader::with_capacity(buffer, &input[..]);
        let (got, next) = rt.block_on(async {
            let first = read_header(&mut r, MAX_PAYLOAD, bye).await;
            let first_len = match first {
                Ok(Header::Frame { len, .. }) => Some(len),
                _ => None,
            };
            prop_assert_eq!(first_len, Some(len));
            let mut bufs: Vec<Vec<u8>> = parts.iter().map(|&n| vec![0u8; n]).collect();
            let mut dst: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            read_parts(&mut r, &mut dst).await.expect("the whole payload");
            let next = read_header(&mut r, MAX_PAYLOAD, bye).await;
            Ok((bufs.concat(), next))
        })?;
        prop_assert_eq!(got, payload);
        prop_assert!(matches!(next, Ok(Header::Frame { len: 0, .. })), "{:?}", next);
    }
}
