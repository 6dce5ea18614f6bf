//! The harness of the elastic chaos tests: a scratch directory holding the
//! host list that `discovery-scripts/hosts-from-file.sh` prints, an elastic
//! job of `train --log-steps` whose output and `train` processes are
//! followed while it runs, checks of what every rank printed at the end, and
//! the seeded random choices of the chaos tests ([`Chaos`]).
//! A test that fails mid-run prints the job's output so far; with
//! `ELASTIC_TEST_SHOW=1` every finished job's output is printed too.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::{Finished, Running, descendants, env_of, launch, wait_for};

mod chaos;
mod checks;
pub use chaos::{Chaos, SEED_VAR};
pub use checks::{
    Step, check_done, check_no_rollback, check_reset_limit_reached,
    check_too_few_for_elastic_timeout, done_lines, final_world_sizes, generations, steps,
};

/// `train`'s default global batch.
const BATCH: u64 = 64;

/// A directory of its own for one test, removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    /// `$TMPDIR/elasticrun-TEST-PID`, empty.
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("elasticrun-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the scratch directory");
        Self { dir }
    }

    /// Replaces file `name` atomically: a reader sees the old or the new text.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let (tmp, path) = (self.dir.join(format!(".{name}.tmp")), self.dir.join(name));
        std::fs::write(&tmp, text).expect("write a scratch file");
        std::fs::rename(&tmp, &path).expect("rename a scratch file");
        path
    }

    /// Sets the host list the file discovery script prints.
    pub fn set_hosts(&self, text: &str) {
        self.write("hosts.txt", text);
    }

    /// The `--host-discovery-script` that prints the host list.
    pub fn file_discovery(&self) -> String {
        file_discovery(&self.dir.join("hosts.txt"))
    }
}

/// The `--host-discovery-script` that prints the host list in file `hosts`
/// (`discovery-scripts/hosts-from-file.sh`).
pub fn file_discovery(hosts: &std::path::Path) -> String {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../discovery-scripts/hosts-from-file.sh");
    format!("{} {}", script.display(), hosts.display())
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What `train` is asked to do.
#[derive(Clone, Copy, Debug)]
pub struct Train {
    pub epochs: u64,
    pub samples: u64,
    pub step_delay_ms: u64,
    pub commit_every: u64,
}

impl Train {
    pub fn args(&self) -> Vec<String> {
        let mut v = vec![crate::train().to_str().unwrap().to_owned()];
        for (k, n) in [
            ("--epochs", self.epochs),
            ("--samples", self.samples),
            ("--step-delay-ms", self.step_delay_ms),
            ("--commit-every", self.commit_every),
        ] {
            v.extend([k.to_owned(), n.to_string()]);
        }
        v.push("--log-steps".into());
        v
    }

    /// The checksum of the weights after an undisturbed static run
    /// (`elasticrun -np NP`, no step delay). Rank r always computes share r
    /// of every batch and the sums go round the same ring, so an elastic run
    /// that had `np` ranks at every step ends with the same bits, whichever
    /// processes held the ranks; one that lost a committed step, or applied
    /// one twice, does not.
    pub fn undisturbed_state(&self, np: u64) -> String {
        let mut args = vec!["-np".to_owned(), np.to_string()];
        args.extend(
            Train {
                step_delay_ms: 0,
                ..*self
            }
            .args(),
        );
        let run = launch(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .finish(Duration::from_secs(30));
        run.expect_code(0);
        check_done(&run, np, self.expected_steps())
    }

    /// Optimizer steps of the whole run, whoever runs it.
    pub fn expected_steps(&self) -> u64 {
        self.epochs * self.samples.div_ceil(BATCH)
    }
}

/// A live `train` process of the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerProc {
    pub pid: i32,
    pub host: String,
    pub slot: u32,
}

/// A process: its pid and its start time (clock ticks after boot), which
/// tell it apart from a later process that reuses the pid (`pid_max` may
/// be as low as 32768, and the pids of a test's jobs go fast).
type Proc = (i32, u64);

/// The start time of `pid`, if it runs (is not a zombie).
fn live_start_time(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the parenthesised name: state (field 3) ... starttime (22).
    let fields: Vec<&str> = text[text.rfind(')')? + 2..].split(' ').collect();
    let state = fields.first()?.chars().next()?;
    (state != 'Z' && state != 'X')
        .then(|| fields.get(19)?.parse().ok())
        .flatten()
}

/// Those of `procs` that still run.
fn still_running(procs: &BTreeSet<Proc>) -> Vec<i32> {
    procs
        .iter()
        .filter(|&&(pid, start)| live_start_time(pid) == Some(start))
        .map(|&(pid, _)| pid)
        .collect()
}

/// A running elastic job of `train`, with every `train` process it started
/// recorded by a watcher thread.
#[derive(Debug)]
pub struct Job {
    run: Option<Running>,
    trains: Arc<Mutex<BTreeSet<Proc>>>,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
}

/// The `train` processes below `root` (its workers; `comm` is the name).
fn train_pids(root: i32) -> impl Iterator<Item = i32> {
    descendants(root).into_iter().filter(|p| {
        std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "train")
    })
}

impl Job {
    /// `elasticrun OPTIONS --discovery-interval 0.2 train ARGS --log-steps`.
    pub fn start(options: &[&str], train: &Train) -> Self {
        Self::start_wrapped(options, &[], train)
    }

