//! The knobs of elastic membership, with their defaults (`--min-np`, `--max-np`, `-np`,
//! `--elastic-timeout`, `--reset-limit`, `--blacklist-cooldown-range`, start and
//! rejoin timeouts).

use std::time::Duration;

/// Default `--elastic-timeout`: how long to wait for at least `min_np` workers.
pub const DEFAULT_ELASTIC_TIMEOUT: Duration = Duration::from_secs(600);
/// Default start timeout: a spawned worker that has not registered by then has
/// failed (Horovod's `--start-timeout` is also 30 s).
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Default rejoin timeout: a member that has not rejoined a new generation by then
/// has failed. After `HostsUpdated` members rejoin at their next commit, so this should
/// exceed the time between two commits: members that have not reached theirs by then
/// are told to `Reset` (back to their last commit), and fail only if they do not
/// rejoin within a further rejoin timeout.
pub const DEFAULT_REJOIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `--replacement-wait`: how long the survivors of a failure wait for
/// the workers started in place of the failed ones before they go on without
/// them. A native worker registers within milliseconds; a Python one importing
/// PyTorch takes seconds, which the survivors would otherwise spend idle.
pub const DEFAULT_REPLACEMENT_WAIT: Duration = Duration::from_millis(500);

/// Membership policy of an elastic job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Fewest workers a generation may have (`--min-np`, at least 1).
    pub min_np: usize,
    /// Most workers (`--max-np`): slots beyond it are not used.
    pub max_np: usize,
    /// `-np`: the first generation waits for this many workers (clamped to
    /// `[min_np, max_np]`) until `elastic_timeout`.
    pub initial_np: usize,
    /// How long to wait for `min_np` workers (default 600 s), counted from job start
    /// for the first generation and from when fewer than `min_np` were live after.
    pub elastic_timeout: Duration,
    /// Most generations after the first (`--reset-limit`); `None` = unlimited.
    pub reset_limit: Option<u32>,
    /// When a host is blacklisted, and for how long.
    pub blacklist: BlacklistPolicy,
    /// A spawned worker that has not registered by then has failed (default 30 s).
    pub start_timeout: Duration,
    /// A live member that has not rejoined a new generation by then has failed
    /// (default 60 s).
    pub rejoin_timeout: Duration,
    /// After a failure, how long the next generation waits for replacement
    /// workers still starting once every survivor has rejoined (default
    /// 0.5 s); replacements that register later join at the members' next
    /// commit (`HostsUpdated`), as a new host's workers do.
    pub replacement_wait: Duration,
    /// What a failure does: replace the worker (elastic jobs) or end the job
    /// (static jobs).
    pub on_failure: OnFailure,
    /// Workers kept started and registered beyond those that train
    /// (`--hot-spares`): a failed member's place is taken by one of them at
    /// once, and the pool is started again in the background.
    pub hot_spares: usize,
}

/// What the core does when a worker fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFailure {
    /// Drop the generation, replace the worker and go on (elastic jobs).
    #[default]
    Replace,
    /// End the job at once with [`super::JobFailure::WorkerFailed`] (or
    /// [`super::JobFailure::StartTimeout`] for workers that never registered):
    /// static jobs (`-np`, `-H`, `--hostfile`), which are elastic jobs whose host set
    /// is discovered once and whose size is fixed.
    EndJob,
}

impl Policy {
    /// A policy for `min_np..=max_np` workers starting with `initial_np`, every other
    /// knob at its default.
    pub fn new(min_np: usize, max_np: usize, initial_np: usize) -> Self {
        Self {
            min_np,
            max_np,
            initial_np,
            elastic_timeout: DEFAULT_ELASTIC_TIMEOUT,
            reset_limit: None,
            blacklist: BlacklistPolicy::default(),
            start_timeout: DEFAULT_START_TIMEOUT,
            rejoin_timeout: DEFAULT_REJOIN_TIMEOUT,
            replacement_wait: DEFAULT_REPLACEMENT_WAIT,
            on_failure: OnFailure::Replace,
            hot_spares: 0,
        }
    }

