//! Seeded synthetic objectives and a driver that plays the engine.

#![allow(dead_code, unreachable_pub)]

use autotune::{Decision, SampleRecord, Tuner, Tuning};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

pub const OPT_FUSION: u64 = 24 << 20;
pub const OPT_CYCLE_US: u64 = 3500;
pub const OPT_SEGMENT: u64 = 2 << 20;
/// Bytes per second at the optimum.
pub const PEAK: f64 = 10e9;

/// A smooth bowl in log2(fusion) × log2(cycle), a bonus for the cache, a penalty for
/// fusion off; segment size does not matter.
pub fn bowl(k: &Tuning) -> f64 {
    let cache = if k.cache_enabled { 1.0 } else { 0.85 };
    let fusion = if k.fusion_threshold_bytes == 0 {
        0.55
    } else {
        let d = (k.fusion_threshold_bytes as f64 / OPT_FUSION as f64).log2() / 4.0;
        (-d * d).exp()
    };
    let c = (k.cycle_time_us as f64 / OPT_CYCLE_US as f64).log2() / 5.0;
    PEAK * cache * fusion * (-c * c).exp()
}

/// `bowl` times a mild preference for 2 MiB segments and a penalty for hierarchical
/// allgather, a bonus for hierarchical allreduce.
pub fn bowl_with_segments(k: &Tuning) -> f64 {
    let s = (k.segment_bytes as f64 / OPT_SEGMENT as f64).log2() / 6.0;
    let ha = if k.hierarchical_allreduce { 1.0 } else { 0.9 };
    let hg = if k.hierarchical_allgather { 0.93 } else { 1.0 };
    bowl(k) * (-s * s).exp() * ha * hg
}

/// Plays the engine: each step moves `BYTES_PER_STEP` bytes at `objective`'s rate,
/// its duration scaled by `1 + noise·u`, u uniform in [-1, 1]. Returns the final
/// knobs and every sample.
pub fn drive(
    tuner: &mut Tuner,
    objective: impl Fn(&Tuning) -> f64,
    noise: f64,
    seed: u64,
) -> (Tuning, Vec<SampleRecord>) {
    const BYTES_PER_STEP: u64 = 100 << 20;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed);
    let mut samples = Vec::new();
    for step in 0..100_000 {
        let k = tuner.current();
        let jitter = 1.0 + noise * (2.0 * rng.random::<f64>() - 1.0);
        let seconds = BYTES_PER_STEP as f64 / objective(&k) * jitter;
        if let Some(d) = tuner.record(step, BYTES_PER_STEP, seconds) {
            samples.push(*d.sample());
            if let Decision::Final { best, .. } = d {
                return (best, samples);
            }
        }
    }
    panic!("no final decision after 100000 steps");
}
