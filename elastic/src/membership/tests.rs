//! Unit tests of the state machine's invariants. The readable scenarios are in
//! `elastic/tests/scenarios/*.txt`.

use std::time::Duration;

use super::machine::WorkerState;
use super::*;
use crate::hosts::HostSlots;

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn slot(host: &str, n: u32) -> SlotId {
    SlotId::new(host, n)
}

fn hosts(list: &[(&str, usize)]) -> Vec<HostSlots> {
    list.iter()
        .map(|&(host, slots)| HostSlots {
            host: host.into(),
            slots,
        })
        .collect()
}

/// A job of `n` workers on host `a`, assigned generation 1.
fn started(n: usize) -> Membership {
    let mut m = Membership::new(Policy::new(1, n, n));
    m.discovered(s(0), &hosts(&[("a", n)]));
    for i in 0..n {
        m.registered(s(1), &slot("a", i as u32));
    }
    assert_eq!(m.generation(), Generation(1));
    m
}

#[test]
fn slot_display() {
    assert_eq!(slot("node-1", 3).to_string(), "node-1 slot 3");
}

#[test]
fn unknown_slots_and_stale_generations_are_ignored() {
    let mut m = started(2);
    let ghost = slot("zz", 9);
    assert!(m.registered(s(2), &ghost).is_empty());
    assert!(m.rejoined(s(2), &ghost, Generation(2)).is_empty());
    assert!(m.failed(s(2), &ghost, "x").is_empty());
    assert!(m.finished(s(2), &ghost).is_empty());
    // A member registering twice, and rejoins for the current or a far generation.
    assert!(m.registered(s(2), &slot("a", 0)).is_empty());
    assert!(m.rejoined(s(2), &slot("a", 0), Generation(1)).is_empty());
    assert!(m.rejoined(s(2), &slot("a", 0), Generation(3)).is_empty());
    assert_eq!(m.members(), &[slot("a", 0), slot("a", 1)]);
}

#[test]
fn nothing_happens_after_the_job_ends() {
    let mut m = started(2);
    m.finished(s(5), &slot("a", 0));
    assert_eq!(m.finished(s(5), &slot("a", 1)), vec![Command::Finish]);
    assert!(m.is_over());
    assert!(m.failed(s(6), &slot("a", 0), "late").is_empty());
    assert!(m.discovered(s(6), &hosts(&[("b", 2)])).is_empty());
    assert!(m.tick(s(10_000)).is_empty());
    assert_eq!(m.next_deadline(), None);
}

#[test]
fn new_normalizes_an_impossible_policy() {
    let mut m = Membership::new(Policy::new(0, 0, 5));
    let out = m.discovered(s(0), &hosts(&[("a", 4)]));
    assert_eq!(out, vec![Command::Spawn(slot("a", 0))]);
    assert_eq!(
        m.registered(s(1), &slot("a", 0)),
        vec![Command::Assign {
            generation: Generation(1),
            ranks: vec![slot("a", 0)]
        }]
    );
}

/// Deterministic pseudo-random numbers (a 64-bit LCG), so failures reproduce.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// Drives random events and checks the invariants after each one.
fn random_run(seed: u64) {
    let mut rng = Lcg(seed);
    let mut policy = Policy::new(1 + rng.below(3), 2 + rng.below(6), 1 + rng.below(6));
    policy.reset_limit = [None, Some(5)][rng.below(2)];
    policy.blacklist.cooldown = Some((s(5), s(40)));
    let min_np = policy.clone().normalized().min_np;
    let max_np = policy.clone().normalized().max_np;
    let mut m = Membership::new(policy);
    let names = ["a", "b", "c"];
    let mut now = Duration::ZERO;
    let mut last_gen = Generation(0);
    for _ in 0..400 {
        now += Duration::from_millis(rng.below(20_000) as u64);
        let sl = pick_slot(&m, &mut rng, names);
        let out = match rng.below(8) {
            0 => {
                let mut list = Vec::new();
                for h in names {
                    if rng.below(3) > 0 {
                        list.push((h, 1 + rng.below(4)));
                    }
                }
                m.discovered(now, &hosts(&list))
            }
            1 | 2 => m.registered(now, &sl),
            3 | 4 => m.rejoined(now, &sl, m.generation().next()),
            5 => m.failed(now, &sl, "random"),
            6 if rng.below(10) == 0 => m.finished(now, &sl),
            _ => m.tick(now),
        };
        check(&m, &out, max_np, min_np, &mut last_gen);
        if m.is_over() {
            return;
        }
    }
}

