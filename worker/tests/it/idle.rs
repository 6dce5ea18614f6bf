//! When engines run rounds: a rank with something new starts one, the others
//! join it as soon as its first message arrives, and ranks with nothing to
//! agree on run none, whatever the cycle time.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use collectives::ReduceOp;
use worker::{Engine, EngineConfig};

use crate::common;

use common::{allreduce, on_every_rank};

fn submit(e: &Engine, name: &str, rank: usize) -> worker::Handle<f32> {
    let data: Vec<f32> = (0..64).map(|i| (rank * 100 + i) as f32).collect();
    allreduce(e, name, data, ReduceOp::Sum)
}

fn sum(e: &Engine, name: &str, rank: usize) -> Vec<f32> {
    submit(e, name, rank).wait().unwrap().data
}

fn want(size: usize) -> Vec<f32> {
    (0..64)
        .map(|i| (0..size).map(|r| (r * 100 + i) as f32).sum())
        .collect()
}

/// With an hour's cycle, nothing but another rank's round can wake the
/// ranks that submitted first, nor a rank's shutdown but its own news: a
/// late rank's submission completes the tensor on every rank at once. The
/// late rank submits only once the others' engines sleep with no timer.
/// Three ranks gather the round's messages around the ring; six and eight
/// by recursive doubling, six folding ranks 0 and 2 in and out (each must
/// hear from its partner before it speaks), whichever rank is late.
#[test]
fn a_late_rank_wakes_the_ranks_waiting_for_it_without_a_timer() {
    for (size, late) in [(3, 2), (6, 5), (6, 0), (6, 1), (8, 3)] {
        late_rank_wakes_the_others(size, late);
    }
}

fn late_rank_wakes_the_others(size: usize, late: usize) {
    let cfg = EngineConfig {
        cycle_time: Duration::from_secs(3600),
        ..EngineConfig::default()
    };
    let gate = Arc::new(Barrier::new(size));
    let out = on_every_rank(size, cfg, move |rank, e| {
        let mut got = vec![sum(e, "first", rank)];
        if rank == late {
            gate.wait();
        } else {
            let h = submit(e, "late", rank);
            e.parked()
                .recv_timeout(Duration::from_secs(30))
                .expect("the engine sleeps, untimed, waiting for the late rank");
            gate.wait();
            got.push(h.wait().unwrap().data);
            return got;
        }
        got.push(sum(e, "late", rank));
        got
    });
    for (rank, (got, stats)) in out.iter().enumerate() {
        let ctx = format!("{size} ranks, rank {late} late: rank {rank}");
        assert_eq!(got, &vec![want(size), want(size)], "{ctx}");
        assert_eq!(stats.tensors, 2, "{ctx}: {stats:?}");
    }
}

/// Ranks that have nothing to agree on run no rounds: with a 100 µs cycle a
/// timer-driven engine ran one a millisecond in the pause (the timer's
/// granularity: about 170 in 200 ms); these run 3 or 4 in all.
#[test]
fn idle_ranks_run_no_rounds() {
    let pause = Duration::from_millis(300);
    let cfg = EngineConfig {
        cycle_time: Duration::from_micros(100),
        ..EngineConfig::default()
    };
    let out = on_every_rank(2, cfg, move |rank, e| {
        let before = sum(e, "before", rank);
        thread::sleep(pause);
        (before, sum(e, "after", rank))
    });
    for (rank, ((before, after), stats)) in out.iter().enumerate() {
        assert_eq!((before, after), (&want(2), &want(2)), "rank {rank}");
        // A round per submission, a few to leave (the first rank to leave
        // keeps announcing it until the other does): far from one per cycle.
        assert!(
            stats.rounds < 60,
            "rank {rank} ran rounds while idle: {stats:?}"
        );
    }
}
