//! The response cache: tensors negotiated before, each under a bit. Every rank
//! holds an identical copy, changed only by the same decisions in the same
//! order, so a rank can say "tensor X again, as before" with one bit.

use std::collections::HashMap;

use super::messages::Ready;

#[derive(Debug)]
struct Entry {
    ready: Ready,
    last_used: u64,
}

/// Least-recently-used cache of negotiated tensors, at most `capacity` entries
/// (0 turns it off).
#[derive(Debug)]
pub(super) struct ResponseCache {
    capacity: usize,
    by_bit: Vec<Option<Entry>>,
    by_name: HashMap<String, usize>,
    clock: u64,
    hits: u64,
}

impl ResponseCache {
    pub(super) fn new(capacity: usize) -> Self {
        ResponseCache {
            capacity,
            by_bit: Vec::new(),
            by_name: HashMap::new(),
            clock: 0,
            hits: 0,
        }
    }

    /// Most entries held; 0: the cache is off.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_name.len()
    }

    /// How many submissions were sent as bits.
    pub(super) fn hits(&self) -> u64 {
        self.hits
    }

    /// The bit `rank` may send for a request equal to its own part of a cached
    /// tensor.
    pub(super) fn bit_for(&self, rank: usize, req: &super::messages::Request) -> Option<usize> {
        let &bit = self.by_name.get(&req.name)?;
        let e = self.by_bit[bit].as_ref()?;
        (e.ready.per_rank.get(rank) == Some(req)).then_some(bit)
    }

    /// One more than the highest bit in use (bits are below it).
    pub(super) fn slots(&self) -> usize {
        self.by_bit.len()
    }

    /// The cached tensor under `bit`.
    pub(super) fn get(&self, bit: usize) -> Option<&Ready> {
        self.by_bit.get(bit)?.as_ref().map(|e| &e.ready)
    }

    #[cfg(test)]
    pub(super) fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Records a use of `bit` (a hit).
    pub(super) fn touch(&mut self, bit: usize) {
        self.clock += 1;
        self.hits += 1;
        if let Some(Some(e)) = self.by_bit.get_mut(bit) {
            e.last_used = self.clock;
        }
    }

    pub(super) fn remove(&mut self, name: &str) {
        if let Some(bit) = self.by_name.remove(name) {
            self.by_bit[bit] = None;
        }
    }

    /// Caches a negotiated tensor, evicting the least recently used entry when
    /// full. Same calls in the same order give the same bits on every rank.
    pub(super) fn insert(&mut self, ready: Ready) {
        if self.capacity == 0 {
            return;
        }
        self.clock += 1;
        let name = ready.name().to_owned();
        if let Some(&bit) = self.by_name.get(&name) {
            self.by_bit[bit] = Some(Entry {
                ready,
                last_used: self.clock,
            });
            return;
        }
        if self.by_name.len() >= self.capacity {
            let oldest = self
                .by_bit
                .iter()
                .enumerate()
                .filter_map(|(b, e)| e.as_ref().map(|e| (e.last_used, b)))
                .min();
            if let Some((_, bit)) = oldest {
                let evicted = self.by_bit[bit].take().map(|e| e.ready.name().to_owned());
                if let Some(n) = evicted {
                    self.by_name.remove(&n);
                }
            }
        }
        let bit = match self.by_bit.iter().position(Option::is_none) {
            Some(b) => b,
            None => {
                self.by_bit.push(None);
                self.by_bit.len() - 1
            }
        };
        self.by_bit[bit] = Some(Entry {
            ready,
            last_used: self.clock,
        });
        self.by_name.insert(name, bit);
    }
}

#[cfg(test)]
mod tests {
    use collectives::{DType, ReduceOp};

    use super::super::messages::{Kind, Location, Request};
    use super::*;

    fn ready(name: &str) -> Ready {
        let r = Request {
            name: name.into(),
            kind: Kind::Allreduce(ReduceOp::Sum),
            dtype: DType::F32,
            shape: vec![4],
            parts: vec![],
            place: Location::Host,
        };
        Ready {
            per_rank: vec![r.clone(), r].into(),
        }
    }

    #[test]
    fn least_recently_used_is_evicted_at_capacity() {
        let mut c = ResponseCache::new(2);
        c.insert(ready("a"));
        c.insert(ready("b"));
        let a = c.bit_for(0, &ready("a").per_rank[0]).unwrap();
        c.touch(a);
        c.insert(ready("c"));
        assert!(c.contains("a") && c.contains("c") && !c.contains("b"));
        assert_eq!(c.len(), 2);
        // c took b's freed bit.
        assert_eq!(c.bit_for(1, &ready("c").per_rank[1]), Some(1));
    }

    #[test]
    fn a_changed_request_gets_no_bit() {
        let mut c = ResponseCache::new(4);
        c.insert(ready("a"));
        let mut other = ready("a").per_rank[0].clone();
        other.shape = vec![5];
        assert_eq!(c.bit_for(0, &other), None);
    }

    #[test]
    fn capacity_zero_caches_nothing() {
        let mut c = ResponseCache::new(0);
        c.insert(ready("a"));
        assert_eq!(c.len(), 0);
    }
}
