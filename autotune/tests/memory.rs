//! Tuning per world size across membership changes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use autotune::{Decision, Knob, Layout, Memory, Space, Tuner, TunerConfig, Tuning};
use common::{bowl, bowl_with_segments, drive};

fn space(world_size: usize) -> Space {
    let layout = match world_size {
        4 => Layout {
            hosts: 1,
            max_local_size: 4,
        },
        _ => Layout {
            hosts: world_size / 4,
            max_local_size: 4,
        },
    };
    Space::new(Tuning::default(), &[], layout)
}

/// Runs `t` until `scored` samples are scored (or it is final).
fn run_until(t: &mut Tuner, scored: usize, first_step: u64) -> u64 {
    let mut step = first_step;
    while t.scored_samples() < scored && !t.is_done() {
        let seconds = (100u64 << 20) as f64 / bowl_with_segments(&t.current());
        t.record(step, 100 << 20, seconds);
        step += 1;
    }
    step
}

#[test]
fn tuning_resumes_per_world_size() {
    let config = TunerConfig {
        seed: 9,
        ..TunerConfig::default()
    };
    let mut memory = Memory::new();

    // World size 4: tune to the end.
    let mut t4 = memory.tuner_for(4, space(4), config).unwrap();
    assert_eq!(t4.current(), Tuning::default());
    let (best4, _) = drive(&mut t4, bowl, 0.0, 1);
    memory.save(4, &t4);
    assert_eq!(memory.records(4).len(), 3 + 20);

    // Scale up to 8: values measured on the 4-rank ring are not reused.
    let mut t8 = memory.tuner_for(8, space(8), config).unwrap();
    assert_eq!(t8.current(), Tuning::default());
    let step = run_until(&mut t8, 5, 0);
    let best8 = t8.best().unwrap().0;
    memory.save(8, &t8);
    assert_eq!(memory.records(8).len(), 3 + 5);

    // Back to 4: the budget there is spent, so its best point holds at once.
    let mut again4 = memory.tuner_for(4, space(4), config).unwrap();
    assert_eq!(again4.final_knobs(), Some(best4));
    assert_eq!(again4.record(0, 1, 1.0), None);

    // Back to 8: resume from its best so far, warm up again, finish the budget.
    let mut again8 = memory.tuner_for(8, space(8), config).unwrap();
    assert_eq!(again8.current(), best8);
    assert_eq!(again8.scored_samples(), 5);
    let mut first = None;
    let mut s = step;
    while first.is_none() {
        first = again8.record(s, 100 << 20, 0.01);
        s += 1;
    }
    assert!(matches!(first, Some(Decision::WarmUp { .. })));
    run_until(&mut again8, 20, s);
    assert!(again8.is_done());
    assert_eq!(again8.records().len(), 8 + 3 + 15);
    memory.save(8, &again8);
    assert_eq!(memory.world_sizes().collect::<Vec<_>>(), vec![4, 8]);
}

#[test]
fn samples_taken_under_other_fixed_values_are_not_reused() {
    let config = TunerConfig::default();
    let mut memory = Memory::new();
    let mut t = memory.tuner_for(4, space(4), config).unwrap();
    run_until(&mut t, 6, 0);
    memory.save(4, &t);

    let pinned = Tuning {
        cycle_time_us: 777,
        ..Tuning::default()
    };
    let layout = Layout {
        hosts: 1,
        max_local_size: 4,
    };
    let other = Space::new(pinned, &[Knob::CycleTime], layout);
    let resumed = memory.tuner_for(4, other, config).unwrap();
    assert_eq!(resumed.scored_samples(), 0);
    assert_eq!(resumed.current(), pinned);
}

#[test]
fn a_replica_fed_sample_by_sample_resumes_like_the_original() {
    let config = TunerConfig {
        seed: 3,
        ..TunerConfig::default()
    };
    let mut original = Memory::new();
    let mut replica = Memory::new();
    let mut t = original.tuner_for(4, space(4), config).unwrap();
    let mut step = 0;
    while t.scored_samples() < 7 {
        let seconds = (100u64 << 20) as f64 / bowl_with_segments(&t.current());
        if let Some(d) = t.record(step, 100 << 20, seconds) {
            replica.record(4, *d.sample());
        }
        step += 1;
    }
    original.save(4, &t);
    assert_eq!(replica, original);
    let a = original.tuner_for(4, space(4), config).unwrap();
    let b = replica.tuner_for(4, space(4), config).unwrap();
    assert_eq!((a.current(), a.scored_samples()), (b.current(), 7));
    assert_eq!(a.current(), t.best().unwrap().0);
}