/// Mostly a slot with a worker (so that events matter), sometimes any slot.
fn pick_slot(m: &Membership, rng: &mut Lcg, names: [&str; 3]) -> SlotId {
    let known: Vec<&SlotId> = m.workers.keys().collect();
    if known.is_empty() || rng.below(5) == 0 {
        slot(names[rng.below(3)], rng.below(4) as u32)
    } else {
        known[rng.below(known.len())].clone()
    }
}

fn check(m: &Membership, out: &[Command], max_np: usize, min_np: usize, last_gen: &mut Generation) {
    let placeable = m.placeable_live();
    let by_definition = (m.workers.iter())
        .filter(|(s, w)| w.state != WorkerState::Finished && m.usable(s))
        .count();
    assert_eq!(placeable, by_definition, "placeable_live, host by host");
    if out.iter().any(|c| matches!(c, Command::Spawn(_))) {
        assert!(
            placeable <= max_np,
            "spawned up to {placeable} > max_np {max_np}"
        );
    }
    let mut sorted = m.members().to_vec();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), m.members().len(), "a member listed twice");
    for s in m.members() {
        let state = m.workers.get(s).map(|w| w.state);
        assert!(matches!(
            state,
            Some(WorkerState::Member | WorkerState::Finished)
        ));
    }
    for c in out {
        if let Command::Assign { generation, ranks } = c {
            assert_eq!(*generation, last_gen.next());
            assert!(ranks.len() >= min_np && ranks.len() <= max_np);
            *last_gen = *generation;
        }
    }
    assert_eq!(m.generation(), *last_gen);
    // Every generation after the first is a reset, except those that only
    // place replacements a generation went on without.
    assert!(u64::from(m.resets()) <= last_gen.0.saturating_sub(1));
}

#[test]
fn random_event_streams_keep_the_invariants() {
    for seed in 0..300 {
        random_run(seed);
    }
}

