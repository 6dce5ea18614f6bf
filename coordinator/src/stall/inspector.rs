//! The stall inspector's decisions, with no I/O and no clock: reports come in
//! with the time they arrived, [`Inspector::poll`] is given `now` and hands
//! back what to do.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use control::{Knobs, PendingReport};

use elastic::membership::SlotId as SlotKey;

/// When a tensor counts as stalled, and when a stall ends the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StallConfig {
    /// A tensor some ranks submitted this long ago and others have not is
    /// stalled, and warned about.
    pub warning: Duration,
    /// A stall this old ends the job (only a stall: never before `warning`);
    /// `None`: never.
    pub shutdown: Option<Duration>,
}

impl StallConfig {
    /// The stall check the job's knobs ask for; `None` when it is off.
    pub fn from_knobs(k: &Knobs) -> Option<Self> {
        Some(StallConfig {
            warning: Duration::from_millis(k.stall_warning_ms?),
            shutdown: k.stall_shutdown_ms.map(Duration::from_millis),
        })
    }
}

/// A rank and where it runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RankAt {
    pub rank: usize,
    pub slot: SlotKey,
}

/// Tensors that wait on the same ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Name and age (on the ranks that submitted it), oldest first.
    pub tensors: Vec<(String, Duration)>,
    /// The ranks that have not submitted them: what they wait on.
    pub missing: Vec<RankAt>,
    /// The ranks that have.
    pub submitted: Vec<usize>,
}

impl Stall {
    /// The age of the oldest tensor.
    pub fn age(&self) -> Duration {
        self.tensors.first().map_or(Duration::ZERO, |(_, a)| *a)
    }
}

/// Most tensor names one message lists.
const NAMES_SHOWN: usize = 5;

fn ranks_word(n: usize) -> &'static str {
    if n == 1 { "rank" } else { "ranks" }
}

/// `stall: tensor grad.3 has waited 2.1 s on rank 1 (localhost slot 1); rank 0
/// submitted it`.
impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let age = self.age().as_secs_f64();
        match self.tensors.as_slice() {
            [(name, _)] => write!(f, "stall: tensor {name} has waited {age:.1} s")?,
            many => {
                let names: Vec<&str> = many
                    .iter()
                    .take(NAMES_SHOWN)
                    .map(|(n, _)| n.as_str())
                    .collect();
                write!(f, "stall: {} tensors ({}", many.len(), names.join(", "))?;
                if many.len() > NAMES_SHOWN {
                    write!(f, " and {} more", many.len() - NAMES_SHOWN)?;
                }
                write!(f, ") have waited up to {age:.1} s")?;
            }
        }
        let missing: Vec<String> = self
            .missing
            .iter()
            .map(|m| format!("{} ({})", m.rank, m.slot))
            .collect();
        let submitted: Vec<String> = self.submitted.iter().map(ToString::to_string).collect();
        write!(
            f,
            " on {} {}; {} {} submitted {}",
            ranks_word(missing.len()),
            missing.join(", "),
            ranks_word(submitted.len()),
            submitted.join(", "),
            if self.tensors.len() == 1 {
                "it"
            } else {
                "them"
            }
        )
    }
}

/// What the inspector decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StallEvent {
    /// Tell the user (once per tensor, and again if it is still stuck at
    /// twice the age).
    Warn(Stall),
    /// The stall passed the shutdown time: the missing ranks are to be treated
    /// as failed (in a static job: the job ends with this message). Nothing is
    /// decided after this.
    Shutdown(Stall),
}

/// The latest heartbeat of one rank.
#[derive(Debug)]
struct Report {
    slot: SlotKey,
    at: Instant,
    pending: HashMap<String, Duration>,
    /// Every pending tensor is listed (none left out for size).
    complete: bool,
}

/// One stalled tensor, before grouping.
struct Stalled {
    name: String,
    age: Duration,
    missing: Vec<usize>,
    submitted: Vec<usize>,
}

/// Ranks a tensor waits on, and ranks that have submitted it.
type Key = (Vec<usize>, Vec<usize>);

