//! The knob space: ranges, encoding, rounding, fixed knobs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use autotune::{
    AutotuneError, CYCLE_MAX_US, CYCLE_MIN_US, FUSION_GRID_BYTES, FUSION_MAX_BYTES, Knob, Layout,
    SEGMENT_GRID_BYTES, SEGMENT_MAX_BYTES, SEGMENT_MIN_BYTES, Space, Tuning,
};

const TWO_BY_TWO: Layout = Layout {
    hosts: 2,
    max_local_size: 2,
};
const ONE_HOST: Layout = Layout {
    hosts: 1,
    max_local_size: 8,
};

#[test]
fn hierarchical_knobs_only_across_hosts_with_several_slots() {
    let all = Space::new(Tuning::default(), &[], TWO_BY_TWO);
    assert_eq!(all.dims().len(), 7);
    assert!(all.is_tuned(Knob::HierarchicalAllgather));
    for layout in [
        ONE_HOST,
        Layout {
            hosts: 4,
            max_local_size: 1,
        },
    ] {
        let s = Space::new(Tuning::default(), &[], layout);
        assert_eq!(s.dims().len(), 5);
        assert!(!s.is_tuned(Knob::HierarchicalAllreduce));
    }
}

#[test]
fn categorical_first_then_continuous() {
    let s = Space::new(Tuning::default(), &[Knob::Cache], TWO_BY_TWO);
    assert_eq!(s.categorical(), vec![0, 1, 2]);
    assert_eq!(s.continuous(), vec![3, 4, 5]);
}

#[test]
fn ends_of_the_ranges_map_to_the_cube_corners() {
    let s = Space::new(Tuning::default(), &[], ONE_HOST);
    let lo = s.decode(&[0.0; 5]).unwrap();
    assert_eq!(lo.fusion_threshold_bytes, 0, "fusion_on = 0 is off");
    assert!(!lo.cache_enabled);
    assert_eq!(
        (lo.cycle_time_us, lo.segment_bytes),
        (CYCLE_MIN_US, SEGMENT_MIN_BYTES)
    );
    let hi = s.decode(&[1.0; 5]).unwrap();
    assert_eq!(hi.fusion_threshold_bytes, FUSION_MAX_BYTES);
    assert_eq!(
        (hi.cycle_time_us, hi.segment_bytes),
        (CYCLE_MAX_US, SEGMENT_MAX_BYTES)
    );
    assert_eq!(s.encode(&hi), vec![1.0; 5]);
}

#[test]
fn decode_rounds_to_the_grid_and_snap_is_idempotent() {
    let s = Space::new(Tuning::default(), &[], TWO_BY_TWO);
    let u = [0.7, 0.6, 0.2, 0.9, 0.3141, 0.2718, 0.577];
    let k = s.decode(&u).unwrap();
    assert_eq!(k.fusion_threshold_bytes % FUSION_GRID_BYTES, 0);
    assert_eq!(k.segment_bytes % SEGMENT_GRID_BYTES, 0);
    let snapped = s.snap(&u).unwrap();
    assert_eq!(s.snap(&snapped).unwrap(), snapped);
    assert_eq!(s.decode(&snapped).unwrap(), k);
    for (a, b) in u.iter().zip(&snapped) {
        assert!((a - b).abs() < 0.5, "{u:?} vs {snapped:?}");
    }
}

#[test]
fn fusion_off_collapses_the_threshold_coordinate() {
    let s = Space::new(Tuning::default(), &[], ONE_HOST);
    let a = s.snap(&[1.0, 0.0, 0.9, 0.5, 0.5]).unwrap();
    let b = s.snap(&[1.0, 0.0, 0.1, 0.5, 0.5]).unwrap();
    assert_eq!(a, b);
    assert_eq!(a[2], 0.0);
}

#[test]
fn fixed_knobs_are_held() {
    let initial = Tuning {
        cycle_time_us: 3000,
        segment_bytes: 12345,
        ..Tuning::default()
    };
    let s = Space::new(initial, &[Knob::CycleTime, Knob::SegmentSize], ONE_HOST);
    assert_eq!(s.dims().len(), 3);
    let k = s.decode(&[0.0, 1.0, 0.5]).unwrap();
    assert_eq!((k.cycle_time_us, k.segment_bytes), (3000, 12345));
    assert!(s.holds_fixed(&k));
    assert!(!s.holds_fixed(&Tuning {
        cycle_time_us: 1,
        ..k
    }));
}

#[test]
fn wrong_length_is_a_typed_error() {
    let s = Space::new(Tuning::default(), &[], ONE_HOST);
    assert_eq!(
        s.decode(&[0.5; 3]),
        Err(AutotuneError::DimensionMismatch {
            expected: 5,
            got: 3
        })
    );
}
