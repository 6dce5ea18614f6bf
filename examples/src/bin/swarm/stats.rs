//! What the load generator observes: registrations, assignments by
//! generation, failures, and the bytes the coordinator sent; and the
//! coordinator process's CPU time and memory, from /proc.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Counts what happens to the workers, waking waiters on each change.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    tally: Mutex<Tally>,
    /// Wakes the waiters (one, the measuring task): a change costs an
    /// atomic operation while it runs, where a watch channel's eight
    /// notifiers had been a tenth of the load generator's CPU in a reset
    /// at 10,000 workers, on the cores the coordinator measured shares.
    changed: Notify,
    bytes_in: Arc<AtomicU64>,
}

/// The counts at one moment.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally {
    pub(crate) registered: usize,
    pub(crate) last_registered: Option<Instant>,
    /// Registrations again after a lost connection (pods following a new
    /// leader), and when the last came.
    pub(crate) reattached: usize,
    pub(crate) last_reattached: Option<Instant>,
    /// By generation: how many workers it assigned, how many of those had
    /// trained before (survivors), and when the last one came.
    pub(crate) generations: BTreeMap<u64, Assigned>,
    pub(crate) failures: Vec<String>,
    /// Address lookups asked, answered, and answered with an address.
    pub(crate) lookups: usize,
    pub(crate) answers: usize,
    pub(crate) lookups_answered: usize,
    /// Workers that asked to rejoin and wait for their assignment.
    pub(crate) rejoining: usize,
    /// The coordinator process ended.
    pub(crate) coordinator_gone: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Assigned {
    pub(crate) workers: usize,
    pub(crate) survivors: usize,
    pub(crate) last: Instant,
    /// When the last survivor came.
    pub(crate) last_survivor: Instant,
}

impl Stats {
    fn change(&self, f: impl FnOnce(&mut Tally)) {
        f(&mut self.lock());
        self.changed.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn reattached(&self) {
        self.change(|t| {
            t.reattached += 1;
            t.last_reattached = Some(Instant::now());
        });
    }

    pub(crate) fn registered(&self) {
        self.change(|t| {
            t.registered += 1;
            t.last_registered = Some(Instant::now());
        });
    }

    /// A worker was assigned `generation`; `survivor`: it trained before.
    pub(crate) fn assigned(&self, generation: u64, survivor: bool) {
        self.change(|t| {
            let now = Instant::now();
            let g = t.generations.entry(generation).or_insert(Assigned {
                workers: 0,
                survivors: 0,
                last: now,
                last_survivor: now,
            });
            g.workers += 1;
            g.last = now;
            if survivor {
                g.survivors += 1;
                g.last_survivor = now;
            }
        });
    }

    pub(crate) fn looking_up(&self) {
        self.change(|t| t.lookups += 1);
    }

    pub(crate) fn looked_up(&self, found: bool) {
        self.change(|t| {
            t.answers += 1;
            t.lookups_answered += usize::from(found);
        });
    }

    /// A worker asked to rejoin (`true`) or was placed after asking.
    pub(crate) fn rejoining(&self, asking: bool) {
        self.change(|t| {
            if asking {
                t.rejoining += 1;
            } else {
                t.rejoining = t.rejoining.saturating_sub(1);
            }
        });
    }

    pub(crate) fn failed(&self, why: String) {
        self.change(|t| t.failures.push(why));
    }

    pub(crate) fn coordinator_gone(&self) {
        self.change(|t| t.coordinator_gone = true);
    }

    pub(crate) fn bytes_in(&self) -> Arc<AtomicU64> {
        self.bytes_in.clone()
    }

    pub(crate) fn bytes_read(&self) -> u64 {
        self.bytes_in.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn now(&self) -> Tally {
        self.lock().clone()
    }

    /// Waits up to `within` for `done` to say what it waited for, checking
    /// on every change; fails saying `what` and the counts when the time is
    /// up or the coordinator has ended.
    pub(crate) async fn wait_for<T>(
        &self,
        what: &str,
        within: Duration,
        done: impl Fn(&Tally) -> Option<T>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + within;
        loop {
            // Listening before looking: a change made after the look wakes
            // this wait.
            let change = self.changed.notified();
            let mut change = std::pin::pin!(change);
            change.as_mut().enable();
            {
                let t = self.lock();
                if let Some(found) = done(&t) {
                    return Ok(found);
                }
                if t.coordinator_gone {
                    return Err(format!(
                        "the coordinator ended while waiting for {what}; {}",
                        t.brief()
                    ));
                }
            }
            if tokio::time::timeout_at(deadline, change).await.is_err() {
                let t = self.lock();
                return Err(format!("no {what} within {within:?}; {}", t.brief()));
            }
        }
    }
}

impl Tally {
    fn brief(&self) -> String {
        let gens: Vec<String> = self
            .generations
            .iter()
            .map(|(g, a)| format!("{g}: {} ({} survivors)", a.workers, a.survivors))
            .collect();
        let failures: Vec<&String> = self.failures.iter().take(3).collect();
        format!(
            "registered {}, assigned by generation {{{}}}, failures {} {failures:?}",
            self.registered,
            gens.join(", "),
            self.failures.len()
        )
    }

    /// The newest generation, if any.
    pub(crate) fn newest(&self) -> Option<(u64, Assigned)> {
        self.generations.last_key_value().map(|(g, a)| (*g, *a))
    }
}

/// Linux reports process times in units of 1/100 s (USER_HZ).
const USER_HZ: f64 = 100.0;

/// A process's CPU time (user and system) and memory, from /proc.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    pub(crate) cpu_s: f64,
    pub(crate) rss_mib: f64,
    pub(crate) peak_rss_mib: f64,
}

/// `pid`'s usage now, or `None` when /proc cannot tell (it ended).
pub(crate) fn usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    let cpu_s = (ticks(11)? + ticks(12)?) / USER_HZ;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
    };
    Some(Usage {
        cpu_s,
        rss_mib: kib("VmRSS:")? / 1024.0,
        peak_rss_mib: kib("VmHWM:")? / 1024.0,
    })
}

/// CPU time, in milliseconds, of all `pid`'s threads, from the scheduler's
/// nanosecond counts (`/proc/PID/task/TID/schedstat`); `None` when /proc
/// cannot tell (it ended).
pub(crate) fn cpu_ms(pid: u32) -> Option<f64> {
    let on_cpu = |tid: &str| -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
        stat.split_whitespace().next()?.parse().ok()
    };
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let ns: u64 = (tasks.flatten())
        .filter_map(|t| on_cpu(t.file_name().to_str()?))
        .sum();
    Some(ns as f64 / 1e6)
}
