//! Per-host failure history, blacklisting and cooldown.
//!
//! ```text
//!  failure ─► history (< window old) ─► `failures` of them? ─► blacklisted #k
//!                                                               │ until now + min(MIN·2^(k-1), MAX)
//!                                                               ▼ (never, without a cooldown range)
//!                                           readmitted: history cleared, k kept
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use super::policy::BlacklistPolicy;

/// Failure history and bans of every host that has had a failure.
#[derive(Debug)]
pub(crate) struct Blacklist {
    policy: BlacklistPolicy,
    hosts: BTreeMap<String, HostRecord>,
}

#[derive(Debug, Default)]
pub(crate) struct HostRecord {
    /// Times of recent failures, oldest first.
    pub(crate) failures: Vec<Duration>,
    /// How many times this host has been blacklisted.
    pub(crate) bans: u32,
    /// `Some(None)`: blacklisted for good; `Some(Some(t))`: until `t`.
    pub(crate) banned: Option<Option<Duration>>,
}

impl Blacklist {
    pub(crate) fn new(policy: BlacklistPolicy) -> Self {
        Self {
            policy,
            hosts: BTreeMap::new(),
        }
    }

    /// Records a failure of one of `host`'s workers at `now`. Returns `Some(until)`
    /// when this failure blacklists the host (`until` = `None`: for good); never
    /// when `may_ban` is false (the other hosts could not run the job).
    pub(crate) fn record_failure(
        &mut self,
        now: Duration,
        host: &str,
        may_ban: bool,
    ) -> Option<Option<Duration>> {
        let window = self.policy.window;
        let rec = self.hosts.entry(host.to_owned()).or_default();
        if rec.banned.is_some() {
            return None;
        }
        rec.failures.retain(|&t| now.saturating_sub(t) < window);
        rec.failures.push(now);
        if rec.failures.len() < self.policy.failures as usize || !may_ban {
            return None;
        }
        rec.failures.clear();
        rec.bans = rec.bans.saturating_add(1);
        let until = self
            .policy
            .cooldown
            .map(|(min, max)| now.saturating_add(cooldown(min, max, rec.bans)));
        rec.banned = Some(until);
        Some(until)
    }

    /// Blacklists `host` at `now` whatever its failures (a straggler taken
    /// out): as its next ban, for the cooldown. `None` if it already is.
    pub(crate) fn ban(&mut self, now: Duration, host: &str) -> Option<Option<Duration>> {
        let rec = self.hosts.entry(host.to_owned()).or_default();
        if rec.banned.is_some() {
            return None;
        }
        rec.failures.clear();
        rec.bans = rec.bans.saturating_add(1);
        let until = self
            .policy
            .cooldown
            .map(|(min, max)| now.saturating_add(cooldown(min, max, rec.bans)));
        rec.banned = Some(until);
        Some(until)
    }

    pub(crate) fn is_blacklisted(&self, host: &str) -> bool {
        self.hosts.get(host).is_some_and(|r| r.banned.is_some())
    }

    /// Ends the bans that have run out by `now` and returns those hosts (name
    /// order); their failure history starts afresh.
    pub(crate) fn readmit_expired(&mut self, now: Duration) -> Vec<String> {
        let mut out = Vec::new();
        for (host, rec) in &mut self.hosts {
            if let Some(Some(until)) = rec.banned
                && until <= now
            {
                rec.banned = None;
                rec.failures.clear();
                out.push(host.clone());
            }
        }
        out
    }

    /// Every host's record, in name order.
    pub(crate) fn records(&self) -> impl Iterator<Item = (&String, &HostRecord)> + '_ {
        self.hosts.iter()
    }

    /// Puts back a host's record (resuming a job).
    pub(crate) fn restore(&mut self, host: String, record: HostRecord) {
        self.hosts.insert(host, record);
    }

    /// When the next ban runs out.
    pub(crate) fn next_expiry(&self) -> Option<Duration> {
        self.hosts.values().filter_map(|r| r.banned.flatten()).min()
    }
}

/// `min(MIN * 2^(k-1), MAX)` for the k-th ban, saturating.
fn cooldown(min: Duration, max: Duration, k: u32) -> Duration {
    let mut d = min;
    for _ in 1..k {
        if d >= max {
            break;
        }
        d = d.checked_mul(2).unwrap_or(max);
    }
    d.min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn policy(cooldown: Option<(Duration, Duration)>) -> BlacklistPolicy {
        BlacklistPolicy {
            failures: 3,
            window: s(60),
            cooldown,
        }
    }

    #[test]
    fn failures_within_the_window_blacklist() {
        let mut b = Blacklist::new(policy(None));
        assert_eq!(b.record_failure(s(0), "a", true), None);
        assert_eq!(b.record_failure(s(50), "a", true), None);
        // The failure at 0 s is 60 s old: out of the window.
        assert_eq!(b.record_failure(s(60), "a", true), None);
        assert!(!b.is_blacklisted("a"));
        assert_eq!(b.record_failure(s(61), "b", true), None);
        assert_eq!(b.record_failure(s(70), "a", true), Some(None));
        assert!(b.is_blacklisted("a"));
        assert!(!b.is_blacklisted("b"));
        assert_eq!(b.record_failure(s(71), "a", true), None);
        // A host the job cannot do without is never blacklisted.
        for t in [80, 81, 82, 83] {
            assert_eq!(b.record_failure(s(t), "b", false), None);
        }
        assert!(!b.is_blacklisted("b"));
        assert_eq!(b.readmit_expired(s(1_000_000)), Vec::<String>::new());
        assert_eq!(b.next_expiry(), None);
    }

    #[test]
    fn cooldown_doubles_up_to_max_and_readmits() {
        let mut b = Blacklist::new(policy(Some((s(10), s(25)))));
        let mut now = s(0);
        for expected in [10, 20, 25, 25] {
            for _ in 0..2 {
                assert_eq!(b.record_failure(now, "a", true), None);
            }
            assert_eq!(
                b.record_failure(now, "a", true),
                Some(Some(now + s(expected)))
            );
            assert_eq!(b.next_expiry(), Some(now + s(expected)));
            assert!(b.readmit_expired(now + s(expected - 1)).is_empty());
            now += s(expected);
            assert_eq!(b.readmit_expired(now), vec!["a".to_string()]);
            assert!(!b.is_blacklisted("a"));
        }
    }

    #[test]
    fn cooldown_saturates() {
        assert_eq!(cooldown(s(1), s(5), 0), s(1));
        assert_eq!(cooldown(s(1), s(u64::MAX), 40), s(1 << 39));
        assert_eq!(cooldown(s(u64::MAX / 2 + 1), s(u64::MAX), 2), s(u64::MAX));
        assert_eq!(cooldown(s(1), s(100), 200), s(100));
        assert_eq!(cooldown(s(0), s(100), 5), s(0));
    }
}
