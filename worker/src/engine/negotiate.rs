//! Negotiation, the pure core of the engine. Every rank feeds the same rounds
//! (every rank's [`RankMsg`], in rank order) into its own [`Negotiator`] and so
//! reaches the same decisions in the same order: a tensor runs once every rank
//! has submitted it, in the order it was first submitted, whatever order each
//! rank used; disagreeing ranks fail it everywhere with every rank's view.

use std::collections::HashMap;

use super::cache::ResponseCache;
use super::error::Mismatch;
use super::fusion::{FusionPolicy, plan};
use super::messages::{Decision, RankMsg, Ready, Request, Tuning};

/// Sort key: the round a tensor was first submitted in, then cached tensors by
/// bit, then new ones by (rank, position).
type Order = (u64, u8, usize, usize);

/// A tensor that a round found ready.
#[derive(Debug)]
enum Done {
    /// Sent as a bit by every rank: the cached form.
    Cached(Ready),
    /// Complete in the pending table under this name.
    Pending(String),
}

#[derive(Debug)]
struct Pending {
    per_rank: Vec<Option<Submitted>>,
    order: Order,
}

/// One rank's submission of a pending tensor: in full, or as a cache bit
/// (the cached form, shared). A tensor whose every rank sent the same bit,
/// over several rounds, is that cached form without a request copied or
/// compared: at 128 ranks those were 128 of each per tensor per round.
#[derive(Debug)]
enum Submitted {
    Full(Request),
    Cached(Ready),
}

impl Submitted {
    fn name(&self) -> &str {
        match self {
            Submitted::Full(r) => &r.name,
            Submitted::Cached(c) => c.name(),
        }
    }

    /// Rank `rank`'s request.
    fn request(self, rank: usize) -> Request {
        match self {
            Submitted::Full(r) => r,
            Submitted::Cached(c) => c.per_rank[rank].clone(),
        }
    }
}

/// The replicated negotiation state.
#[derive(Debug)]
pub(super) struct Negotiator {
    size: usize,
    round: u64,
    pending: HashMap<String, Pending>,
    cache: ResponseCache,
    shut_down: Vec<bool>,
    /// Ranks that have called `join` and wait for the others to.
    joined: Vec<bool>,
    /// The rank that joined last so far (the answer `join` returns).
    last_joined: usize,
    fusion: FusionPolicy,
    /// The cache's size when it is on.
    cache_capacity: usize,
    /// Hits of caches replaced when the cache was turned off or on.
    retired_hits: u64,
}

/// What a round decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Outcome {
    pub decisions: Vec<Decision>,
    /// Ranks that had joined when the decisions were made: they take part
    /// with zeros (allreduce) or no rows (allgather); an average divides by
    /// the ranks that did not.
    pub joined: Vec<usize>,
    /// Every rank has joined: `join` returns this rank (the last to join).
    pub join_done: Option<usize>,
    /// Every rank has shut down and nothing is left: the engine stops.
    pub finished: bool,
    /// Rank 0 retuned the engine in this round: every rank runs with these
    /// settings from the next round.
    pub retuned: Option<Tuning>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum NegotiationError {
    #[error("expected {expected} ranks' messages, got {got}")]
    Ranks { expected: usize, got: usize },
    #[error("rank {rank} sent cache bit {bit}, which is not in the cache")]
    UnknownBit { rank: usize, bit: usize },
}

impl Negotiator {
    pub(super) fn new(size: usize, cache_capacity: usize, fusion: FusionPolicy) -> Self {
        Negotiator {
            size,
            round: 0,
            pending: HashMap::new(),
            cache: ResponseCache::new(cache_capacity),
            shut_down: vec![false; size],
            joined: vec![false; size],
            last_joined: 0,
            fusion,
            cache_capacity,
            retired_hits: 0,
        }
    }

    /// Cache hits since the start, across cache switches.
    pub(super) fn cache_hits(&self) -> u64 {
        self.retired_hits + self.cache.hits()
    }

