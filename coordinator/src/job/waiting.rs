//! Saying what an elastic job that cannot form its next generation waits
//! for ([`elastic::membership::Shortfall`]): once at once, again whenever what
//! it waits on changes, and every [`REPEAT`] while the wait lasts; nothing
//! once the generation forms.
//!
//! ```text
//! elasticrun: waiting for 2 slots (--min-np 2); discovery offers 1 (localhost:1); giving up in 600 s, at 2026-05-04T12:44:56Z
//! ```

use std::time::Duration;

use elastic::membership::{Generation, Shortfall};

use super::WallClock;
use super::say::count;

/// How often a wait that goes on is said again.
pub(crate) const REPEAT: Duration = Duration::from_secs(30);

/// When the wait was last said, and what it was.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    said: Option<(Shortfall, Duration)>,
}

impl Waiting {
    /// Whether to say at `now` (the job's clock) that the job waits on
    /// `short`: when a wait begins or changes, then every [`REPEAT`]. No
    /// wait (`None`) ends the current one.
    pub(super) fn due(&mut self, now: Duration, short: Option<&Shortfall>) -> bool {
        let Some(short) = short else {
            self.said = None;
            return false;
        };
        let due = match &self.said {
            None => true,
            Some((said, at)) => said != short || now >= at.saturating_add(REPEAT),
        };
        if due {
            self.said = Some((short.clone(), now));
        }
        due
    }

    /// When the wait said last is due to be said again (the job's clock;
    /// `None`: no wait is being said).
    pub(super) fn next_due(&self) -> Option<Duration> {
        self.said.as_ref().map(|(_, at)| at.saturating_add(REPEAT))
    }
}

/// The line that says the wait, `now` being the job's clock and `clock` the
/// wall clock the deadline is told in.
pub(super) fn describe(short: &Shortfall, now: Duration, clock: WallClock) -> String {
    let first = short.next == Generation(1);
    let option = if first && short.wanted > short.min_np {
        format!("-np {}", short.wanted)
    } else {
        format!("--min-np {}", short.min_np)
    };
    let head = if first {
        "the job cannot start: waiting"
    } else {
        "the job is paused: waiting"
    };
    let mut offer: Vec<String> = short.offered.iter().map(ToString::to_string).collect();
    if !short.blacklisted.is_empty() {
        offer.push(format!("blacklisted: {}", short.blacklisted.join(", ")));
    }
    let offer = if offer.is_empty() {
        String::new()
    } else {
        format!(" ({})", offer.join("; "))
    };
    let left = short.deadline.saturating_sub(now);
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    let at = humantime::format_rfc3339_seconds(clock.now() + left);
    let end = if short.offered_slots() >= short.min_np {
        format!("starting with fewer (at least --min-np {})", short.min_np)
    } else {
        "giving up".to_owned()
    };
    format!(
        "{head} for {} ({option}); discovery offers {}{offer}; {end} in {secs} s, at {at}",
        count(short.wanted, "slot"),
        short.offered_slots(),
    )
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use elastic::hosts::HostSlots;

    use super::*;

    fn short(next: u64, wanted: usize, offered: &[(&str, usize)]) -> Shortfall {
        Shortfall {
            next: Generation(next),
            wanted,
            min_np: 2,
            offered: offered
                .iter()
                .map(|(h, n)| HostSlots {
                    host: (*h).to_owned(),
                    slots: *n,
                })
                .collect(),
            blacklisted: Vec::new(),
            deadline: Duration::from_secs(600),
        }
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn said_at_once_then_every_thirty_seconds_and_on_every_change() {
        let mut w = Waiting::default();
        let one = short(1, 2, &[("localhost", 1)]);
        assert!(w.due(Duration::ZERO, Some(&one)));
        assert!(!w.due(S, Some(&one)));
        assert!(!w.due(REPEAT - S, Some(&one)));
        assert!(w.due(REPEAT, Some(&one)));
        assert!(!w.due(REPEAT + S, Some(&one)));
        assert!(w.due(2 * REPEAT, Some(&one)));
        // What it waits on changed: said at once.
        let other = short(1, 2, &[("b", 1)]);
        assert!(w.due(2 * REPEAT + S, Some(&other)));
        // The generation formed: nothing to say; a later wait is new.
        assert!(!w.due(2 * REPEAT + 2 * S, None));
        assert!(w.due(2 * REPEAT + 3 * S, Some(&other)));
    }

    #[test]
    fn the_line_says_what_is_wanted_what_is_offered_and_when_it_ends() {
        let clock = WallClock::Tokio {
            at: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            origin: tokio::time::Instant::now(),
        };
        let line = describe(&short(1, 2, &[("localhost", 1)]), Duration::ZERO, clock);
        assert_eq!(
            line,
            "the job cannot start: waiting for 2 slots (--min-np 2); discovery offers 1 \
             (localhost:1); giving up in 600 s, at 2027-01-15T08:10:00Z"
        );
        let mut paused = short(3, 2, &[]);
        paused.blacklisted = vec!["b".into()];
        let line = describe(&paused, Duration::from_millis(30_500), clock);
        assert!(
            line.starts_with(
                "the job is paused: waiting for 2 slots (--min-np 2); discovery offers 0 \
                 (blacklisted: b); giving up in 570 s, at "
            ),
            "{line}"
        );
        let np = short(1, 4, &[("a", 3)]);
        let line = describe(&np, Duration::ZERO, clock);
        assert!(
            line.contains("waiting for 4 slots (-np 4); discovery offers 3 (a:3); starting with fewer (at least --min-np 2) in 600 s"),
            "{line}"
        );
    }
}
