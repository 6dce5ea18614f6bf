//! Rendezvous of one generation, with no I/O: the layout says which (host, slot)
//! pairs must register; registrations arrive; once all have, every worker gets its
//! assignment. Workers are told their rank here, never on their command line.

use std::collections::HashMap;

use control::{Assignment, Knobs, Registration};

use crate::layout::Placement;
use elastic::hosts::HostSlots;

/// A worker's identity before it has a rank: the host it was started on (as named
/// in the host list) and its slot there (its local rank).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotKey {
    pub host: String,
    pub slot: u32,
}

impl std::fmt::Display for SlotKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} slot {}", self.host, self.slot)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("{0} is not a slot of this job")]
    UnknownSlot(SlotKey),
    #[error("{0} registered twice")]
    Duplicate(SlotKey),
}

#[derive(Debug)]
pub struct Rendezvous {
    generation: u64,
    /// Slot of each rank, in rank order.
    slots: Vec<(SlotKey, Placement)>,
    registered: HashMap<SlotKey, control::PeerAddress>,
}

impl Rendezvous {
    pub fn new(generation: u64, hosts: &[HostSlots], placements: &[Placement]) -> Self {
        let slots = placements
            .iter()
            .map(|p| {
                let key = SlotKey {
                    host: hosts[p.host].host.clone(),
                    slot: p.local_rank as u32,
                };
                (key, p.clone())
            })
            .collect();
        Self {
            generation,
            slots,
            registered: HashMap::new(),
        }
    }

    /// Records a registration; returns the rank that slot will get.
    pub fn register(&mut self, r: &Registration) -> Result<usize, RegisterError> {
        let key = SlotKey {
            host: r.host.clone(),
            slot: r.slot,
        };
        let Some(rank) = self.slots.iter().position(|(k, _)| *k == key) else {
            return Err(RegisterError::UnknownSlot(key));
        };
        if self.registered.contains_key(&key) {
            return Err(RegisterError::Duplicate(key));
        }
        self.registered.insert(key, r.data_addr.clone());
        Ok(rank)
    }

    /// Slots that have not registered yet, in rank order.
    pub fn missing(&self) -> Vec<SlotKey> {
        self.slots
            .iter()
            .filter(|(k, _)| !self.registered.contains_key(k))
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn is_complete(&self) -> bool {
        self.registered.len() == self.slots.len()
    }

    /// Every rank's assignment, in rank order; `None` until all have registered.
    pub fn assignments(
        &self,
        knobs: &Knobs,
        data_token: u64,
    ) -> Option<Vec<(SlotKey, Assignment)>> {
        if !self.is_complete() {
            return None;
        }
        let peers: Vec<control::PeerAddress> = self
            .slots
            .iter()
            .map(|(k, _)| self.registered[k].clone())
            .collect();
        let hosts: Vec<u32> = self.slots.iter().map(|(_, p)| p.host as u32).collect();
        let size = self.slots.len() as u32;
        Some(
            self.slots
                .iter()
                .map(|(k, p)| {
                    let a = Assignment {
                        generation: self.generation,
                        rank: p.rank as u32,
                        size,
                        local_rank: p.local_rank as u32,
                        local_size: p.local_size as u32,
                        cross_rank: p.cross_rank as u32,
                        cross_size: p.cross_size as u32,
                        peers: peers.clone(),
                        hosts: hosts.clone(),
                        data_token,
                        knobs: knobs.clone(),
                    };
                    (k.clone(), a)
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::layout::place;
    use crate::test_support::knobs;

    fn reg(host: &str, slot: u32, port: u16) -> Registration {
        Registration {
            host: host.into(),
            slot,
            pid: 1,
            data_addr: SocketAddr::from(([127, 0, 0, 1], port)).into(),
        }
    }

    #[test]
    fn assignments_follow_the_layout_whatever_the_arrival_order() {
        let hosts = vec![
            HostSlots {
                host: "a".into(),
                slots: 2,
            },
            HostSlots {
                host: "b".into(),
                slots: 1,
            },
        ];
        let mut rv = Rendezvous::new(4, &hosts, &place(&hosts, 3).unwrap());
        assert_eq!(rv.register(&reg("b", 0, 9002)), Ok(2));
        assert_eq!(rv.missing().len(), 2);
        assert!(rv.assignments(&knobs(), 5).is_none());
        assert_eq!(rv.register(&reg("a", 1, 9001)), Ok(1));
        assert_eq!(rv.register(&reg("a", 0, 9000)), Ok(0));
        let a = rv.assignments(&knobs(), 5).unwrap();
        let ports: Vec<u16> = a[0]
            .1
            .peers
            .iter()
            .filter_map(|p| p.tcp_addr().map(|a| a.port()))
            .collect();
        assert_eq!(ports, [9000, 9001, 9002]);
        assert!(a.iter().all(|(_, x)| x.hosts == [0, 0, 1]));
        assert_eq!(
            a[2].0,
            SlotKey {
                host: "b".into(),
                slot: 0
            }
        );
        let b = &a[2].1;
        assert_eq!(
            (
                b.rank,
                b.size,
                b.local_rank,
                b.local_size,
                b.cross_rank,
                b.cross_size
            ),
            (2, 3, 0, 1, 1, 2)
        );
        assert!(
            a.iter()
                .all(|(_, x)| x.generation == 4 && x.data_token == 5)
        );
    }

    #[test]
    fn unknown_and_duplicate_slots_are_refused() {
        let hosts = vec![HostSlots {
            host: "localhost".into(),
            slots: 2,
        }];
        let mut rv = Rendezvous::new(0, &hosts, &place(&hosts, 2).unwrap());
        assert!(matches!(
            rv.register(&reg("localhost", 2, 1)),
            Err(RegisterError::UnknownSlot(_))
        ));
        assert!(matches!(
            rv.register(&reg("elsewhere", 0, 1)),
            Err(RegisterError::UnknownSlot(_))
        ));
        rv.register(&reg("localhost", 0, 1)).unwrap();
        assert!(matches!(
            rv.register(&reg("localhost", 0, 2)),
            Err(RegisterError::Duplicate(_))
        ));
        assert_eq!(
            rv.missing(),
            vec![SlotKey {
                host: "localhost".into(),
                slot: 1
            }]
        );
    }
}
