use collectives::{DType, ReduceOp};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

use super::*;
use crate::engine::error::Mismatch;
use crate::engine::messages::{Kind, Location};

const SUM: Kind = Kind::Allreduce(ReduceOp::Sum);
const FUSE: FusionPolicy = FusionPolicy {
    threshold_bytes: 1 << 20,
    small_bytes: 64 << 10,
};

fn req(name: &str, len: usize) -> Request {
    Request {
        name: name.into(),
        kind: SUM,
        dtype: DType::F32,
        shape: vec![len],
        parts: vec![],
        place: Location::Host,
    }
}

/// One simulated rank: its own negotiator and what it has yet to submit.
struct Rank {
    id: usize,
    neg: Negotiator,
    queue: Vec<Request>,
}

impl Rank {
    /// Takes up to `k` queued submissions into a message, as the engine does:
    /// a bit where the cache allows, the full request otherwise.
    fn message(&mut self, k: usize) -> RankMsg {
        let mut m = RankMsg::default();
        for r in self.queue.drain(..k.min(self.queue.len())) {
            match self.neg.cached_bit(self.id, &r) {
                Some(bit) => m.set_bit(bit),
                None => m.new.push(r),
            }
        }
        m
    }
}

fn ranks(n: usize, capacity: usize) -> Vec<Rank> {
    (0..n)
        .map(|id| Rank {
            id,
            neg: Negotiator::new(n, capacity, FUSE),
            queue: Vec::new(),
        })
        .collect()
}

/// Runs rounds until every queue is empty and nothing is pending; returns each
/// rank's decisions and the messages exchanged.
fn run(ranks: &mut [Rank], rng: &mut rand::rngs::StdRng) -> (Vec<Vec<Decision>>, Vec<RankMsg>) {
    let mut decisions = vec![Vec::new(); ranks.len()];
    let mut sent = Vec::new();
    for _ in 0..1000 {
        let msgs: Vec<RankMsg> = ranks
            .iter_mut()
            .map(|r| {
                let k = rng.random_range(0..4);
                r.message(k)
            })
            .collect();
        for (r, d) in ranks.iter_mut().zip(&mut decisions) {
            d.extend(r.neg.round(&msgs).unwrap().decisions);
        }
        sent.extend(msgs);
        if ranks
            .iter()
            .all(|r| r.queue.is_empty() && r.neg.waiting().is_empty())
        {
            return (decisions, sent);
        }
    }
    panic!("negotiation did not finish in 1000 rounds");
}

fn run_names(d: &[Decision]) -> Vec<String> {
    d.iter()
        .flat_map(|d| match d {
            Decision::Run(g) => g.iter().map(|t| t.name().to_owned()).collect(),
            Decision::Fail { name, .. } => vec![format!("FAIL {name}")],
        })
        .collect()
}

#[test]
fn any_submission_order_gives_one_order_everywhere() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for n in [1, 2, 3, 5] {
        let mut rs = ranks(n, 1024);
        let names: Vec<String> = (0..40).map(|i| format!("grad.{i}")).collect();
        for r in &mut rs {
            let mut mine: Vec<Request> = names.iter().map(|s| req(s, 16)).collect();
            mine.shuffle(&mut rng);
            r.queue = mine;
        }
        let (decisions, _) = run(&mut rs, &mut rng);
        let first = run_names(&decisions[0]);
        let mut sorted = first.clone();
        sorted.sort();
        let mut want = names.clone();
        want.sort();
        assert_eq!(sorted, want, "every tensor runs exactly once (n={n})");
        for d in &decisions[1..] {
            assert_eq!(decisions[0], *d, "ranks decided differently (n={n})");
        }
    }
}

