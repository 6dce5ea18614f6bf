//! Slot accounting: which slots are usable, how many workers are live, and spawning
//! on free usable slots up to the target world size.

use std::collections::BTreeSet;
use std::time::Duration;

use super::machine::{Membership, Phase, Worker, WorkerState};
use super::{Command, Generation, SlotId};
use crate::hosts::HostSlots;

/// Which slots of one host are usable.
#[derive(Clone, Copy)]
pub(super) enum HostView<'a> {
    None,
    Below(usize),
    Listed(&'a BTreeSet<u32>),
}

impl HostView<'_> {
    pub(super) fn has(self, slot: u32) -> bool {
        match self {
            HostView::None => false,
            HostView::Below(n) => (slot as usize) < n,
            HostView::Listed(set) => set.contains(&slot),
        }
    }
}

impl Membership {
    /// The slot belongs to a discovered, non-blacklisted host that offers it.
    pub(super) fn usable(&self, slot: &SlotId) -> bool {
        self.host_view(&slot.host).has(slot.slot)
    }

    /// The usable slots of `host`: none if it is blacklisted, else those
    /// discovery offers.
    pub(super) fn host_view(&self, host: &str) -> HostView<'_> {
        if self.blacklist.is_blacklisted(host) {
            return HostView::None;
        }
        let view = match &self.slot_sets {
            Some(sets) => sets.get(host).map(HostView::Listed),
            None => self.host_slots.get(host).map(|&n| HostView::Below(n)),
        };
        view.unwrap_or(HostView::None)
    }

    /// Usable slots in spawn preference order: hosts in discovery order, then slot
    /// index.
    fn usable_slots(&self) -> impl Iterator<Item = SlotId> + '_ {
        self.usable_hosts().flat_map(|h| {
            let listed: Box<dyn Iterator<Item = u32> + '_> =
                match self.slot_sets.as_ref().and_then(|s| s.get(&h.host)) {
                    Some(set) => Box::new(set.iter().copied()),
                    None => Box::new(0..u32::try_from(h.slots).unwrap_or(u32::MAX)),
                };
            listed.map(|i| SlotId::new(h.host.clone(), i))
        })
    }

    /// Usable slots on hosts other than `host`.
    pub(super) fn usable_count_without(&self, host: &str) -> usize {
        self.usable_hosts()
            .filter(|h| h.host != host)
            .fold(0usize, |n, h| n.saturating_add(h.slots))
    }

    /// How many workers a generation places: `max_np`, and with hot spares
    /// as many fewer than the usable slots as there are spares (never below
    /// `min_np`: training comes before spares).
    pub(super) fn train_cap(&self) -> usize {
        let usable = self.usable_count();
        let spares = self.policy.hot_spares;
        let floor = self.policy.min_np.min(usable);
        self.policy
            .max_np
            .min(usable.saturating_sub(spares).max(floor))
    }

    pub(super) fn usable_count(&self) -> usize {
        self.usable_hosts()
            .fold(0usize, |n, h| n.saturating_add(h.slots))
    }

    /// The discovered hosts not blacklisted, in discovery order.
    pub(super) fn usable_hosts(&self) -> impl Iterator<Item = &HostSlots> + '_ {
        (self.hosts.iter()).filter(|h| !self.blacklist.is_blacklisted(&h.host))
    }

    /// Live workers on usable slots: those the next generation may place.
    pub(super) fn placeable_live(&self) -> usize {
        // The workers are ordered by host: each host is looked up once for
        // its run of slots (a sweep of thousands of workers, many times a
        // second), not once a slot.
        let mut seen: Option<(&str, HostView<'_>)> = None;
        let mut n = 0;
        for (s, w) in &self.workers {
            if w.state == WorkerState::Finished {
                continue;
            }
            let view = match seen {
                Some((host, view)) if host == s.host => view,
                _ => {
                    let view = self.host_view(&s.host);
                    seen = Some((&s.host, view));
                    view
                }
            };
            n += usize::from(view.has(s.slot));
        }
        n
    }

    /// Spawns pending registration.
    pub(super) fn pending_spawns(&self) -> impl Iterator<Item = (&SlotId, Duration)> + '_ {
        self.workers.iter().filter_map(|(s, w)| match w.state {
            WorkerState::Spawned { since } => Some((s, since)),
            _ => None,
        })
    }

    /// How many workers generation `next` waits for: `initial_np` for the first,
    /// `min_np` after.
    pub(super) fn threshold(&self, next: Generation) -> usize {
        if next == Generation(1) {
            self.policy.initial_np
        } else {
            self.policy.min_np
        }
    }

    /// Spawns on free usable slots, `prefer` (slots just vacated) first, until the
    /// target world size, `min(usable slots, max_np)`, and the hot spares
    /// beside it are live on usable slots.
    /// Members on slots that left discovery do not count: they leave at the next
    /// `Assign`. Not while finishing or done. Returns the live workers on
    /// usable slots after it ([`Membership::placeable_live`], counted once
    /// for both: a pass over every worker), `None` when it did not look.
    pub(super) fn fill(
        &mut self,
        now: Duration,
        prefer: &[SlotId],
        out: &mut Vec<Command>,
    ) -> Option<usize> {
        if !matches!(self.phase, Phase::Stable | Phase::Gathering(_)) {
            return None;
        }
        let (picks, placeable) = self.pick_free_slots(prefer);
        for slot in picks {
            let order = self.next_order;
            // A resumed snapshot may hold any count: never overflow.
            self.next_order = self.next_order.saturating_add(1);
            let state = WorkerState::Spawned { since: now };
            let worker = Worker {
                state,
                order,
                late: false,
                spare: false,
            };
            self.workers.insert(slot.clone(), worker);
            if let Phase::Gathering(g) = &mut self.phase {
                g.tried.insert(slot.clone());
            }
            out.push(Command::Spawn(slot));
        }
        debug_assert_eq!(placeable, self.placeable_live());
        Some(placeable)
    }

    /// The free usable slots to spawn on, and the live workers on usable
    /// slots once they are.
    fn pick_free_slots(&self, prefer: &[SlotId]) -> (Vec<SlotId>, usize) {
        let spares = self.train_cap().saturating_add(self.policy.hot_spares);
        let target = self.usable_count().min(spares);
        let mut placeable = self.placeable_live();
        let mut picks: Vec<SlotId> = Vec::new();
        let preferred = prefer.iter().filter(|s| self.usable(s)).cloned();
        for slot in preferred.chain(self.usable_slots()) {
            if placeable >= target {
                break;
            }
            if self.workers.contains_key(&slot) || picks.contains(&slot) {
                continue;
            }
            if self.held(&slot, placeable) || self.start_backoff.waiting(&slot) {
                continue;
            }
            picks.push(slot);
            placeable += 1;
        }
        (picks, placeable)
    }

    /// Within one gathering a slot is spawned once, unless fewer workers than the
    /// gathering waits for are live (the elastic timeout bounds that wait).
    fn held(&self, slot: &SlotId, placeable: usize) -> bool {
        match &self.phase {
            Phase::Gathering(g) => g.tried.contains(slot) && placeable >= self.threshold(g.next),
            _ => false,
        }
    }
}