    /// Like [`Job::start`] with `wrapper` before `train`: a command that ends
    /// by running its arguments (`sh -c '...; exec "$@"' sh`).
    pub fn start_wrapped(options: &[&str], wrapper: &[&str], train: &Train) -> Self {
        let mut args: Vec<String> = options.iter().map(|s| (*s).to_owned()).collect();
        args.extend(["--discovery-interval".into(), "0.2".into()]);
        args.extend(wrapper.iter().map(|s| (*s).to_owned()));
        args.extend(train.args());
        let run = launch(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let root = run.pid();
        let trains: Arc<Mutex<BTreeSet<Proc>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, done) = (Arc::clone(&trains), Arc::clone(&stop));
        let watcher = std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let now = train_pids(root).filter_map(|p| Some((p, live_start_time(p)?)));
                seen.lock().unwrap().extend(now);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self {
            run: Some(run),
            trains,
            stop,
            watcher: Some(watcher),
        }
    }

    fn running(&self) -> &Running {
        self.run.as_ref().expect("the job runs")
    }

    pub fn pid(&self) -> i32 {
        self.running().pid()
    }

    pub fn stdout_so_far(&self) -> String {
        self.running().stdout_so_far()
    }

    pub fn stderr_so_far(&self) -> String {
        self.running().stderr_so_far()
    }

    /// Rank 0's step lines so far.
    pub fn steps(&self) -> Vec<Step> {
        steps(&self.stdout_so_far())
    }

    /// The first step line that `pick` accepts.
    pub fn wait_for_step(&self, what: &str, pick: impl Fn(&Step) -> bool) -> Step {
        wait_for(what, Duration::from_secs(30), || {
            self.steps().into_iter().find(|s| pick(s))
        })
    }

    /// Waits for rank 0 to log step `n` (or a later one).
    pub fn wait_for_step_at_least(&self, n: u64) -> Step {
        self.wait_for_step(&format!("step {n}"), |s| s.step >= n)
    }

    /// Waits for a line of elasticrun's standard error that contains `needle`.
    pub fn wait_for_stderr(&self, needle: &str, limit: Duration) -> String {
        wait_for(&format!("`{needle}` from elasticrun"), limit, || {
            self.stderr_so_far()
                .lines()
                .find(|l| l.contains(needle))
                .map(str::to_owned)
        })
    }

    /// The address of the job's metrics server (`--metrics-address`), once
    /// elasticrun has said it.
    pub fn metrics_address(&self, limit: Duration) -> std::net::SocketAddr {
        let line = self.wait_for_stderr("metrics at http://", limit);
        crate::prometheus::said_address(&line).unwrap_or_else(|| panic!("no address in {line:?}"))
    }

    /// The live (not zombie) workers, by host and slot; recorded with the
    /// watcher's, which may not have seen them yet.
    pub fn workers(&self) -> Vec<WorkerProc> {
        let mut v: Vec<WorkerProc> = train_pids(self.pid())
            .filter_map(|pid| {
                let start = live_start_time(pid)?;
                self.trains.lock().unwrap().insert((pid, start));
                Some(pid)
            })
            .filter_map(|pid| {
                let host = env_of(pid, "ELASTICRUN_HOST")?;
                let slot = env_of(pid, "ELASTICRUN_SLOT")?.parse().ok()?;
                Some(WorkerProc { pid, host, slot })
            })
            .collect();
        v.sort_by(|a, b| (&a.host, a.slot).cmp(&(&b.host, b.slot)));
        v
    }

    /// Waits until exactly `n` workers run, and hands them back.
    pub fn wait_for_workers(&self, n: usize) -> Vec<WorkerProc> {
        wait_for(&format!("{n} workers"), Duration::from_secs(30), || {
            Some(self.workers()).filter(|w| w.len() == n)
        })
    }

    /// SIGKILLs worker `pid`.
    pub fn kill(&self, pid: i32) {
        kill(Pid::from_raw(pid), Signal::SIGKILL).expect("kill a worker");
    }

    /// Waits for elasticrun to exit within `limit`, then checks that none of
    /// the `train` processes it started is left.
    pub fn finish(mut self, limit: Duration) -> Finished {
        let started = Instant::now();
        let run = self.run.take().expect("the job runs").finish(limit);
        if std::env::var_os("ELASTIC_TEST_SHOW").is_some() {
            eprintln!("--- stderr\n{}--- stdout\n{}---", run.stderr, run.stdout);
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            w.join().unwrap();
        }
        let trains = self.trains.lock().unwrap().clone();
        assert!(
            !trains.is_empty(),
            "no train process was seen\n{}",
            run.stderr
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut left = still_running(&trains);
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            left = still_running(&trains);
        }
        for &p in &left {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        assert!(
            left.is_empty(),
            "train processes outlived the job: {left:?}"
        );
        eprintln!(
            "job over {:?} after finish() was called; {} train processes in all",
            started.elapsed(),
            trains.len()
        );
        run
    }
}

impl Drop for Job {
    /// A test that failed half-way: ends elasticrun and whatever it started.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let Some(mut run) = self.run.take() else {
            return;
        };
        if std::thread::panicking() {
            eprintln!(
                "elasticrun's stderr until then:\n{}stdout:\n{}",
                run.stderr_so_far(),
                run.stdout_so_far()
            );
        }
        let _ = kill(Pid::from_raw(run.pid()), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(run.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = run.child.kill();
        let _ = run.child.wait();
        for p in still_running(&self.trains.lock().unwrap()) {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}