#[test]
fn the_steady_state_sends_bits_not_names() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let mut rs = ranks(3, 1024);
    let names: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    for step in 0..3 {
        for r in &mut rs {
            r.queue = names.iter().map(|s| req(s, 8)).collect();
        }
        let (decisions, sent) = run(&mut rs, &mut rng);
        assert_eq!(run_names(&decisions[0]).len(), 10);
        let full: usize = sent.iter().map(|m| m.new.len()).sum();
        if step == 0 {
            assert_eq!(full, 30, "first step negotiates every name from every rank");
        } else {
            assert_eq!(full, 0, "step {step} sent names although all were cached");
        }
    }
    assert_eq!(rs[0].neg.cache().hits(), 2 * 10 * 3);
}

#[test]
fn eviction_at_capacity_keeps_results_right() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let mut rs = ranks(2, 3);
    let names: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    for _ in 0..4 {
        for r in &mut rs {
            r.queue = names.iter().map(|s| req(s, 4)).collect();
            r.queue.shuffle(&mut rng);
        }
        let (decisions, _) = run(&mut rs, &mut rng);
        assert_eq!(decisions[0], decisions[1]);
        assert_eq!(run_names(&decisions[0]).len(), 5);
        assert!(rs[0].neg.cache().len() <= 3);
    }
    assert!(rs[0].neg.cache().hits() > 0, "the cache was never used");
}

#[test]
fn disagreeing_ranks_fail_the_tensor_everywhere_naming_each_view() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(10);
    let mut rs = ranks(3, 16);
    for r in &mut rs {
        let len = if r.id == 2 { 5 } else { 4 };
        r.queue = vec![req("bad", len), req("good", 4)];
    }
    let (decisions, _) = run(&mut rs, &mut rng);
    for d in &decisions {
        let fail = d.iter().find_map(|x| match x {
            Decision::Fail { name, why } => Some((name.clone(), why.to_string())),
            Decision::Run(_) => None,
        });
        let (name, why) = fail.expect("the mismatch failed");
        assert_eq!(name, "bad");
        for view in [
            "rank 0: allreduce(Sum) F32 [4]",
            "rank 1: allreduce(Sum) F32 [4]",
            "rank 2: allreduce(Sum) F32 [5]",
        ] {
            assert!(why.contains(view), "{why}");
        }
        assert!(
            run_names(d).contains(&"good".to_owned()),
            "the next tensor still runs"
        );
    }
}

#[test]
fn a_tensor_on_a_gpu_on_one_rank_and_on_the_host_on_another_fails_naming_both() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut rs = ranks(2, 16);
    for r in &mut rs {
        let mut w = req("w", 4);
        if r.id == 1 {
            w.place = Location::Gpu;
        }
        r.queue = vec![w, req("next", 4)];
    }
    let (decisions, _) = run(&mut rs, &mut rng);
    for d in &decisions {
        let why = d
            .iter()
            .find_map(|x| match x {
                Decision::Fail { name, why } if name == "w" => Some(why.to_string()),
                _ => None,
            })
            .expect("the placement mismatch failed the tensor");
        assert!(why.contains("rank 0: allreduce(Sum) F32 [4]"), "{why}");
        assert!(
            why.contains("rank 1: allreduce(Sum) F32 [4] on a GPU"),
            "{why}"
        );
        assert!(run_names(d).contains(&"next".to_owned()));
    }
}

#[test]
fn a_rank_that_shuts_down_fails_what_it_never_submitted() {
    let mut neg = Negotiator::new(2, 16, FUSE);
    let a = RankMsg {
        new: vec![req("x", 4)],
        ..RankMsg::default()
    };
    let b = RankMsg {
        shutdown: true,
        ..RankMsg::default()
    };
    let out = neg.round(&[a, b]).unwrap();
    assert!(
        matches!(&out.decisions[..], [Decision::Fail { name, why: Mismatch::ShutDown { ranks, .. } }] if name == "x" && ranks == &[1]),
        "{out:?}"
    );
    assert!(!out.finished);
    let out = neg
        .round(&[
            RankMsg {
                shutdown: true,
                ..RankMsg::default()
            },
            RankMsg::default(),
        ])
        .unwrap();
    assert!(out.finished);
}

