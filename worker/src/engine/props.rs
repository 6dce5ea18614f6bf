//! Property tests of what a rank reads from its peers every cycle: the
//! negotiation messages gathered over the data plane, decoded by
//! [`decode_round`] and then acted on by the [`Negotiator`]. Inputs are
//! random bytes and valid rounds mutated by [`testkit`], with the per-rank
//! byte counts kept or forged; each must give messages the negotiator handles
//! or a typed error, never a panic (nor an overflowing size).

use autotune::SampleRecord;
use collectives::{DType, ReduceOp};
use testkit::proptest::collection::vec;
use testkit::proptest::prelude::*;

use super::fusion::{FusionPolicy, fused_bytes};
use super::messages::{
    Decision, Kind, Location, RankMsg, Request, Tuning, decode_round, round_config,
};
use super::negotiate::Negotiator;

fn req(name: &str, kind: Kind, dtype: DType, shape: Vec<usize>) -> Request {
    Request {
        name: name.into(),
        kind,
        dtype,
        shape,
        parts: vec![],
        place: Location::Host,
    }
}

/// Messages of every field: new requests of each kind, cache bits, a
/// retune and an autotune sample (rank 0's), shutdown and join.
fn messages() -> Vec<RankMsg> {
    let sum = Kind::Allreduce(ReduceOp::Sum);
    let mut bits = RankMsg::default();
    for b in [0, 5, 64, 200] {
        bits.set_bit(b);
    }
    vec![
        RankMsg {
            new: vec![
                req("grad.0", sum, DType::F32, vec![4, 3]),
                req("grad.1", Kind::Allgather, DType::F16, vec![2, 8]),
                Request {
                    parts: vec![3, 5],
                    place: Location::Host,
                    ..req("group.0", sum, DType::F64, vec![8])
                },
            ],
            ..RankMsg::default()
        },
        RankMsg {
            new: vec![
                req("b", Kind::Broadcast { root: 1 }, DType::U8, vec![16]),
                req("a2a", Kind::Alltoall, DType::I32, vec![6]),
                req(
                    "rs",
                    Kind::Reducescatter(ReduceOp::Max),
                    DType::BF16,
                    vec![7, 1],
                ),
            ],
            retune: Some(Tuning::default()),
            sample: Some(SampleRecord {
                knobs: Tuning::default(),
                score: 1.5e9,
                step: 40,
                warmup: false,
            }),
            ..RankMsg::default()
        },
        bits,
        RankMsg {
            shutdown: true,
            joined: true,
            ..RankMsg::default()
        },
        RankMsg::default(),
    ]
}

fn encode(m: &RankMsg) -> Vec<u8> {
    bincode::serde::encode_to_vec(m, round_config()).expect("encodable")
}

/// Rounds of one to three ranks, as the allgather hands them over: every
/// message's bytes, concatenated, and the count of each.
fn rounds() -> Vec<(Vec<u8>, Vec<usize>)> {
    let msgs = messages();
    let mut out = Vec::new();
    for n in 1..=3 {
        for first in 0..msgs.len() {
            let round: Vec<Vec<u8>> = (0..n)
                .map(|r| encode(&msgs[(first + r) % msgs.len()]))
                .collect();
            out.push((round.concat(), round.iter().map(Vec::len).collect()));
        }
    }
    out
}

/// A message of random requests (few names, so that ranks meet on them;
/// any kind, element type and shape, huge dimensions included), cache bits,
/// shutdowns and joins.
fn random_message() -> impl Strategy<Value = RankMsg> {
    use testkit::proptest::sample::select;
    let kinds = vec![
        Kind::Allreduce(ReduceOp::Sum),
        Kind::Allreduce(ReduceOp::Average),
        Kind::Allgather,
        Kind::Broadcast { root: 0 },
        Kind::Broadcast { root: 7 },
        Kind::BroadcastSized { root: 1 },
        Kind::Alltoall,
        Kind::Reducescatter(ReduceOp::Min),
    ];
    let dtypes = vec![DType::U8, DType::F16, DType::F32, DType::I64];
    let dim = prop_oneof![4 => 0usize..70_000, 1 => any::<usize>()];
    let request = (
        select(vec!["a", "b", "c"]),
        select(kinds),
        select(dtypes),
        vec(dim, 0..3),
        vec(0usize..10, 0..3),
    )
        .prop_map(|(name, kind, dtype, shape, parts)| Request {
            parts,
            ..req(name, kind, dtype, shape)
        });
    (
        vec(request, 0..4),
        vec(0usize..300, 0..3),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(new, bits, shutdown, joined)| {
            let mut m = RankMsg {
                new,
                shutdown,
                joined,
                ..RankMsg::default()
            };
            for b in bits {
                m.set_bit(b);
            }
            m
        })
}

/// A round of random messages from one to three ranks.
fn random_round() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    vec(random_message(), 1..4).prop_map(|msgs| {
        let round: Vec<Vec<u8>> = msgs.iter().map(encode).collect();
        (round.concat(), round.iter().map(Vec::len).collect())
    })
}

/// A round's bytes, mutated, with its counts kept (so that the mutations
/// reach the message decoder) or forged; or a round of random messages.
fn inputs() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    let rounds = rounds();
    let counts: Vec<Vec<usize>> = rounds.iter().map(|(_, c)| c.clone()).collect();
    let bytes: Vec<Vec<u8>> = rounds.into_iter().map(|(b, _)| b).collect();
    let forged = prop_oneof![
        2 => vec(0usize..64, 1..4),
        1 => vec(any::<usize>(), 1..4),
    ];
    prop_oneof![
        3 => (testkit::mutated(bytes.clone()), testkit::proptest::sample::select(counts)),
        1 => (testkit::bytes(bytes), forged),
        2 => random_round(),
    ]
}

const FUSE: FusionPolicy = FusionPolicy {
    threshold_bytes: 1 << 20,
    small_bytes: 64 << 10,
};

#[test]
fn negotiation_rounds_decode_or_fail_typed() {
    testkit::check("negotiation rounds", inputs(), |(all, counts)| {
        let Ok(msgs) = decode_round(&all, &counts) else {
            return Ok(());
        };
        prop_assert_eq!(msgs.len(), counts.len());
        // Twice: the second round sees the first one's cache.
        let mut neg = Negotiator::new(msgs.len(), 4, FUSE);
        for _ in 0..2 {
            let Ok(outcome) = neg.round(&msgs) else {
                break;
            };
            for d in &outcome.decisions {
                if let Decision::Run(group) = d {
                    let _ = group.iter().map(fused_bytes).fold(0, usize::saturating_add);
                }
            }
        }
        Ok(())
    });
}

#[test]
fn a_round_decodes_exactly_its_counts() {
    let (all, counts) = rounds().swap_remove(12);
    let msgs = decode_round(&all, &counts).unwrap();
    assert_eq!(msgs.len(), 3);
    let mut short = counts.clone();
    short[2] += 1;
    assert!(decode_round(&all, &short).is_err(), "past the end");
    let mut split = counts.clone();
    split[0] += 1;
    split[1] -= 1;
    assert!(decode_round(&all, &split).is_err(), "a byte moved");
    // A shape whose bytes overflow is refused when decoded.
    let huge = RankMsg {
        new: vec![req(
            "h",
            Kind::Allgather,
            DType::F64,
            vec![1 << 40, 1 << 30],
        )],
        ..RankMsg::default()
    };
    let b = encode(&huge);
    let e = decode_round(&b, &[b.len()]).unwrap_err();
    assert!(e.to_string().contains("tensor h"), "{e}");
}
