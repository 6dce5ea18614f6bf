//! The inspector on virtual time: no sockets, no sleeping.

use std::time::{Duration, Instant};

use control::{Knobs, PendingReport};

use super::inspector::{Inspector, RankAt, Stall, StallConfig, StallEvent};
use elastic::membership::SlotId as SlotKey;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn slot(host: &str, slot: u32) -> SlotKey {
    SlotKey {
        host: host.into(),
        slot,
    }
}

fn at(rank: usize) -> RankAt {
    RankAt {
        rank,
        slot: slot("localhost", rank as u32),
    }
}

/// A complete report of `(name, age in ms)`, oldest first.
fn pending(tensors: &[(&str, u64)]) -> PendingReport {
    PendingReport::bounded(tensors.iter().map(|&(n, a)| (n, ms(a))))
}

/// An inspector warning after 1 s and ending the job after `shutdown` ms.
struct Sim {
    t0: Instant,
    insp: Inspector,
}

impl Sim {
    fn new(shutdown: Option<u64>) -> Self {
        Sim {
            t0: Instant::now(),
            insp: Inspector::new(StallConfig {
                warning: ms(1000),
                shutdown: shutdown.map(ms),
            }),
        }
    }

    /// `rank` (on localhost, slot = rank) reports `tensors` at `t` ms.
    fn report(&mut self, t: u64, rank: usize, tensors: &[(&str, u64)]) {
        let s = slot("localhost", rank as u32);
        self.insp
            .handle_report(self.t0 + ms(t), rank, &s, &pending(tensors));
    }

    fn poll(&mut self, t: u64) -> Vec<StallEvent> {
        self.insp.poll(self.t0 + ms(t))
    }

    /// The single warning due at `t`; fails naming what came instead.
    fn warning(&mut self, t: u64) -> Stall {
        match self.poll(t).as_slice() {
            [StallEvent::Warn(s)] => s.clone(),
            other => panic!("expected one warning at {t} ms, got {other:?}"),
        }
    }
}

#[test]
fn a_tensor_one_rank_never_submits_is_warned_about_once_naming_that_rank() {
    let mut sim = Sim::new(None);
    sim.report(0, 0, &[("grad.3", 0)]);
    sim.report(0, 1, &[]);
    sim.report(0, 2, &[("grad.3", 0)]);
    assert_eq!(sim.poll(999), [], "warned before the warning time");
    let s = sim.warning(1000);
    assert_eq!(s.tensors, [("grad.3".to_owned(), ms(1000))]);
    assert_eq!(s.missing, [at(1)]);
    assert_eq!(s.submitted, [0, 2]);
    // Fresh heartbeats of the same stall: no new warning until twice the age.
    sim.report(1100, 0, &[("grad.3", 1100)]);
    sim.report(1100, 1, &[]);
    assert_eq!(sim.poll(1500), []);
    assert_eq!(sim.poll(1999), []);
    assert_eq!(sim.warning(2000).age(), ms(2000));
    assert_eq!(sim.poll(2500), []);
}

#[test]
fn ages_grow_from_when_the_report_arrived() {
    let mut sim = Sim::new(None);
    sim.report(0, 1, &[]);
    sim.report(300, 0, &[("w", 600)]);
    assert_eq!(sim.poll(699), []);
    assert_eq!(sim.warning(700).age(), ms(1000));
}

#[test]
fn a_tensor_every_rank_has_submitted_is_not_a_stall() {
    let mut sim = Sim::new(Some(2000));
    for rank in 0..3 {
        sim.report(0, rank, &[("big", 5000)]);
    }
    assert_eq!(sim.poll(10_000), []);
}