    /// A static job of exactly `np` workers: `min = max = np`, no elastic
    /// timeout (the start timeout bounds the wait), and any failure ends it.
    pub fn fixed(np: usize, start_timeout: Duration) -> Self {
        Self {
            elastic_timeout: Duration::MAX,
            start_timeout,
            on_failure: OnFailure::EndJob,
            ..Self::new(np, np, np)
        }
    }

    /// Refuses a policy that cannot be met, for the command line to report.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.min_np == 0 {
            return Err(PolicyError::ZeroMinNp);
        }
        if self.max_np < self.min_np {
            return Err(PolicyError::MaxBelowMin {
                min_np: self.min_np,
                max_np: self.max_np,
            });
        }
        if let Some((min, max)) = self.blacklist.cooldown
            && max < min
        {
            return Err(PolicyError::CooldownRange { min, max });
        }
        Ok(())
    }

    /// The policy the state machine runs: `min_np >= 1`, `max_np >= min_np`,
    /// `initial_np` in `[min_np, max_np]`, at least 2 failures to blacklist, a
    /// cooldown range with `MAX >= MIN`. Lets [`super::Membership::new`] take any
    /// policy without panicking.
    pub(crate) fn normalized(mut self) -> Self {
        self.min_np = self.min_np.max(1);
        self.max_np = self.max_np.max(self.min_np);
        self.initial_np = self.initial_np.clamp(self.min_np, self.max_np);
        self.blacklist.failures = self.blacklist.failures.max(2);
        if let Some((min, max)) = self.blacklist.cooldown {
            self.blacklist.cooldown = Some((min, max.max(min)));
        }
        self
    }
}

/// When failures blacklist a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlacklistPolicy {
    /// Failures of a host's workers within `window` that blacklist it (default 3; at
    /// least 2: one failure never blacklists a host).
    pub failures: u32,
    /// Default 60 s; a failure counts while it is less than `window` old.
    pub window: Duration,
    /// `--blacklist-cooldown-range MIN MAX`: the k-th blacklisting of a host lasts
    /// `min(MIN * 2^(k-1), MAX)`. `None` (the default) = blacklisted for good.
    pub cooldown: Option<(Duration, Duration)>,
}

impl Default for BlacklistPolicy {
    fn default() -> Self {
        Self {
            failures: 3,
            window: Duration::from_secs(60),
            cooldown: None,
        }
    }
}

/// Why a [`Policy`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("--min-np must be at least 1")]
    ZeroMinNp,
    #[error("--max-np {max_np} is below --min-np {min_np}")]
    MaxBelowMin { min_np: usize, max_np: usize },
    #[error("--blacklist-cooldown-range: MAX {max:?} is below MIN {min:?}")]
    CooldownRange { min: Duration, max: Duration },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_and_normalize() {
        assert_eq!(Policy::new(2, 4, 3).validate(), Ok(()));
        assert_eq!(Policy::new(0, 4, 3).validate(), Err(PolicyError::ZeroMinNp));
        assert_eq!(
            Policy::new(3, 2, 3).validate(),
            Err(PolicyError::MaxBelowMin {
                min_np: 3,
                max_np: 2
            })
        );
        let mut p = Policy::new(0, 0, 9);
        p.blacklist.failures = 1;
        p.blacklist.cooldown = Some((Duration::from_secs(9), Duration::from_secs(1)));
        assert!(matches!(
            p.validate(),
            Err(PolicyError::ZeroMinNp | PolicyError::CooldownRange { .. })
        ));
        let n = p.normalized();
        assert_eq!((n.min_np, n.max_np, n.initial_np), (1, 1, 1));
        assert_eq!(n.blacklist.failures, 2);
        assert_eq!(
            n.blacklist.cooldown,
            Some((Duration::from_secs(9), Duration::from_secs(9)))
        );
    }
}
