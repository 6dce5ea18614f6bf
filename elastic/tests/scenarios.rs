//! Membership scenarios as text files, in the style of raft-rs `datadriven`: every
//! `tests/scenarios/*.txt` is a list of blocks, each one event fed to
//! [`elastic::Membership`] and the commands it must hand back.
//!
//! ```text
//! # Comments and blank lines between blocks are kept as they are.
//! fail t=5s localhost/2 "killed"
//! ----
//! reset 2
//! spawn localhost/2
//! ```
//!
//! A block is a command line, a `----` line, then the expected output, one line per
//! command, up to the next blank line (no output: `----` then a blank line). Times
//! are `t=5s`, `t=5.1s` or `t=100ms` since job start and never go back; a slot is
//! `host/N`.
//!
//! Input lines:
//! - `policy np=4 min=2 max=4 timeout=600s reset-limit=3 failures=3 window=60s
//!   cooldown=10s..60s start-timeout=30s rejoin-timeout=60s replacement-wait=500ms`:
//!   a new job; every key is
//!   optional (defaults: `np=1 min=1 max=np`, the rest as in `Policy::new`).
//!   `policy start-timeout=30s static=4` is a static job of 4 (`Policy::fixed`, with
//!   the start timeout given before it).
//! - `discover t=0s a:4 b [fe80::1]:2`: discovery output, one host per word (an
//!   empty list is valid).
//! - `register t=1s a/0 a/1`, `rejoin t=5s gen=2 a/0 a/1`, `finish t=9s a/0`: one
//!   event per slot, outputs in turn.
//! - `fail t=5s a/2 "why"`: a worker failed (the reason is optional).
//! - `tick t=700s`: timers.
//! - `state`: `generation G, resets R: <members in rank order, or none>` and `next
//!   deadline T` (or `no deadline`).
//! - `snapshot`: the durable facts ([`elastic::Snapshot`]); `resume t=5s`: a new core
//!   from the current one's snapshot (through its serialized form), as a restarted
//!   coordinator builds it, printed as a snapshot and its detached members;
//!   `reattach t=6s gen=2 a/0`: a detached member's worker reconnected.
//!
//! Output lines: `spawn a/2`, `stop a/2: why`, `reset 2`, `hosts-updated 2`,
//! `assign 2: a/0 a/1`, `leave b/0`, `blacklisted b until=70s` (or `forever`),
//! `readmitted b`, `without-runtime after=30s`, `finish`, `fail <the JobFailure
//! message>`.
//!
//! `ELASTIC_BLESS=1 cargo test -p elastic --test scenarios` rewrites the expected
//! outputs with the actual ones; read the diff before keeping it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use elastic::membership::fmt_secs;
use elastic::membership::{Ban, Snapshot};
use elastic::{Command, Membership, Policy, SlotId, parse_discovered};

struct Block {
    /// Comment and blank lines before the command.
    prelude: Vec<String>,
    line: usize,
    command: String,
    expected: Vec<String>,
}

fn parse_file(text: &str) -> (Vec<Block>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut prelude = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        if line.trim().is_empty() || line.starts_with('#') {
            prelude.push(line.to_owned());
            continue;
        }
        let sep = lines.next().map(|(_, l)| l);
        assert_eq!(
            sep,
            Some("----"),
            "line {}: `----` expected after {line:?}",
            n + 2
        );
        let mut expected = Vec::new();
        while let Some((_, l)) = lines.next_if(|(_, l)| !l.trim().is_empty()) {
            expected.push(l.to_owned());
        }
        blocks.push(Block {
            prelude: std::mem::take(&mut prelude),
            line: n + 1,
            command: line.to_owned(),
            expected,
        });
    }
    (blocks, prelude)
}

/// Words, with `"quoted text"` as one word.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(q) = rest.strip_prefix('"') {
            let end = q.find('"').expect("closing quote");
            out.push(q[..end].to_owned());
            rest = q[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            out.push(rest[..end].to_owned());
            rest = rest[end..].trim_start();
        }
    }
    out
}

