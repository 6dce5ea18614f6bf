//! What a job that cannot form its next generation waits for: discovery
//! offers fewer usable slots than the generation needs (`-np` for the
//! first, `--min-np` after). The driver says so while it lasts.

use std::time::Duration;

use super::Generation;
use super::machine::{Membership, Phase};
use crate::hosts::HostSlots;

/// Discovery offers too few slots for the generation being formed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The generation being formed (1: the job has not started).
    pub next: Generation,
    /// Workers it waits for: `-np` for the first generation, `--min-np` after.
    pub wanted: usize,
    /// `--min-np`: at the deadline the job starts with at least this many
    /// ready workers, or fails.
    pub min_np: usize,
    /// Usable hosts and their slots, in discovery order (blacklisted hosts
    /// left out).
    pub offered: Vec<HostSlots>,
    /// Discovered hosts that are blacklisted now.
    pub blacklisted: Vec<String>,
    /// When the elastic timeout runs out, on the job's clock.
    pub deadline: Duration,
}

impl Shortfall {
    /// Usable slots offered, however many hosts hold them.
    pub fn offered_slots(&self) -> usize {
        self.offered
            .iter()
            .fold(0usize, |n, h| n.saturating_add(h.slots))
    }
}

impl Membership {
    /// `Some` while a generation is being formed and discovery offers fewer
    /// usable slots (up to `--max-np`) than it waits for, until the elastic
    /// timeout has passed.
    pub fn shortfall(&self) -> Option<Shortfall> {
        let Phase::Gathering(g) = &self.phase else {
            return None;
        };
        let wanted = self.threshold(g.next);
        // Asked after every batch of events: the hosts (thousands at scale)
        // are copied only when there is a shortfall to describe.
        if g.overdue || self.usable_count().min(self.policy.max_np) >= wanted {
            return None;
        }
        let since = g.short_since?;
        let offered: Vec<HostSlots> = self.usable_hosts().cloned().collect();
        Some(Shortfall {
            next: g.next,
            wanted,
            min_np: self.policy.min_np,
            offered,
            blacklisted: self
                .hosts
                .iter()
                .filter(|h| self.blacklist.is_blacklisted(&h.host))
                .map(|h| h.host.clone())
                .collect(),
            deadline: since.saturating_add(self.policy.elastic_timeout),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::{Command, Policy, SlotId};

    fn hosts(list: &[(&str, usize)]) -> Vec<HostSlots> {
        list.iter()
            .map(|(h, n)| HostSlots {
                host: (*h).to_owned(),
                slots: *n,
            })
            .collect()
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn one_slot_for_min_np_two_waits_from_the_start_until_the_timeout() {
        let mut m = Membership::new(Policy::new(2, 4, 2));
        let none_yet = m.shortfall().unwrap();
        assert_eq!((none_yet.wanted, none_yet.offered_slots()), (2, 0));
        m.discovered(S, &hosts(&[("localhost", 1)]));
        let short = m.shortfall().unwrap();
        assert_eq!(short.next, Generation(1));
        assert_eq!(short.offered, hosts(&[("localhost", 1)]));
        assert_eq!(short.deadline, Duration::from_secs(600));
        m.registered(2 * S, &SlotId::new("localhost", 0));
        assert!(m.shortfall().is_some());
        // Past the timeout the job fails: nothing is waited for any more.
        let out = m.tick(Duration::from_secs(600));
        assert!(matches!(out.last(), Some(Command::Fail(_))), "{out:?}");
        assert_eq!(m.shortfall(), None);
    }

    #[test]
    fn enough_slots_is_no_shortfall_even_while_workers_start() {
        let mut m = Membership::new(Policy::new(2, 4, 2));
        m.discovered(S, &hosts(&[("a", 1), ("b", 1)]));
        assert_eq!(m.shortfall(), None);
        m.registered(S, &SlotId::new("a", 0));
        m.registered(S, &SlotId::new("b", 0));
        assert_eq!(m.generation(), Generation(1));
        assert_eq!(m.shortfall(), None);
    }

    #[test]
    fn a_removed_host_below_min_np_pauses_the_job_from_then() {
        let mut m = Membership::new(Policy::new(2, 4, 2));
        m.discovered(Duration::ZERO, &hosts(&[("a", 1), ("b", 1)]));
        m.registered(S, &SlotId::new("a", 0));
        m.registered(S, &SlotId::new("b", 0));
        m.discovered(10 * S, &hosts(&[("a", 1)]));
        let short = m.shortfall().unwrap();
        assert_eq!((short.next, short.wanted), (Generation(2), 2));
        assert_eq!(short.deadline, Duration::from_secs(610));
        m.discovered(20 * S, &hosts(&[("a", 1), ("c", 1)]));
        assert_eq!(m.shortfall(), None);
    }
}