    /// Switches fusion and the response cache to `t` (every rank does so
    /// after the same round, so their plans and bits keep agreeing).
    fn retune(&mut self, t: &Tuning) {
        self.fusion.threshold_bytes =
            usize::try_from(t.fusion_threshold_bytes).unwrap_or(usize::MAX);
        let on = self.cache_capacity > 0;
        let enabled = self.cache.capacity() > 0;
        if on && enabled != t.cache_enabled {
            self.retired_hits += self.cache.hits();
            let capacity = if t.cache_enabled {
                self.cache_capacity
            } else {
                0
            };
            self.cache = ResponseCache::new(capacity);
        }
    }

    #[cfg(test)]
    pub(super) fn cache(&self) -> &ResponseCache {
        &self.cache
    }

    /// The bit this rank may send instead of `req`, if cached as it is.
    pub(super) fn cached_bit(&self, rank: usize, req: &Request) -> Option<usize> {
        self.cache.bit_for(rank, req)
    }

    /// Names submitted by some ranks and not yet by others, with the ranks
    /// still missing.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> Vec<(String, Vec<usize>)> {
        let mut w: Vec<(String, Vec<usize>)> = self
            .pending
            .iter()
            .map(|(n, p)| {
                (
                    n.clone(),
                    (0..self.size)
                        .filter(|&r| p.per_rank[r].is_none())
                        .collect(),
                )
            })
            .collect();
        w.sort();
        w
    }

    fn submit(&mut self, rank: usize, req: Submitted, order: Order) {
        if let Some(p) = self.pending.get_mut(req.name()) {
            p.per_rank[rank] = Some(req);
            return;
        }
        let name = req.name().to_owned();
        let mut per_rank: Vec<Option<Submitted>> = (0..self.size).map(|_| None).collect();
        per_rank[rank] = Some(req);
        self.pending.insert(name, Pending { per_rank, order });
    }

    /// Processes one round of every rank's message.
    pub(super) fn round(&mut self, msgs: &[RankMsg]) -> Result<Outcome, NegotiationError> {
        if msgs.len() != self.size {
            return Err(NegotiationError::Ranks {
                expected: self.size,
                got: msgs.len(),
            });
        }
        self.round += 1;
        let round = self.round;
        // Bits refer to the cache as it was when the round began: decode them
        // all before anything changes it. A tensor every rank sent as a bit
        // (and no rank sent otherwise) is the cached one as it stands: it is
        // ready without being taken apart, checked and cached again.
        let mut senders = vec![0usize; self.cache.slots()];
        let mut sent = Vec::new();
        for (rank, m) in msgs.iter().enumerate() {
            for bit in m.bits() {
                let ready = self
                    .cache
                    .get(bit)
                    .ok_or(NegotiationError::UnknownBit { rank, bit })?;
                senders[bit] += 1;
                sent.push((rank, bit, ready));
            }
        }
        let mut whole = Vec::new();
        let mut decoded = Vec::new();
        for &(rank, bit, ready) in &sent {
            if senders[bit] == self.size && !self.pending.contains_key(ready.name()) {
                if rank == 0 {
                    whole.push(((round, 0, bit, 0), Done::Cached(ready.clone())));
                }
                continue;
            }
            decoded.push((rank, bit, ready.clone()));
        }
        drop(sent);
        for m in msgs {
            m.bits().for_each(|bit| self.cache.touch(bit));
        }
        for (rank, bit, ready) in decoded {
            self.submit(rank, Submitted::Cached(ready), (round, 0, bit, 0));
        }
        for (rank, m) in msgs.iter().enumerate() {
            for (i, req) in m.new.iter().enumerate() {
                // Sent in full although cached: it changed. Forget the old form.
                self.cache.remove(&req.name);
                self.submit(rank, Submitted::Full(req.clone()), (round, 1, rank, i));
            }
            self.shut_down[rank] |= m.shutdown;
            if m.joined && !self.joined[rank] {
                self.joined[rank] = true;
                self.last_joined = rank;
            }
        }
        let mut outcome = self.decide(whole);
        if let Some(t) = msgs.first().and_then(|m| m.retune) {
            self.retune(&t);
            outcome.retuned = Some(t);
        }
        Ok(outcome)
    }

    /// Decides what is ready: `whole`, tensors every rank sent as a bit this
    /// round, and every pending tensor that each rank has now submitted.
    fn decide(&mut self, mut done: Vec<(Order, Done)>) -> Outcome {
        done.extend(
            self.pending
                .iter()
                .filter(|(_, p)| {
                    p.per_rank
                        .iter()
                        .enumerate()
                        .all(|(r, q)| q.is_some() || self.shut_down[r] || self.joined[r])
                })
                .map(|(n, p)| (p.order, Done::Pending(n.clone()))),
        );
        done.sort_unstable_by_key(|(order, _)| *order);
        let mut failures = Vec::new();
        let mut ready = Vec::new();
        for (_, d) in done {
            let name = match d {
                Done::Cached(r) => {
                    ready.push(r);
                    continue;
                }
                Done::Pending(name) => name,
            };
            let Some(p) = self.pending.remove(&name) else {
                continue;
            };
            match check(&name, p.per_rank, &self.shut_down, &self.joined) {
                Ok(r) => {
                    self.cache.insert(r.clone());
                    ready.push(r);
                }
                Err(why) => {
                    self.cache.remove(&name);
                    failures.push(Decision::Fail { name, why });
                }
            }
        }
        let mut decisions = failures;
        decisions.extend(plan(ready, self.fusion).into_iter().map(Decision::Run));
        let joined = (0..self.size).filter(|&r| self.joined[r]).collect();
        let join_done = self.joined.iter().all(|&j| j).then(|| {
            self.joined.fill(false);
            self.last_joined
        });
        let finished = self.shut_down.iter().all(|&s| s) && self.pending.is_empty();
        Outcome {
            decisions,
            joined,
            join_done,
            finished,
            retuned: None,
        }
    }
}