fn duration(s: &str) -> Duration {
    let (num, scale) = match s.strip_suffix("ms") {
        Some(n) => (n, 1_000_000u64),
        None => (
            s.strip_suffix('s').expect("duration ends in s or ms"),
            1_000_000_000,
        ),
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    assert!(frac.len() <= 9, "too many decimals in {s}");
    let frac_nanos: u64 = format!("{frac:0<9}").parse().unwrap();
    let nanos = whole.parse::<u64>().unwrap() * scale + frac_nanos * scale / 1_000_000_000;
    Duration::from_nanos(nanos)
}

fn slot(s: &str) -> SlotId {
    let (host, n) = s.rsplit_once('/').expect("slot as host/N");
    SlotId::new(host, n.parse().expect("slot number"))
}

fn show_slot(s: &SlotId) -> String {
    format!("{}/{}", s.host, s.slot)
}

fn render(c: &Command) -> String {
    match c {
        Command::Spawn(s) => format!("spawn {}", show_slot(s)),
        Command::Stop { slot, why } => format!("stop {}: {why}", show_slot(slot)),
        Command::Reset { generation } => format!("reset {generation}"),
        Command::HostsUpdated { generation } => format!("hosts-updated {generation}"),
        Command::Assign { generation, ranks } => {
            let ranks: Vec<String> = ranks.iter().map(show_slot).collect();
            format!("assign {generation}: {}", ranks.join(" "))
        }
        Command::Leave { slot } => format!("leave {}", show_slot(slot)),
        Command::Blacklisted { host, until } => match until {
            Some(t) => format!("blacklisted {host} until={}", fmt_secs(*t)),
            None => format!("blacklisted {host} forever"),
        },
        Command::Readmitted { host } => format!("readmitted {host}"),
        Command::Spare { slot } => format!("spare {}", show_slot(slot)),
        Command::WithoutRuntime { after } => format!("without-runtime after={}", fmt_secs(*after)),
        Command::Finish => "finish".to_owned(),
        Command::Fail(f) => format!("fail {f}"),
    }
}

fn policy(args: &[String]) -> Policy {
    let mut p = Policy::new(1, 0, 1);
    let mut max = None;
    for a in args {
        let (k, v) = a.split_once('=').expect("key=value");
        match k {
            "np" => p.initial_np = v.parse().unwrap(),
            "min" => p.min_np = v.parse().unwrap(),
            "max" => max = Some(v.parse().unwrap()),
            "timeout" => p.elastic_timeout = duration(v),
            "reset-limit" => p.reset_limit = Some(v.parse().unwrap()),
            "failures" => p.blacklist.failures = v.parse().unwrap(),
            "window" => p.blacklist.window = duration(v),
            "cooldown" => {
                let (lo, hi) = v.split_once("..").expect("cooldown=MIN..MAX");
                p.blacklist.cooldown = Some((duration(lo), duration(hi)));
            }
            "start-timeout" => p.start_timeout = duration(v),
            "rejoin-timeout" => p.rejoin_timeout = duration(v),
            "replacement-wait" => p.replacement_wait = duration(v),
            "static" => {
                let fixed = Policy::fixed(v.parse().unwrap(), p.start_timeout);
                (p, max) = (fixed, Some(v.parse().unwrap()));
            }
            _ => panic!("unknown policy key {k}"),
        }
    }
    p.max_np = max.unwrap_or(p.initial_np);
    p
}

struct Runner {
    job: Option<Membership>,
    policy: Option<Policy>,
    now: Duration,
}

impl Runner {
    fn run(&mut self, command: &str) -> Vec<String> {
        let w = words(command);
        let (verb, mut args) = (w[0].as_str(), w[1..].to_vec());
        if verb == "policy" {
            let p = policy(&args);
            self.job = Some(Membership::new(p.clone()));
            self.policy = Some(p);
            self.now = Duration::ZERO;
            return Vec::new();
        }
        if let Some(t) = args.first().and_then(|a| a.strip_prefix("t=")) {
            let t = duration(t);
            assert!(t >= self.now, "time goes back to {t:?}");
            self.now = t;
            args.remove(0);
        }
        let (job, now) = (self.job.as_mut().expect("`policy` first"), self.now);
        let cmds = match verb {
            "discover" => job.discovered(now, &parse_discovered(&args.join("\n"), 1).unwrap()),
            "register" => each(&args, |s| job.registered(now, s)),
            "rejoin" => {
                let g = args[0].strip_prefix("gen=").expect("gen=N");
                let g = elastic::Generation(g.parse().unwrap());
                each(&args[1..], |s| job.rejoined(now, s, g))
            }
            "fail" => job.failed(now, &slot(&args[0]), args.get(1).map_or("failed", |s| s)),
            "finish" => each(&args, |s| job.finished(now, s)),
            "tick" => job.tick(now),
            "state" => return state(job),
            "snapshot" => return show_snapshot(&job.snapshot()),
            "resume" => {
                // Through the encoding a store keeps, as a restarted coordinator would.
                let bytes = serde_json::to_vec(&job.snapshot()).unwrap();
                let snap: Snapshot = serde_json::from_slice(&bytes).unwrap();
                let policy = self.policy.clone().expect("`policy` first");
                *job = Membership::resume(policy, &snap, now);
                let mut out = show_snapshot(&job.snapshot());
                out.extend(job.detached().map(|s| format!("detached {}", show_slot(s))));
                return out;
            }
            "reattach" => {
                let g = args[0].strip_prefix("gen=").expect("gen=N");
                let g = elastic::Generation(g.parse().unwrap());
                each(&args[1..], |s| job.reattached(now, s, g))
            }
            _ => panic!("unknown command {verb}"),
        };
        cmds.iter().map(render).collect()
    }
}

/// One event per slot, outputs in turn.
fn each(slots: &[String], mut event: impl FnMut(&SlotId) -> Vec<Command>) -> Vec<Command> {
    slots.iter().flat_map(|s| event(&slot(s))).collect()
}

fn show_snapshot(s: &Snapshot) -> Vec<String> {
    let members: Vec<String> = s.members.iter().map(show_slot).collect();
    let mut out = vec![format!(
        "snapshot generation {}, resets {}, next order {}: {}",
        s.generation,
        s.resets,
        s.next_order,
        if members.is_empty() {
            "none".to_owned()
        } else {
            members.join(" ")
        }
    )];
    for h in &s.hosts {
        let failures: Vec<String> = h.failures.iter().map(|t| fmt_secs(*t)).collect();
        let ban = match h.ban {
            Ban::None => "not banned".to_owned(),
            Ban::Until(t) => format!("banned until={}", fmt_secs(t)),
            Ban::Forever => "banned forever".to_owned(),
        };
        out.push(format!(
            "host {} bans={} {ban} failures=[{}]",
            h.host,
            h.bans,
            failures.join(" ")
        ));
    }
    out
}

fn state(job: &Membership) -> Vec<String> {
    let mut members: Vec<String> = job.members().iter().map(show_slot).collect();
    if members.is_empty() {
        members.push("none".to_owned());
    }
    let deadline = match job.next_deadline() {
        Some(t) => format!("next deadline {}", fmt_secs(t)),
        None => "no deadline".to_owned(),
    };
    let (g, r) = (job.generation(), job.resets());
    vec![
        format!("generation {g}, resets {r}: {}", members.join(" ")),
        deadline,
    ]
}

fn run_file(path: &Path, bless: bool) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let (blocks, trailer) = parse_file(&text);
    let mut runner = Runner {
        job: None,
        policy: None,
        now: Duration::ZERO,
    };
    let (mut failures, mut blessed) = (Vec::new(), String::new());
    for b in &blocks {
        let actual = runner.run(&b.command);
        if actual != b.expected {
            failures.push(format!(
                "{}:{}: {}\n--- expected\n{}\n--- actual\n{}\n",
                path.display(),
                b.line,
                b.command,
                b.expected.join("\n"),
                actual.join("\n")
            ));
        }
        for l in b
            .prelude
            .iter()
            .chain([&b.command, &"----".to_owned()])
            .chain(&actual)
        {
            blessed.push_str(l);
            blessed.push('\n');
        }
    }
    for l in &trailer {
        blessed.push_str(l);
        blessed.push('\n');
    }
    if bless && blessed != text {
        std::fs::write(path, blessed).unwrap();
        return Vec::new();
    }
    failures
}

#[test]
fn scenarios() {
    let bless = std::env::var_os("ELASTIC_BLESS").is_some_and(|v| v == "1");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenarios in {}", dir.display());
    let failures: Vec<String> = files.iter().flat_map(|f| run_file(f, bless)).collect();
    assert!(
        failures.is_empty(),
        "{} block(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
