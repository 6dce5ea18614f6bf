//! The Gaussian process fits known functions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use autotune::{AutotuneError, Gp, HyperGrid, Matern52};

fn f1(x: f64) -> f64 {
    (6.0 * x).sin() + 0.5 * x
}

fn f2(x: &[f64]) -> f64 {
    let (a, b) = (x[0] - 0.3, x[1] - 0.7);
    3.0 * (-(a * a + b * b) / 0.1).exp() + x[0]
}

#[test]
fn fits_a_1d_function() {
    let xs: Vec<Vec<f64>> = (0..9).map(|i| vec![i as f64 / 8.0]).collect();
    let ys: Vec<f64> = xs.iter().map(|x| f1(x[0])).collect();
    let gp = Gp::fit_grid(&xs, &ys, 1e-3, &[false], &HyperGrid::default()).unwrap();
    for (x, y) in xs.iter().zip(&ys) {
        let p = gp.predict(x).unwrap();
        assert!((p.mean - y).abs() < 0.01, "at {x:?}: {} vs {y}", p.mean);
        assert!(p.std_dev() < 0.02, "at {x:?}: sd {}", p.std_dev());
    }
    // Between the training points: close to the truth.
    for i in 0..8 {
        let x = (i as f64 + 0.5) / 8.0;
        let p = gp.predict(&[x]).unwrap();
        assert!(
            (p.mean - f1(x)).abs() < 0.05,
            "at {x}: {} vs {}",
            p.mean,
            f1(x)
        );
    }
    // Away from the data the posterior is wider.
    let at = gp.predict(&[0.5]).unwrap().std_dev();
    let between = gp.predict(&[0.5625]).unwrap().std_dev();
    let away = gp.predict(&[1.6]).unwrap().std_dev();
    assert!(at < between && between < away, "{at} {between} {away}");
    assert!(away > 0.5, "{away}");
}

#[test]
fn fits_a_2d_function() {
    let mut xs = Vec::new();
    for i in 0..6 {
        for j in 0..6 {
            xs.push(vec![i as f64 / 5.0, j as f64 / 5.0]);
        }
    }
    let ys: Vec<f64> = xs.iter().map(|x| f2(x)).collect();
    let gp = Gp::fit_grid(&xs, &ys, 1e-3, &[false, false], &HyperGrid::default()).unwrap();
    for (x, y) in xs.iter().zip(&ys) {
        let p = gp.predict(x).unwrap();
        assert!((p.mean - y).abs() < 0.02, "at {x:?}: {} vs {y}", p.mean);
    }
    let peak = gp.predict(&[0.3, 0.7]).unwrap();
    assert!((peak.mean - f2(&[0.3, 0.7])).abs() < 0.3, "{peak:?}");
    let near = gp.predict(&[0.4, 0.4]).unwrap().variance;
    let far = gp.predict(&[2.0, -1.0]).unwrap().variance;
    assert!(near * 100.0 < far, "{near} {far}");
}

#[test]
fn the_grid_keeps_the_most_likely_kernel() {
    let xs: Vec<Vec<f64>> = (0..7).map(|i| vec![i as f64 / 6.0]).collect();
    let ys: Vec<f64> = xs.iter().map(|x| f1(x[0])).collect();
    let grid = HyperGrid::default();
    let best = Gp::fit_grid(&xs, &ys, 0.1, &[false], &grid).unwrap();
    for &l in &grid.continuous_lengths {
        for &s in &grid.signal_variances {
            let k = Matern52::new(vec![l], s).unwrap();
            let gp = Gp::fit(&xs, &ys, k, 0.1).unwrap();
            assert!(gp.log_marginal_likelihood() <= best.log_marginal_likelihood());
        }
    }
}

#[test]
fn noise_pulls_the_mean_towards_the_average() {
    let xs = vec![vec![0.0], vec![0.5], vec![1.0]];
    let ys = [1.0, 5.0, 3.0];
    let k = || Matern52::new(vec![0.3], 1.0).unwrap();
    let exact = Gp::fit(&xs, &ys, k(), 0.0).unwrap();
    let noisy = Gp::fit(&xs, &ys, k(), 0.8).unwrap();
    let e = exact.predict(&[0.5]).unwrap().mean;
    let n = noisy.predict(&[0.5]).unwrap().mean;
    assert!((e - 5.0).abs() < 1e-4, "{e}");
    assert!(n < 4.7 && n > 3.0, "{n}");
    // Equal scores: nothing to standardise by, still a valid model.
    let flat = Gp::fit(&xs, &[2.0; 3], k(), 0.8).unwrap();
    assert!((flat.predict(&[0.25]).unwrap().mean - 2.0).abs() < 1e-12);
}

#[test]
fn duplicate_points_without_noise_are_rescued_by_jitter() {
    let xs = vec![vec![0.2], vec![0.2], vec![0.7]];
    let gp = Gp::fit(
        &xs,
        &[1.0, 1.0, 2.0],
        Matern52::new(vec![0.5], 1.0).unwrap(),
        0.0,
    );
    assert!(gp.is_ok());
}

#[test]
fn bad_inputs_are_typed_errors() {
    let k = || Matern52::new(vec![0.5], 1.0).unwrap();
    let x = vec![vec![0.5]];
    assert_eq!(
        Gp::fit(&[], &[], k(), 0.1).unwrap_err(),
        AutotuneError::NoObservations
    );
    assert!(matches!(
        Gp::fit(&x, &[f64::NAN], k(), 0.1),
        Err(AutotuneError::NonFiniteObservation { index: 0, .. })
    ));
    assert!(matches!(
        Gp::fit(&x, &[1.0], k(), -1.0),
        Err(AutotuneError::InvalidNoise { .. })
    ));
    assert_eq!(
        Gp::fit(&[vec![0.1, 0.2]], &[1.0], k(), 0.1).unwrap_err(),
        AutotuneError::DimensionMismatch {
            expected: 1,
            got: 2
        }
    );
    assert!(matches!(
        Matern52::new(vec![0.0], 1.0),
        Err(AutotuneError::InvalidHyperparameter {
            name: "length_scale",
            ..
        })
    ));
    let gp = Gp::fit(&x, &[1.0], k(), 0.1).unwrap();
    assert!(gp.predict(&[0.1, 0.1]).is_err());
    let empty = HyperGrid {
        signal_variances: vec![],
        ..HyperGrid::default()
    };
    assert_eq!(
        Gp::fit_grid(&x, &[1.0], 0.1, &[false], &empty).unwrap_err(),
        AutotuneError::EmptyGrid {
            axis: "signal_variances"
        }
    );
}
