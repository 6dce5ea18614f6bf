//! What the cluster tests read from the events, and the checks every run
//! must pass whatever happened in it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use elastic::SlotId;

use super::{Cluster, Event, Exit, Training};

/// One rank of a generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub rank: usize,
    pub slot: SlotId,
    pub pid: u32,
}

/// Every generation the workers entered, its members in rank order.
pub fn generations(events: &[Event]) -> BTreeMap<u64, Vec<Member>> {
    let mut out: BTreeMap<u64, Vec<Member>> = BTreeMap::new();
    for e in events {
        if let Event::Assigned {
            pid,
            slot,
            generation,
            rank,
            ..
        } = e
        {
            let member = Member {
                rank: *rank,
                slot: slot.clone(),
                pid: *pid,
            };
            out.entry(*generation).or_default().push(member);
        }
    }
    for members in out.values_mut() {
        members.sort_by_key(|m| m.rank);
    }
    out
}

/// The highest step done in `generation`.
pub fn last_step(events: &[Event], generation: u64) -> Option<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Step {
                generation: g,
                step,
                ..
            } if *g == generation => Some(*step),
            _ => None,
        })
        .max()
}

/// The first step done in `generation`.
pub fn first_step(events: &[Event], generation: u64) -> Option<u64> {
    events.iter().find_map(|e| match e {
        Event::Step {
            generation: g,
            step,
            ..
        } if *g == generation => Some(*step),
        _ => None,
    })
}

/// How each worker that ended did, by pid.
pub fn exits(events: &[Event]) -> BTreeMap<u32, Exit> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Exited { pid, exit, .. } => Some((*pid, exit.clone())),
            _ => None,
        })
        .collect()
}

/// Workers that rolled back, with the step they went back to.
pub fn rollbacks(events: &[Event]) -> Vec<(u32, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::RolledBack { pid, to, .. } => Some((*pid, *to)),
            _ => None,
        })
        .collect()
}

/// Waits until generation `generation` has `size` members, and returns them.
///
/// # Panics
///
/// When that takes longer than `within` (virtual time).
pub async fn wait_generation(
    cluster: &Cluster,
    generation: u64,
    size: usize,
    within: Duration,
) -> Vec<Member> {
    let what = format!("generation {generation} of {size} workers");
    cluster
        .wait_for(&what, within, |events| {
            let g = generations(events).remove(&generation)?;
            (g.len() >= size).then_some(g)
        })
        .await
}

/// Waits until some rank has done step `step` (or a later one) in
/// `generation`.
///
/// # Panics
///
/// When that takes longer than `within` (virtual time).
pub async fn wait_step(cluster: &Cluster, generation: u64, step: u64, within: Duration) {
    let what = format!("step {step} in generation {generation}");
    cluster
        .wait_for(&what, within, |events| {
            last_step(events, generation).filter(|&s| s >= step)
        })
        .await;
}

/// How a job that succeeded ended: its last generation and its members.
#[derive(Debug)]
pub struct Finish {
    pub generation: u64,
    pub members: Vec<Member>,
}

/// Checks what must hold after any run that succeeded, and returns how it
/// ended:
/// - every step's allreduce summed `rank + 1` over exactly the ranks of its
///   generation;
/// - every generation's ranks are `0..n`, one worker each, on distinct
///   slots, and every rank saw the same size;
/// - from one generation to the next, the workers in both keep their
///   relative order and come first (newcomers get the highest ranks);
/// - the last generation's members all finished every step, holding the
///   state of a run that applied each step once.
///
/// # Panics
///
/// When any of that does not hold (the message lists the events).
pub fn check_run(events: &[Event], training: &Training) -> Finish {
    let fail = |what: String| fail(events, &what);
    for e in events {
        if let Event::Step { size, sum, pid, .. } = e {
            let expected = (size * (size + 1) / 2) as f64;
            if (sum - expected).abs() > f64::EPSILON {
                fail(format!("worker {pid} summed {sum} on {size} ranks"));
            }
        }
    }
    let gens = generations(events);
    for (g, members) in &gens {
        let ranks: Vec<usize> = members.iter().map(|m| m.rank).collect();
        let slots: BTreeSet<&SlotId> = members.iter().map(|m| &m.slot).collect();
        if ranks != (0..members.len()).collect::<Vec<_>>() || slots.len() != members.len() {
            fail(format!("generation {g} has ranks {ranks:?} on {slots:?}"));
        }
        for e in events {
            if let Event::Assigned {
                generation, size, ..
            } = e
                && generation == g
                && *size != members.len()
            {
                fail(format!("generation {g}: size {size} vs {}", members.len()));
            }
        }
    }
    check_rank_order(events, &gens);
    check_finished(events, &gens, training)
}

fn fail(events: &[Event], what: &str) -> ! {
    panic!("{what}; events:\n{}", super::show(events))
}

/// From one generation to the next, survivors keep their ranks where they
/// can (below the new size; with more survivors than ranks, the first of
/// them in order), and rank 0 is a survivor's whenever there is one: when the
/// last rank 0 is gone, one survivor moves there and no other moves. A
/// coordinator that took over knows only the live members' order (the job's
/// record), so there the survivors may come first in their order instead.
fn check_rank_order(events: &[Event], gens: &BTreeMap<u64, Vec<Member>>) {
    for (older, newer) in gens.values().zip(gens.values().skip(1)) {
        let before: Vec<u32> = older.iter().map(|m| m.pid).collect();
        let after: Vec<u32> = newer.iter().map(|m| m.pid).collect();
        let survivors: Vec<u32> = before
            .iter()
            .copied()
            .filter(|p| after.contains(p))
            .collect();
        let bad = |why: &str| fail(events, &format!("ranks {before:?} became {after:?}: {why}"));
        if survivors.len() > after.len() {
            if after[..] != survivors[..after.len()] {
                bad("with more survivors than ranks, the first survivors must keep their order");
            }
            continue;
        }
        if !survivors.is_empty() && !survivors.contains(&after[0]) {
            bad("rank 0 must be a survivor's");
        }
        let moved = before
            .iter()
            .enumerate()
            .filter(|&(r, p)| r < after.len() && survivors.contains(p) && after[r] != *p)
            .count();
        let allowed = usize::from(!survivors.contains(&before[0]));
        let compacted = after[..survivors.len()] == survivors[..];
        if moved > allowed && !compacted {
            bad("survivors must keep their ranks (one may move to a lost rank 0)");
        }
    }
}

fn check_finished(
    events: &[Event],
    gens: &BTreeMap<u64, Vec<Member>>,
    training: &Training,
) -> Finish {
    let Some((&generation, members)) = gens.last_key_value() else {
        fail(events, "no generation started");
    };
    let exits = exits(events);
    let s = training.steps;
    let whole = (s * (s + 1) / 2) as f64;
    for m in members {
        match exits.get(&m.pid) {
            Some(Exit::Finished {
                generation: g,
                steps,
                acc,
            }) if *g == generation && *steps == s && (acc - whole).abs() < f64::EPSILON => {}
            other => fail(
                events,
                &format!(
                    "rank {} ({}) of the last generation {generation} ended {other:?}, \
                     not after {s} steps holding {whole}",
                    m.rank, m.slot
                ),
            ),
        }
    }
    Finish {
        generation,
        members: members.clone(),
    }
}