/// Finds tensors that some ranks have been waiting on for too long.
#[derive(Debug)]
pub struct Inspector {
    cfg: StallConfig,
    /// Each rank's latest report, by rank.
    reports: Vec<Option<Report>>,
    /// How many of the reports list a pending tensor: with none, nothing
    /// can be stalled, and the sweeps skip the reports (thousands of ranks
    /// at rest).
    listing: usize,
    /// Stalled tensors already warned about, and the age at which to warn again.
    next_warning: HashMap<String, Duration>,
    shut_down: bool,
}

impl Inspector {
    pub fn new(cfg: StallConfig) -> Self {
        Inspector {
            cfg,
            reports: Vec::new(),
            listing: 0,
            next_warning: HashMap::new(),
            shut_down: false,
        }
    }

    /// Records the heartbeat of `rank` (running at `slot`) that arrived at `now`,
    /// replacing its previous one. A rank whose worker has exited reports an
    /// empty list: nothing it will submit.
    pub fn handle_report(&mut self, now: Instant, rank: usize, slot: &SlotKey, r: &PendingReport) {
        let pending: HashMap<String, Duration> = r
            .tensors
            .iter()
            .map(|t| (t.name.clone(), Duration::from_millis(t.age_ms)))
            .collect();
        self.listing += usize::from(!pending.is_empty());
        if self.reports.len() <= rank {
            self.reports.resize_with(rank + 1, || None);
        }
        let Some(entry) = self.reports.get_mut(rank) else {
            return;
        };
        if let Some(old) = entry {
            self.listing -= usize::from(!old.pending.is_empty());
        }
        match entry {
            // The same worker again: its slot stays (a heartbeat a second
            // from thousands of ranks, each a copy of a host name less).
            Some(old) if old.slot == *slot => {
                old.at = now;
                old.pending = pending;
                old.complete = r.is_complete();
            }
            _ => {
                *entry = Some(Report {
                    slot: slot.clone(),
                    at: now,
                    pending,
                    complete: r.is_complete(),
                });
            }
        }
    }

    /// The reports, by rank.
    fn each(&self) -> impl Iterator<Item = (usize, &Report)> {
        (self.reports.iter().enumerate()).filter_map(|(rank, r)| Some((rank, r.as_ref()?)))
    }

    /// Whether some rank's latest report lists a pending tensor (with none,
    /// nothing can be stalled).
    pub fn listing(&self) -> bool {
        self.listing > 0
    }

    /// Forgets `rank` (it left the job): it is neither waited on nor waiting.
    pub fn forget(&mut self, rank: usize) {
        if let Some(old) = self.reports.get_mut(rank).and_then(Option::take) {
            self.listing -= usize::from(!old.pending.is_empty());
        }
    }

    /// What to do at `now`: warnings for tensors newly stalled (or stalled
    /// twice as long as when last warned about), grouped by the ranks they
    /// wait on, oldest first; or a shutdown once a stall passes the shutdown
    /// time.
    pub fn poll(&mut self, now: Instant) -> Vec<StallEvent> {
        if self.shut_down {
            return Vec::new();
        }
        let stalled: Vec<Stalled> = self
            .ages(now)
            .iter()
            .filter(|(_, by)| by.values().max().is_some_and(|a| *a >= self.cfg.warning))
            .filter_map(|(name, by)| self.stalled(name, by))
            .collect();
        if let Some(limit) = self.cfg.shutdown {
            let past: Vec<&Stalled> = stalled.iter().filter(|s| s.age >= limit).collect();
            let oldest = past
                .iter()
                .max_by(|a, b| a.age.cmp(&b.age).then_with(|| b.name.cmp(&a.name)));
            if let Some(oldest) = oldest {
                let key = (oldest.missing.clone(), oldest.submitted.clone());
                let stall = self.group(&key, past.iter().copied());
                self.shut_down = true;
                return vec![StallEvent::Shutdown(stall)];
            }
        }
        self.warnings(&stalled)
    }

