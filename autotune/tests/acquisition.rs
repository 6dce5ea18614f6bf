//! Expected improvement over the knob space.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use autotune::{
    DEFAULT_XI, Gp, HyperGrid, Knob, Layout, Space, Tuning, expected_improvement, maximise_ei,
};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;

const ONE_HOST: Layout = Layout {
    hosts: 1,
    max_local_size: 1,
};

/// Only the cycle time is tuned: a one-dimensional space.
fn cycle_only() -> Space {
    let fixed = [Knob::FusionThreshold, Knob::Cache, Knob::SegmentSize];
    Space::new(Tuning::default(), &fixed, ONE_HOST)
}

/// Observations on the left third, peaking at u = 0.2.
fn fitted(space: &Space) -> (Gp, Vec<Vec<f64>>, Vec<f64>) {
    let us = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3];
    let xs: Vec<Vec<f64>> = us.iter().map(|&u| space.snap(&[u]).unwrap()).collect();
    let ys: Vec<f64> = xs
        .iter()
        .map(|x| 10.0 - 100.0 * (x[0] - 0.2).powi(2))
        .collect();
    let gp = Gp::fit_grid(&xs, &ys, 0.01, &[false], &HyperGrid::default()).unwrap();
    (gp, xs, ys)
}

fn incumbent(gp: &Gp, xs: &[Vec<f64>]) -> f64 {
    xs.iter()
        .map(|x| gp.predict(x).unwrap().mean)
        .fold(f64::MIN, f64::max)
}

#[test]
fn ei_is_nil_far_below_the_best_and_positive_where_unexplored() {
    let space = cycle_only();
    let (gp, xs, _) = fitted(&space);
    let best = incumbent(&gp, &xs);
    let xi = DEFAULT_XI * gp.score_scale();
    let ei = |u: f64| expected_improvement(gp.predict(&[u]).unwrap(), best, xi);
    // Next to the observation at 0: 4 below the best, and well known.
    assert!(ei(0.0) < 1e-9 * gp.score_scale(), "{}", ei(0.0));
    assert!(ei(0.01) < 1e-6 * gp.score_scale(), "{}", ei(0.01));
    // Far from every observation: uncertain, so worth a look.
    assert!(ei(0.95) > 1e-3 * gp.score_scale(), "{}", ei(0.95));
    assert!(ei(0.95) > 1e3 * ei(0.01));
}

#[test]
fn the_maximiser_finds_the_best_grid_point_and_is_seeded() {
    let space = cycle_only();
    let (gp, xs, _) = fitted(&space);
    let best = incumbent(&gp, &xs);
    let run = |seed| {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        maximise_ei(&gp, &space, best, DEFAULT_XI, &xs, &mut rng).unwrap()
    };
    let p = run(1);
    assert_eq!(p, run(1), "same seed, same proposal");
    assert_eq!(
        space.snap(&p.point).unwrap(),
        p.point,
        "proposals are on the grid"
    );
    let xi = DEFAULT_XI * gp.score_scale();
    let grid_best = (0..=1000)
        .map(|i| space.snap(&[i as f64 / 1000.0]).unwrap())
        .map(|x| expected_improvement(gp.predict(&x).unwrap(), best, xi))
        .fold(0.0, f64::max);
    assert!(p.ei >= 0.99 * grid_best, "{} vs {grid_best}", p.ei);
}

#[test]
fn an_unmeasured_categorical_level_has_positive_ei() {
    let fixed = [Knob::FusionThreshold, Knob::SegmentSize];
    let space = Space::new(Tuning::default(), &fixed, ONE_HOST);
    // [cache, cycle]: only cache off was measured.
    let xs: Vec<Vec<f64>> = (0..5).map(|i| vec![0.0, i as f64 / 4.0]).collect();
    let ys: Vec<f64> = xs.iter().map(|x| 5.0 + x[1]).collect();
    let gp = Gp::fit_grid(&xs, &ys, 0.01, &[true, false], &HyperGrid::default()).unwrap();
    let best = incumbent(&gp, &xs);
    let xi = DEFAULT_XI * gp.score_scale();
    let on = expected_improvement(gp.predict(&[1.0, 1.0]).unwrap(), best, xi);
    let off = expected_improvement(gp.predict(&[0.0, 0.25]).unwrap(), best, xi);
    assert!(
        on > 1e-3 * gp.score_scale() && on > 100.0 * off,
        "{on} {off}"
    );
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let p = maximise_ei(&gp, &space, best, DEFAULT_XI, &xs, &mut rng).unwrap();
    assert_eq!(p.point[0], 1.0, "{p:?}");
}
