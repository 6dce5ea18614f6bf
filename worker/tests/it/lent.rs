//! Lent host memory through the engine: reduced where it lies, in segments,
//! fused with owned tensors, with the bits an owned submission of the same
//! elements gets, and handed back.

use collectives::ReduceOp;
use rand::{RngExt, SeedableRng};
use worker::engine::Kind;
use worker::{Engine, EngineConfig, LentHost};

use crate::common;

use common::{allreduce, on_every_rank};

/// Tensor `t` of rank `rank`: seeded noise (seed printed by the test).
fn tensor(seed: u64, rank: usize, t: usize, len: usize) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed + 1000 * rank as u64 + t as u64);
    (0..len)
        .map(|_| rng.random_range(-1.0f32..1.0) * 1e3)
        .collect()
}

/// `v` cut into three pieces (the middle one empty when `v` is short).
fn pieces(mut v: Vec<f32>) -> Vec<Vec<f32>> {
    let c = v.split_off(v.len() / 2);
    let b = v.split_off(v.len() / 3);
    vec![v, b, c]
}

/// Every rank submits `lens.len()` tensors, the even ones lent in pieces and
/// the odd ones owned (or all owned); returns each tensor's bits.
fn step(e: &Engine, rank: usize, seed: u64, lens: &[usize], lend: bool) -> Vec<Vec<u32>> {
    enum H {
        Owned(worker::Handle<f32>),
        Lent(worker::LentHandle),
    }
    let handles: Vec<H> = lens
        .iter()
        .enumerate()
        .map(|(t, &len)| {
            let data = tensor(seed, rank, t, len);
            let name = format!("g.{t}");
            if lend && t % 2 == 0 {
                let lent = LentHost::from_vecs(pieces(data));
                let kind = Kind::Allreduce(ReduceOp::Average);
                H::Lent(e.submit_lent(name, kind, lent, vec![len], vec![]))
            } else {
                H::Owned(allreduce(e, &name, data, ReduceOp::Average))
            }
        })
        .collect();
    handles
        .into_iter()
        .map(|h| {
            let v: Vec<f32> = match h {
                H::Owned(h) => h.wait().unwrap().data,
                H::Lent(h) => {
                    let owner = h.wait().unwrap().into_owner();
                    owner.downcast::<Vec<Vec<f32>>>().unwrap().concat()
                }
            };
            v.iter().map(|x| x.to_bits()).collect()
        })
        .collect()
}

#[test]
fn lent_tensors_get_the_bits_owned_ones_get_fused_or_not() {
    let seed = 20261127;
    println!("seed {seed}");
    let lens = [3, 70_000, 1, 4099, 20_000, 0, 257, 65_536];
    for threshold in [0, 64 << 20] {
        let cfg = EngineConfig {
            fusion_threshold_bytes: threshold,
            // A burst is complete after 200 ms without a submission: the
            // eight of a step make one burst however loaded the machine
            // (with the default 50 µs a descheduled submitting thread split
            // them into rounds of one on a busy machine).
            settle_quiet: std::time::Duration::from_millis(200),
            ..EngineConfig::default()
        };
        let owned = on_every_rank(3, cfg.clone(), move |rank, e| {
            step(e, rank, seed, &lens, false)
        });
        let lent = on_every_rank(3, cfg, move |rank, e| step(e, rank, seed, &lens, true));
        for rank in 0..3 {
            assert_eq!(
                owned[rank].0, lent[rank].0,
                "rank {rank}, fusion threshold {threshold}: lent tensors differ"
            );
        }
        assert_eq!(owned[0].0, owned[2].0, "ranks disagree");
        if threshold > 0 {
            assert!(
                lent[0].1.collectives < lent[0].1.tensors,
                "lent and owned tensors were not fused: {:?}",
                lent[0].1
            );
        }
    }
}

#[test]
fn a_lent_tensor_of_another_length_fails_on_every_rank_and_comes_back_dropped() {
    let out = on_every_rank(2, EngineConfig::default(), |rank, e| {
        let len = 10 + rank;
        let lent = LentHost::from_vecs(vec![vec![1.0f32; len]]);
        let kind = Kind::Allreduce(ReduceOp::Sum);
        let bad = e.submit_lent("odd".into(), kind, lent, vec![len], vec![]);
        let err = bad.wait().unwrap_err().to_string();
        // The engine goes on: the next lent tensor works.
        let lent = LentHost::from_vecs(vec![vec![1.0f32; 4], vec![2.0; 2]]);
        let good = e.submit_lent("even".into(), kind, lent, vec![6], vec![]);
        let back = good.wait().unwrap().into_owner();
        (err, *back.downcast::<Vec<Vec<f32>>>().unwrap())
    });
    for (rank, ((err, back), _)) in out.iter().enumerate() {
        assert!(err.contains("odd"), "rank {rank}: {err}");
        assert_eq!(back, &vec![vec![2.0f32; 4], vec![4.0; 2]], "rank {rank}");
    }
}