    /// When [`Inspector::poll`] next has something to say, as seen at `now`
    /// (`None`: nothing before another report): a stalled tensor's warning,
    /// its next one, or the shutdown time, whichever comes first.
    pub fn next_due(&self, now: Instant) -> Option<Instant> {
        if self.shut_down {
            return None;
        }
        self.ages(now)
            .iter()
            .filter_map(|(name, by)| {
                let stalled = self.stalled(name, by)?;
                let warn = self.next_warning.get(*name).copied();
                let at = warn.unwrap_or(self.cfg.warning);
                let at = self.cfg.shutdown.map_or(at, |limit| at.min(limit));
                Some(now + at.saturating_sub(stalled.age))
            })
            .min()
    }

    /// Each pending tensor's age on each rank that listed it, at `now`.
    fn ages(&self, now: Instant) -> BTreeMap<&str, BTreeMap<usize, Duration>> {
        let mut ages: BTreeMap<&str, BTreeMap<usize, Duration>> = BTreeMap::new();
        if self.listing == 0 {
            return ages;
        }
        for (rank, r) in self.each() {
            let since = now.saturating_duration_since(r.at);
            for (name, age) in &r.pending {
                ages.entry(name.as_str())
                    .or_default()
                    .insert(rank, age.saturating_add(since));
            }
        }
        ages
    }

    /// `name`, listed by the ranks in `by`, if some rank that lists everything
    /// it has pending lacks it.
    fn stalled(&self, name: &str, by: &BTreeMap<usize, Duration>) -> Option<Stalled> {
        let missing: Vec<usize> = self
            .each()
            .filter(|(rank, r)| r.complete && !by.contains_key(rank))
            .map(|(rank, _)| rank)
            .collect();
        if missing.is_empty() {
            return None;
        }
        Some(Stalled {
            name: name.to_owned(),
            age: by.values().copied().max().unwrap_or_default(),
            missing,
            submitted: by.keys().copied().collect(),
        })
    }

    /// Warnings for the stalled tensors that are due one, grouped by the ranks
    /// they wait on; forgets tensors no longer stalled.
    fn warnings(&mut self, stalled: &[Stalled]) -> Vec<StallEvent> {
        let now_stalled: BTreeSet<&str> = stalled.iter().map(|s| s.name.as_str()).collect();
        self.next_warning
            .retain(|name, _| now_stalled.contains(name.as_str()));
        let mut due: BTreeMap<Key, Vec<&Stalled>> = BTreeMap::new();
        for s in stalled {
            let at = self.next_warning.get(&s.name).copied();
            if at.is_some_and(|at| s.age < at) {
                continue;
            }
            let again = (s.age * 2).max(s.age + Duration::from_secs(1));
            self.next_warning.insert(s.name.clone(), again);
            let key = (s.missing.clone(), s.submitted.clone());
            due.entry(key).or_default().push(s);
        }
        let mut stalls: Vec<Stall> = due
            .iter()
            .map(|(key, group)| self.group(key, group.iter().copied()))
            .collect();
        stalls.sort_by(|a, b| {
            b.age()
                .cmp(&a.age())
                .then_with(|| a.tensors.cmp(&b.tensors))
        });
        stalls.into_iter().map(StallEvent::Warn).collect()
    }

    /// The stall of the tensors in `group` that wait on `key`'s ranks.
    fn group<'s>(
        &self,
        (missing, submitted): &Key,
        group: impl Iterator<Item = &'s Stalled>,
    ) -> Stall {
        let mut tensors: Vec<(String, Duration)> = group
            .filter(|s| s.missing == *missing && s.submitted == *submitted)
            .map(|s| (s.name.clone(), s.age))
            .collect();
        tensors.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Stall {
            tensors,
            missing: missing
                .iter()
                .filter_map(|&rank| {
                    let slot = self.reports.get(rank)?.as_ref()?.slot.clone();
                    Some(RankAt { rank, slot })
                })
                .collect(),
            submitted: submitted.clone(),
        }
    }
}
