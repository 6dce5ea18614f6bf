//! elasticrun's own status lines: `elasticrun: generation 2: 3 workers
//! (a:2, b:1)`, failures, waits, recoveries. They go to elasticrun's standard
//! error, stamped with the time like the workers' forwarded lines when
//! `--prefix-output-with-timestamp` is given; an in-process cluster hands
//! them to its test instead ([`Say::to`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::WallClock;
use crate::launch::output;

/// Where status lines go, and whether they carry the time.
#[derive(Clone, Debug)]
pub struct Say {
    stamp: bool,
    clock: WallClock,
    sink: Sink,
}

/// A test's receiver of status lines.
type Heard = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Clone)]
enum Sink {
    Stderr,
    To(Heard),
}

impl fmt::Debug for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sink::Stderr => f.write_str("Stderr"),
            Sink::To(_) => f.write_str("To(..)"),
        }
    }
}

impl Say {
    /// Lines on elasticrun's standard error, stamped with the system's time
    /// when `timestamps` (`--prefix-output-with-timestamp`).
    pub fn stderr(timestamps: bool) -> Self {
        Self {
            stamp: timestamps,
            clock: WallClock::System,
            sink: Sink::Stderr,
        }
    }

    /// Lines handed to `heard` (whole, `elasticrun: ` included), stamped
    /// with `clock`'s time when `timestamps`.
    pub fn to(
        heard: impl Fn(&str) + Send + Sync + 'static,
        clock: WallClock,
        timestamps: bool,
    ) -> Self {
        Self {
            stamp: timestamps,
            clock,
            sink: Sink::To(Arc::new(heard)),
        }
    }

    /// The clock lines are stamped with, which also says when a wait ends.
    pub fn clock(&self) -> WallClock {
        self.clock
    }

    /// Says `text` as one line: `[TIME ]elasticrun: TEXT`.
    pub fn line(&self, text: impl fmt::Display) {
        let line = self.format(&text);
        match &self.sink {
            Sink::Stderr => eprintln!("{line}"),
            Sink::To(heard) => heard(&line),
        }
    }

    fn format(&self, text: &dyn fmt::Display) -> String {
        let time = if self.stamp {
            output::stamp(self.clock.now())
        } else {
            String::new()
        };
        format!("{time}elasticrun: {text}")
    }
}

/// `1 worker`, `3 workers`.
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `412 ms` below ten seconds, `12.3 s` above.
pub(crate) fn span(d: Duration) -> String {
    if d < Duration::from_secs(10) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    fn heard(stamp: bool) -> (Say, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let to = lines.clone();
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let clock = WallClock::Tokio {
            at,
            origin: tokio::time::Instant::now(),
        };
        let say = Say::to(move |l| to.lock().unwrap().push(l.to_owned()), clock, stamp);
        (say, lines)
    }

    #[tokio::test(start_paused = true)]
    async fn lines_are_stamped_like_forwarded_output_when_asked() {
        let (say, lines) = heard(true);
        say.line(format_args!("generation {}: {}", 1, count(1, "worker")));
        let (plain, plain_lines) = heard(false);
        plain.line("hosts changed");
        assert_eq!(
            lines.lock().unwrap().as_slice(),
            ["2023-11-14T22:13:20.123Z elasticrun: generation 1: 1 worker"]
        );
        assert_eq!(
            plain_lines.lock().unwrap().as_slice(),
            ["elasticrun: hosts changed"]
        );
        assert!(say.clock().now() > SystemTime::UNIX_EPOCH);
    }

    #[test]
    fn counts_and_spans() {
        assert_eq!(count(0, "worker"), "0 workers");
        assert_eq!(count(1, "slot"), "1 slot");
        assert_eq!(count(3, "step"), "3 steps");
        assert_eq!(span(Duration::from_millis(412)), "412 ms");
        assert_eq!(span(Duration::from_millis(12_345)), "12.3 s");
    }
}