#[test]
fn ranks_not_heard_from_or_with_a_cut_report_are_not_blamed() {
    let mut sim = Sim::new(None);
    sim.report(0, 0, &[("w", 5000)]);
    assert_eq!(sim.poll(0), [], "blamed a rank that never reported");
    // Rank 1 had more pending than a heartbeat lists; "w" may be among them.
    let crowded: Vec<String> = (0..control::MAX_PENDING_REPORTED + 1)
        .map(|i| format!("t{i}"))
        .collect();
    let cut = PendingReport::bounded(crowded.iter().map(|n| (n.as_str(), ms(0))));
    assert!(!cut.is_complete());
    sim.insp
        .handle_report(sim.t0, 1, &slot("localhost", 1), &cut);
    let events = sim.poll(0);
    assert!(
        events.iter().all(|e| match e {
            StallEvent::Warn(s) => s.tensors.iter().all(|(n, _)| n != "w"),
            StallEvent::Shutdown(_) => false,
        }),
        "blamed rank 1 for w on a cut report: {events:?}"
    );
}

#[test]
fn a_rank_that_exited_is_blamed_and_a_forgotten_one_is_not() {
    let mut sim = Sim::new(None);
    sim.report(0, 0, &[("w", 1000)]);
    // The link task of an exited worker reports it with nothing pending.
    sim.report(0, 1, &[]);
    sim.report(0, 2, &[]);
    assert_eq!(sim.warning(0).missing, [at(1), at(2)]);
    sim.insp.forget(2);
    sim.report(0, 0, &[("v", 1000)]);
    assert_eq!(sim.warning(0).missing, [at(1)]);
}

#[test]
fn tensors_waiting_on_the_same_ranks_make_one_warning_oldest_first() {
    let mut sim = Sim::new(None);
    sim.report(0, 0, &[("a", 3000), ("b", 2000), ("c", 1500)]);
    sim.report(0, 1, &[("c", 1500)]);
    sim.report(0, 2, &[]);
    let events = sim.poll(0);
    let [StallEvent::Warn(first), StallEvent::Warn(second)] = events.as_slice() else {
        panic!("expected two warnings, got {events:?}");
    };
    assert_eq!(
        first.tensors,
        [("a".to_owned(), ms(3000)), ("b".to_owned(), ms(2000))]
    );
    assert_eq!(
        (first.missing.clone(), first.submitted.clone()),
        (vec![at(1), at(2)], vec![0])
    );
    assert_eq!(second.tensors, [("c".to_owned(), ms(1500))]);
    assert_eq!(
        (second.missing.clone(), second.submitted.clone()),
        (vec![at(2)], vec![0, 1])
    );
}

#[test]
fn a_name_used_again_after_it_finished_is_warned_about_again() {
    let mut sim = Sim::new(None);
    sim.report(0, 0, &[("grad", 1000)]);
    sim.report(0, 1, &[]);
    sim.warning(0);
    // Finished everywhere, then the next step stalls on the same name.
    sim.report(100, 0, &[]);
    assert_eq!(sim.poll(100), []);
    sim.report(200, 0, &[("grad", 0)]);
    assert_eq!(sim.poll(1199), []);
    assert_eq!(sim.warning(1200).age(), ms(1000));
}

#[test]
fn a_stall_past_the_shutdown_time_ends_the_job_once() {
    let mut sim = Sim::new(Some(3000));
    sim.report(0, 0, &[("grad.2", 500), ("grad.1", 0)]);
    sim.report(0, 1, &[("grad.1", 0)]);
    sim.report(0, 2, &[]);
    assert_eq!(sim.warning(500).tensors[0].0, "grad.2");
    assert_eq!(sim.warning(1000).tensors[0].0, "grad.1");
    let early = sim.poll(2499);
    assert!(
        early.iter().all(|e| matches!(e, StallEvent::Warn(_))),
        "ended the job before grad.2 was 3 s old: {early:?}"
    );
    let events = sim.poll(2500);
    let [StallEvent::Shutdown(s)] = events.as_slice() else {
        panic!("expected a shutdown when grad.2 is 3 s old, got {events:?}");
    };
    assert_eq!(s.tensors, [("grad.2".to_owned(), ms(3000))]);
    assert_eq!(s.missing, [at(1), at(2)]);
    assert_eq!(s.submitted, [0]);
    assert_eq!(sim.poll(60_000), [], "decided again after the shutdown");
}