#[test]
fn a_bit_outside_the_cache_is_an_error_not_a_panic() {
    let mut neg = Negotiator::new(2, 16, FUSE);
    let mut m = RankMsg::default();
    m.set_bit(5);
    assert_eq!(
        neg.round(&[RankMsg::default(), m]),
        Err(NegotiationError::UnknownBit { rank: 1, bit: 5 })
    );
}

#[test]
fn cached_tensors_sent_by_every_rank_at_once_run_after_older_pending_ones() {
    let mut rs = ranks(2, 16);
    let names = ["a", "b", "c"];
    for r in &mut rs {
        r.queue = names.iter().map(|s| req(s, 4)).collect();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    run(&mut rs, &mut rng);
    let bit = |r: &Rank, name: &str| r.neg.cached_bit(r.id, &req(name, 4)).unwrap();
    // Round 1: only rank 0 sends b (it stays pending). Round 2: rank 0 sends
    // a and c, rank 1 all three; a and c are complete at once.
    let mut first = RankMsg::default();
    first.set_bit(bit(&rs[0], "b"));
    let mut second = [RankMsg::default(), RankMsg::default()];
    for n in ["a", "c"] {
        second[0].set_bit(bit(&rs[0], n));
    }
    for n in names {
        second[1].set_bit(bit(&rs[1], n));
    }
    for r in &mut rs {
        let d = r.neg.round(&[first.clone(), RankMsg::default()]).unwrap();
        assert!(d.decisions.is_empty(), "ran before rank 1 sent anything");
        let d = r.neg.round(&second).unwrap();
        let mut want = vec!["b".to_owned(), "a".to_owned(), "c".to_owned()];
        if bit(r, "c") < bit(r, "a") {
            want.swap(1, 2);
        }
        assert_eq!(run_names(&d.decisions), want);
        assert!(r.neg.waiting().is_empty());
    }
}

/// A cached tensor whose ranks send its bit in different rounds runs as
/// the cached form itself, shared, not rebuilt from copied requests; one
/// rank sending it changed fails it everywhere with every rank's view.
#[test]
fn bits_spread_over_rounds_give_the_cached_form_itself() {
    let mut rs = ranks(3, 1024);
    let round = |rs: &mut [Rank], k: &[usize]| -> Vec<Vec<Decision>> {
        let msgs: Vec<RankMsg> = rs.iter_mut().zip(k).map(|(r, &k)| r.message(k)).collect();
        rs.iter_mut()
            .map(|r| r.neg.round(&msgs).unwrap().decisions)
            .collect()
    };
    for r in rs.iter_mut() {
        r.queue = vec![req("g", 8)];
    }
    round(&mut rs, &[1, 1, 1]);
    let cached: Vec<Ready> = rs
        .iter()
        .map(|r| r.neg.cache().get(0).unwrap().clone())
        .collect();
    for r in rs.iter_mut() {
        r.queue = vec![req("g", 8)];
    }
    assert!(round(&mut rs, &[1, 0, 0]).iter().all(Vec::is_empty));
    assert!(round(&mut rs, &[0, 1, 0]).iter().all(Vec::is_empty));
    for (rank, d) in round(&mut rs, &[0, 0, 1]).into_iter().enumerate() {
        let [Decision::Run(group)] = &d[..] else {
            panic!("rank {rank}: {d:?}");
        };
        assert_eq!(group[0], cached[rank], "rank {rank}");
        let shared = std::sync::Arc::ptr_eq(&group[0].per_rank, &cached[rank].per_rank);
        assert!(shared, "rank {rank}: the cached form was copied");
    }
    // Rank 2 sends it changed, after the others' bits: a mismatch.
    rs[0].queue = vec![req("g", 8)];
    rs[1].queue = vec![req("g", 8)];
    rs[2].queue = vec![req("g", 9)];
    assert!(round(&mut rs, &[1, 1, 0]).iter().all(Vec::is_empty));
    for (rank, d) in round(&mut rs, &[0, 0, 1]).into_iter().enumerate() {
        assert_eq!(run_names(&d), vec!["FAIL g".to_owned()], "rank {rank}");
    }
}