/// Every rank's request agrees with the first submitter's (joined ranks
/// standing in where the collective allows it), or the error naming each view.
fn check(
    name: &str,
    per_rank: Vec<Option<Submitted>>,
    shut_down: &[bool],
    joined: &[bool],
) -> Result<Ready, Mismatch> {
    let absent = |why: &[bool]| -> Vec<usize> {
        (0..per_rank.len())
            .filter(|&r| per_rank[r].is_none() && why[r])
            .collect()
    };
    let (gone, joined) = (absent(shut_down), absent(joined));
    let name = name.to_owned();
    if !gone.is_empty() {
        return Err(Mismatch::ShutDown { name, ranks: gone });
    }
    if let Some(same) = one_cached_form(&per_rank) {
        return Ok(same);
    }
    let per_rank: Vec<Option<Request>> = per_rank
        .into_iter()
        .enumerate()
        .map(|(r, q)| q.map(|s| s.request(r)))
        .collect();
    let Some(first) = per_rank.iter().flatten().next().cloned() else {
        return Err(Mismatch::NoSubmitter { name });
    };
    if !joined.is_empty() && !first.kind.runs_with_joined_ranks() {
        return Err(Mismatch::Joined {
            name,
            ranks: joined,
        });
    }
    let reqs: Vec<Request> = per_rank
        .into_iter()
        .map(|q| q.unwrap_or_else(|| first.kind.stand_in(&first)))
        .collect();
    if reqs.iter().all(|r| r.agrees_with(&first)) {
        return Ok(Ready {
            per_rank: reqs.into(),
        });
    }
    let views = reqs.iter().map(Request::describe).collect();
    Err(Mismatch::Differs { name, views })
}

/// The cached form every rank sent, when each sent the same one.
fn one_cached_form(per_rank: &[Option<Submitted>]) -> Option<Ready> {
    let Some(Some(Submitted::Cached(first))) = per_rank.first() else {
        return None;
    };
    let same = |q: &Option<Submitted>| matches!(q, Some(Submitted::Cached(c)) if std::sync::Arc::ptr_eq(&c.per_rank, &first.per_rank));
    per_rank.iter().all(same).then(|| first.clone())
}

#[cfg(test)]
mod tests;