#[test]
fn with_no_shutdown_time_a_stall_only_warns() {
    let mut sim = Sim::new(None);
    sim.report(0, 0, &[("w", 0)]);
    sim.report(0, 1, &[]);
    for t in (0..3_600_000).step_by(250) {
        for e in sim.poll(t) {
            assert!(matches!(e, StallEvent::Warn(_)), "at {t} ms: {e:?}");
        }
    }
}

#[test]
fn messages_name_the_tensor_the_waiting_ranks_and_their_hosts() {
    let one = Stall {
        tensors: vec![("grad.3".into(), ms(2140))],
        missing: vec![RankAt {
            rank: 1,
            slot: slot("node-b", 0),
        }],
        submitted: vec![0],
    };
    assert_eq!(
        one.to_string(),
        "stall: tensor grad.3 has waited 2.1 s on rank 1 (node-b slot 0); rank 0 submitted it"
    );
    let many = Stall {
        tensors: (0..7).map(|i| (format!("g{i}"), ms(9000 - i))).collect(),
        missing: vec![at(2), at(3)],
        submitted: vec![0, 1],
    };
    assert_eq!(
        many.to_string(),
        "stall: 7 tensors (g0, g1, g2, g3, g4 and 2 more) have waited up to 9.0 s \
         on ranks 2 (localhost slot 2), 3 (localhost slot 3); ranks 0, 1 submitted them"
    );
}

#[test]
fn the_config_comes_from_the_knobs() {
    let mut k = Knobs {
        stall_shutdown_ms: Some(5),
        ..Knobs::default()
    };
    assert_eq!(StallConfig::from_knobs(&k), None);
    k.stall_warning_ms = Some(60_000);
    assert_eq!(
        StallConfig::from_knobs(&k),
        Some(StallConfig {
            warning: ms(60_000),
            shutdown: Some(ms(5))
        })
    );
}

/// `next_due` says when `poll` next has something: the warning, the one at
/// twice the age, the shutdown; nothing while no tensor is stalled or after
/// the shutdown. Polling at the said time gives exactly the event.
#[test]
fn the_next_due_time_is_when_poll_next_speaks() {
    let mut sim = Sim::new(Some(3000));
    let due = |sim: &Sim, t: u64| sim.insp.next_due(sim.t0 + ms(t)).map(|d| d - sim.t0);
    sim.report(0, 0, &[("grad.3", 0)]);
    assert_eq!(
        due(&sim, 0),
        None,
        "one rank reported: nothing is stalled yet"
    );
    sim.report(0, 1, &[]);
    assert_eq!(due(&sim, 0), Some(ms(1000)));
    assert_eq!(due(&sim, 400), Some(ms(1000)), "the same time, seen later");
    assert_eq!(sim.poll(999), []);
    sim.warning(1000);
    assert_eq!(due(&sim, 1000), Some(ms(2000)), "again at twice the age");
    assert_eq!(sim.poll(1999), []);
    sim.warning(2000);
    assert_eq!(due(&sim, 2000), Some(ms(3000)), "the shutdown before 4 s");
    assert!(matches!(
        sim.poll(3000).as_slice(),
        [StallEvent::Shutdown(_)]
    ));
    assert_eq!(due(&sim, 3000), None, "nothing after the shutdown");
}

/// Reports replaced and ranks forgotten keep the count of ranks listing a
/// tensor right: a stall is found again once listed again, and none while
/// no rank lists anything.
#[test]
fn a_tensor_listed_again_after_empty_reports_and_a_forgotten_rank_is_found_again() {
    let mut sim = Sim::new(None);
    sim.report(0, 0, &[("grad.1", 0)]);
    sim.report(0, 1, &[]);
    sim.report(0, 2, &[("grad.1", 0)]);
    sim.insp.forget(2);
    sim.report(100, 0, &[]);
    assert_eq!(sim.poll(2000), [], "nothing listed, nothing stalled");
    assert_eq!(sim.insp.next_due(sim.t0 + ms(2000)), None);
    sim.report(2000, 0, &[("grad.1", 0)]);
    let s = sim.warning(3000);
    assert_eq!(s.missing, [at(1)]);
    assert_eq!(s.submitted, [0]);
}
