//! Multi-process tests of elasticrun's binaries, and the harness they share:
//! finding the built binaries, running a job with a deadline, following its
//! processes and checking that none outlives it. [`cluster`] runs the job
//! driver and the worker runtime's sessions in one process instead, in
//! virtual time.
//!
//! The binaries come from the same `cargo test --workspace` build (the
//! coordinator's and the examples' own tests make cargo build them); run
//! `cargo build --workspace --bins` first when running this crate alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

pub mod browser;
pub mod cluster;
pub mod collectives_check;
pub mod elastic;
pub mod etcd;
pub mod needs;
pub mod netns;
pub mod pods;
pub mod ports;
pub mod prometheus;
pub mod slurm;
pub mod sshd;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A binary built in this workspace's target directory.
pub fn binary(name: &str) -> PathBuf {
    // tests run as target/<profile>/deps/<test>-<hash>
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo build --workspace --bins` (or `cargo test --workspace`)",
        path.display()
    );
    path
}

/// `elasticrun`.
pub fn elasticrun() -> PathBuf {
    binary("elasticrun")
}

/// `examples/train`.
pub fn train() -> PathBuf {
    binary("train")
}

/// A started process whose output is collected in the background, line by
/// line: [`Running::stdout_so_far`] shows what it printed until now.
#[derive(Debug)]
pub struct Running {
    pub child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
    out_so_far: Arc<Mutex<String>>,
    err_so_far: Arc<Mutex<String>>,
}

/// How a process ended, with everything it printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Reads `r` to its end, a whole line at a time into `into`; hands back
/// everything read.
fn drain(r: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut line = Vec::new();
        while matches!(r.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&line));
            line.clear();
        }
        into.lock().unwrap().clone()
    })
}

/// Starts `cmd` with piped output.
pub fn start(mut cmd: Command) -> Running {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start process");
    let (out_so_far, err_so_far) = (Arc::default(), Arc::default());
    let stdout = drain(child.stdout.take().unwrap(), Arc::clone(&out_so_far));
    let stderr = drain(child.stderr.take().unwrap(), Arc::clone(&err_so_far));
    Running {
        child,
        stdout,
        stderr,
        out_so_far,
        err_so_far,
    }
}

/// `elasticrun ARGS...`.
pub fn launch(args: &[&str]) -> Running {
    let mut cmd = Command::new(elasticrun());
    cmd.args(args);
    start(cmd)
}

impl Running {
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// The whole lines it printed on its standard output until now.
    pub fn stdout_so_far(&self) -> String {
        self.out_so_far.lock().unwrap().clone()
    }

    /// The whole lines it printed on its standard error until now.
    pub fn stderr_so_far(&self) -> String {
        self.err_so_far.lock().unwrap().clone()
    }

    /// Waits until it prints a whole line on its standard output that `pick`
    /// accepts, and hands that line back. Fails the test naming `what`, with
    /// the output so far, if `limit` passes first.
    pub fn wait_for_stdout_line(
        &mut self,
        what: &str,
        limit: Duration,
        pick: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(line) = self.stdout_so_far().lines().find(|l| pick(l)) {
                return line.to_owned();
            }
            if Instant::now() > deadline {
                let state = match self.child.try_wait() {
                    Ok(Some(st)) => format!("it exited ({st})"),
                    _ => "it still runs".to_owned(),
                };
                panic!(
                    "timed out after {limit:?} waiting for {what}; {state}\n\
                     stdout so far:\n{}\nstderr so far:\n{}",
                    self.stdout_so_far(),
                    self.stderr_so_far()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit within `limit`; kills the process and fails the test
    /// otherwise.
    pub fn finish(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let out = self.stdout.join().unwrap_or_default();
                let err = self.stderr.join().unwrap_or_default();
                panic!("process did not exit within {limit:?}\nstdout:\n{out}\nstderr:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Finished {
            status,
            stdout: self.stdout.join().unwrap(),
            stderr: self.stderr.join().unwrap(),
        }
    }
}

impl Finished {
    /// Fails the test, showing the output, unless the exit code is `code`.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.status.code(),
            Some(code),
            "exit status {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    /// The `{"event":"done",...}` line rank 0 of `train` printed, forwarded as
    /// `[0]<stdout>:`.
    pub fn done_event(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("[0]<stdout>:").or(Some(l)))
            .rfind(|l| l.starts_with("{\"") && l.contains("\"done\""))
            .unwrap_or_else(|| panic!("no done event in\n{}", self.stdout));
        serde_json::from_str(line).expect("done event is JSON")
    }
}

/// Polls `f` until it returns `Some` or `limit` passes; fails the test naming
/// `what` then.
pub fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// (parent pid, process group, state) of a live process, from /proc.
fn stat(pid: i32) -> Option<(i32, i32, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesised and may contain spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((ppid, pgrp, state))
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Every live descendant of `root`.
pub fn descendants(root: i32) -> BTreeSet<i32> {
    let procs: Vec<(i32, i32)> = all_pids()
        .into_iter()
        .filter_map(|p| stat(p).map(|(pp, _, _)| (p, pp)))
        .collect();
    let mut found = BTreeSet::from([root]);
    loop {
        let before = found.len();
        for &(p, pp) in &procs {
            if found.contains(&pp) {
                found.insert(p);
            }
        }
        if found.len() == before {
            found.remove(&root);
            return found;
        }
    }
}

/// Whether `pid` is a running (not zombie) process.
pub fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(_, _, state)| state != 'Z' && state != 'X')
}

/// Live processes in any of the process groups `groups`.
pub fn alive_in_groups(groups: &BTreeSet<i32>) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&p| stat(p).is_some_and(|(_, g, s)| groups.contains(&g) && s != 'Z' && s != 'X'))
        .collect()
}

/// How many shared-memory segments of the data plane process `pid` maps:
/// the distinct `/memfd:elasticrun-...` files in its `/proc/<pid>/maps`
/// (one per peer it reaches through shared memory).
pub fn shared_segments(pid: i32) -> usize {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|f| f.starts_with("/memfd:elasticrun-"))
        .collect::<BTreeSet<_>>()
        .len()
}

/// Names under `/dev/shm` that elasticrun could have left (it creates none:
/// its segments are anonymous memory files).
pub fn dev_shm_leftovers() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("elasticrun"))
        .collect()
}

/// Fails the test if any of `pids` (or anything in their process groups) is
/// still running after `limit`.
pub fn assert_all_gone(pids: &BTreeSet<i32>, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|&p| alive(p))
            .chain(alive_in_groups(pids))
            .collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            for &p in &left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            panic!("processes outlived the job: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of `var` in the environment of process `pid`.
pub fn env_of(pid: i32, var: &str) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    raw.split(|&b| b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix(var)?.strip_prefix('=').map(str::to_owned)
    })
}

/// The worker processes of the job `elasticrun_pid` runs, by rank (from the
/// `ELASTICRUN_SLOT` they were given; on one host the slot is the rank), once
/// `n` of them have started.
pub fn workers(elasticrun_pid: i32, n: usize, limit: Duration) -> Vec<i32> {
    wait_for(
        &format!("{n} workers of elasticrun {elasticrun_pid}"),
        limit,
        || {
            let mut by_slot: Vec<(usize, i32)> = descendants(elasticrun_pid)
                .into_iter()
                .filter_map(|p| Some((env_of(p, "ELASTICRUN_SLOT")?.parse().ok()?, p)))
                .collect();
            by_slot.sort_unstable();
            by_slot.dedup_by_key(|(s, _)| *s);
            (by_slot.len() == n).then(|| by_slot.into_iter().map(|(_, p)| p).collect())
        },
    )
}