#[test]
fn offered_slots_are_exactly_the_ones_listed() {
    // Pods on slots 0 and 2 of node n1 (slot 1's pod is gone), 5 of n2.
    let mut m = Membership::new(Policy::new(2, 8, 3));
    let pods = [slot("n1", 0), slot("n1", 2), slot("n2", 5)];
    let out = m.offered(s(0), &pods);
    let spawned: Vec<&SlotId> = out
        .iter()
        .filter_map(|c| match c {
            Command::Spawn(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(spawned, pods.iter().collect::<Vec<_>>());
    for p in &pods {
        m.registered(s(1), p);
    }
    assert_eq!(m.generation(), Generation(1));
    assert_eq!(m.members(), &pods);
    // A pod that leaves (its key marked leaving): the others move on at
    // their next commit and it is not placed again.
    let out = m.offered(s(2), &pods[..2]);
    assert_eq!(
        out,
        vec![Command::HostsUpdated {
            generation: Generation(2)
        }]
    );
    m.rejoined(s(3), &pods[0], Generation(2));
    let out = m.rejoined(s(3), &pods[1], Generation(2));
    assert!(out.contains(&Command::Leave {
        slot: pods[2].clone()
    }));
    assert_eq!(m.members(), &pods[..2]);
    assert_eq!(m.resets(), 1);
}

#[test]
fn host_lists_after_offered_slots_count_from_zero_again() {
    let mut m = Membership::new(Policy::new(1, 4, 1));
    m.offered(s(0), &[slot("n", 7)]);
    let out = m.discovered(s(1), &hosts(&[("n", 1)]));
    assert!(out.contains(&Command::Spawn(slot("n", 0))), "{out:?}");
    assert!(out.contains(&Command::Stop {
        slot: slot("n", 7),
        why: "host n now offers 1 slots".into()
    }));
}

/// A slot whose worker cannot be started (no process can be made) is tried
/// again later and later, not at once: the driver carried out `Spawn`,
/// failure, `Spawn`, ... in a loop that never slept (and so never heard a
/// signal).
#[test]
fn a_failed_start_is_retried_after_a_growing_wait() {
    let ms = Duration::from_millis;
    let mut m = Membership::new(Policy::new(1, 2, 2));
    let a0 = slot("a", 0);
    let out = m.discovered(ms(0), &hosts(&[("a", 2)]));
    assert_eq!(
        out,
        vec![Command::Spawn(a0.clone()), Command::Spawn(slot("a", 1))]
    );
    let mut now = ms(0);
    for (n, wait) in [(1, 100), (2, 200), (3, 400)] {
        let (out, in_a_row) = m.start_failed(now, &a0, "Resource temporarily unavailable");
        assert_eq!(in_a_row, n);
        assert!(!out.contains(&Command::Spawn(a0.clone())), "{out:?}");
        assert_eq!(m.next_deadline(), Some(now + ms(wait)));
        assert!(m.tick(now + ms(wait - 1)).is_empty());
        now += ms(wait);
        assert_eq!(m.tick(now), vec![Command::Spawn(a0.clone())]);
    }
    // A worker that registers ends the run: its next failed start waits
    // the first wait again.
    m.registered(now, &a0);
    let (_, in_a_row) = m.start_failed(now, &a0, "again");
    assert_eq!(in_a_row, 1);
}

/// Four train on host `a`'s five slots and the fifth worker waits as a hot
/// spare; a failed member's place is taken by the spare as soon as the
/// survivors rejoin, without waiting for the spare started in its stead.
#[test]
fn a_hot_spare_takes_a_failed_members_place_at_once() {
    let mut policy = Policy::new(2, 4, 4);
    policy.hot_spares = 1;
    let mut m = Membership::new(policy);
    let spawned = m.discovered(s(0), &hosts(&[("a", 6)]));
    assert_eq!(spawned.len(), 5, "four to train, one spare: {spawned:?}");
    let mut out = Vec::new();
    for i in 0..5 {
        out.extend(m.registered(s(1), &slot("a", i)));
    }
    let ranks: Vec<SlotId> = (0..4).map(|i| slot("a", i)).collect();
    assert!(out.contains(&Command::Assign {
        generation: Generation(1),
        ranks: ranks.clone()
    }));
    assert!(
        out.contains(&Command::Spare { slot: slot("a", 4) }),
        "{out:?}"
    );
    assert!(
        !out.iter().any(|c| matches!(c, Command::Leave { .. })),
        "{out:?}"
    );
    let counts = WorkerCounts {
        starting: 0,
        waiting: 1,
        members: 4,
    };
    assert_eq!(m.worker_counts(), counts, "the spare waits");
    // Member 1 dies: a spare is started again on a free slot.
    let out = m.failed(s(5), &slot("a", 1), "killed");
    assert!(
        out.contains(&Command::Reset {
            generation: Generation(2)
        }),
        "{out:?}"
    );
    assert!(out.contains(&Command::Spawn(slot("a", 1))), "{out:?}");
    // The survivors rejoin: generation 2 places the spare at once, in the
    // lost member's rank (the survivors keep theirs), the new spare still
    // starting.
    let mut out = Vec::new();
    for i in [0, 2, 3] {
        out.extend(m.rejoined(s(5), &slot("a", i), Generation(2)));
    }
    let want = vec![slot("a", 0), slot("a", 4), slot("a", 2), slot("a", 3)];
    assert_eq!(
        out,
        vec![Command::Assign {
            generation: Generation(2),
            ranks: want.clone()
        }]
    );
    // The new spare registers: no new generation, it waits.
    let out = m.registered(s(8), &slot("a", 1));
    assert_eq!(out, vec![Command::Spare { slot: slot("a", 1) }]);
    assert_eq!(m.members(), want.as_slice());
    // A spare that dies is started again; training is not disturbed.
    let out = m.failed(s(9), &slot("a", 1), "killed");
    assert_eq!(out, vec![Command::Spawn(slot("a", 1))], "{out:?}");
    assert_eq!(m.generation(), Generation(2));
}

/// Without hot spares a registration beyond `max_np` is not kept waiting.
#[test]
fn without_hot_spares_no_worker_waits_unplaced() {
    let mut m = started(2);
    assert!(m.policy().hot_spares == 0);
    let out = m.discovered(s(3), &hosts(&[("a", 3)]));
    assert!(out.is_empty(), "max_np 2 reached: {out:?}");
}

#[test]
fn a_lost_host_gets_no_replacement_and_a_spare_host_takes_its_slots() {
    // a and b train (max 2), c is spare.
    let mut m = Membership::new(Policy::new(1, 2, 2));
    let out = m.discovered(s(0), &hosts(&[("a", 1), ("b", 1), ("c", 1)]));
    assert_eq!(
        out,
        vec![Command::Spawn(slot("a", 0)), Command::Spawn(slot("b", 0))]
    );
    m.registered(s(1), &slot("a", 0));
    m.registered(s(1), &slot("b", 0));
    assert_eq!(m.generation(), Generation(1));
    let out = m.host_lost(s(2), &slot("b", 0), "lost its node");
    assert!(
        out.contains(&Command::Spawn(slot("c", 0))),
        "the spare host's slot: {out:?}"
    );
    assert!(
        !out.iter()
            .any(|c| matches!(c, Command::Spawn(x) if x.host == "b")),
        "nothing on the lost host: {out:?}"
    );
    // Discovery listing it again brings it back as a candidate.
    m.discovered(s(3), &hosts(&[("a", 1), ("b", 1), ("c", 1)]));
    assert!(m.failed(s(4), &slot("zz", 0), "x").is_empty());
}

#[test]
fn a_straggler_taken_out_blacklists_its_host_at_once_and_the_job_goes_on() {
    // a:2 and b:2 train (min 2, max 4).
    let mut m = Membership::new(Policy::new(2, 4, 4));
    m.discovered(s(0), &hosts(&[("a", 2), ("b", 2)]));
    for (h, n) in [("a", 0), ("a", 1), ("b", 0), ("b", 1)] {
        m.registered(s(1), &slot(h, n));
    }
    assert_eq!(m.generation(), Generation(1));
    assert!(
        m.straggler(s(2), &slot("zz", 0), "slow").is_empty(),
        "no such member"
    );
    let out = m.straggler(s(2), &slot("b", 1), "a straggler");
    let stopped: Vec<&SlotId> = (out.iter())
        .filter_map(|c| match c {
            Command::Stop { slot, .. } => Some(slot),
            _ => None,
        })
        .collect();
    assert_eq!(stopped, [&slot("b", 1), &slot("b", 0)], "{out:?}");
    assert!(
        out.contains(&Command::Blacklisted {
            host: "b".into(),
            until: None
        }),
        "the first straggle bans the host: {out:?}"
    );
    assert!(
        out.iter().any(|c| matches!(c, Command::Reset { .. })),
        "{out:?}"
    );
    assert!(
        !out.iter()
            .any(|c| matches!(c, Command::Spawn(x) if x.host == "b"))
    );
    // Only a's ranks left: taking one out would leave fewer than min-np on
    // other hosts, so a is not banned; its worker is replaced.
    let mut m = started(2);
    let out = m.straggler(s(2), &slot("a", 0), "slow");
    assert!(
        !out.iter().any(|c| matches!(c, Command::Blacklisted { .. })),
        "{out:?}"
    );
}
