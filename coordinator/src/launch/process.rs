//! Worker processes on this machine: each in its own process group, so that
//! stopping a worker reaches whatever it started too. A [`WorkerProcess`] is
//! the [`Started`] handle of the process launcher.

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::launcher::Started;
use super::srun::StepWatch;

/// A started worker.
#[derive(Debug)]
pub struct WorkerProcess {
    pub rank: usize,
    pub host: String,
    child: Child,
    pgid: Option<Pid>,
    /// Open for a worker started over ssh: closing it stops the worker.
    stdin: Option<ChildStdin>,
    remote: bool,
    pub status: Option<ExitStatus>,
    /// A Slurm step's: whether srun said its node failed.
    step: Option<Arc<StepWatch>>,
    /// When srun was seen to exit 0 while its stderr was still being read.
    exit_pending: Option<tokio::time::Instant>,
}

/// How long srun's exit 0 waits for its stderr to be read to the end (where
/// a node failure would be said) before it counts as the task's success.
const STEP_SETTLE: Duration = Duration::from_secs(1);
/// How soon an exit held for [`STEP_SETTLE`] is looked at again.
const STEP_RECHECK: Duration = Duration::from_millis(10);
/// The status of a step whose node failed (srun's own exit 0 says nothing).
const NODE_LOST_CODE: i32 = 1;

#[derive(Debug)]
pub struct Pipes {
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// How to start one worker.
#[derive(Debug)]
pub struct Spec<'a> {
    pub rank: usize,
    pub host: &'a str,
    /// The program and its arguments (for a remote worker, the ssh command).
    pub argv: &'a [std::ffi::OsString],
    /// Added to elasticrun's environment.
    pub env: &'a [(String, String)],
    /// Text written to standard input, which then stays open (remote
    /// workers: the secret and the environment); `None` gives the worker no
    /// standard input.
    pub stdin_line: Option<String>,
    /// A Slurm step's watch on srun's stderr.
    pub step: Option<Arc<StepWatch>>,
}

/// How long ssh that would not take its standard input gets to exit and
/// say why.
const SSH_EXIT_GRACE: Duration = Duration::from_secs(5);
/// Most bytes of ssh's own stderr kept for the error.
const SSH_STDERR: u64 = 4096;

/// Why a worker could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("no command to run")]
    NoCommand,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// ssh ended before it took the secret and the environment (the host is
    /// down, the key refused): its exit status and what it said.
    #[error("ssh exited with {status}{}", said(stderr))]
    SshEnded { status: String, stderr: String },
}

fn said(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

/// Starts a worker in a process group of its own.
pub async fn spawn(spec: Spec<'_>) -> Result<(WorkerProcess, Pipes), SpawnError> {
    let (program, args) = spec.argv.split_first().ok_or(SpawnError::NoCommand)?;
    let remote = spec.stdin_line.is_some();
    let mut child = Command::new(program)
        .args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if remote {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("worker has no output pipes").into());
    };
    let mut stdin = child.stdin.take();
    if let (Some(pipe), Some(line)) = (stdin.as_mut(), spec.stdin_line) {
        // ssh reads it at once; a large environment waits for it here. A
        // write that fails means ssh has gone: what it said says why.
        let written = async {
            pipe.write_all(line.as_bytes()).await?;
            pipe.flush().await
        };
        if written.await.is_err() {
            return Err(ssh_ended(&mut child, &mut stderr).await);
        }
    }
    let p = WorkerProcess::new(spec.rank, spec.host, child, stdin, spec.step);
    Ok((p, Pipes { stdout, stderr }))
}

/// A worker that runs in `child`, a process already started in a group of
/// its own with its output piped (a Python process started ahead,
/// [`super::warm`]).
pub fn started(
    rank: usize,
    host: &str,
    mut child: Child,
) -> Result<(WorkerProcess, Pipes), SpawnError> {
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("worker has no output pipes").into());
    };
    let p = WorkerProcess::new(rank, host, child, None, None);
    Ok((p, Pipes { stdout, stderr }))
}

/// Why ssh went away before it took its standard input: its exit status
/// and the start of its stderr (it is killed if it has not exited within
/// [`SSH_EXIT_GRACE`]).
async fn ssh_ended(child: &mut Child, stderr: &mut ChildStderr) -> SpawnError {
    let mut said = Vec::new();
    let mut head = (&mut *stderr).take(SSH_STDERR);
    let _ = tokio::time::timeout(SSH_EXIT_GRACE, head.read_to_end(&mut said)).await;
    let status = match tokio::time::timeout(SSH_EXIT_GRACE, child.wait()).await {
        Ok(Ok(st)) => exit_status(st),
        Ok(Err(e)) => format!("an unknown status ({e})"),
        Err(_) => {
            let _ = child.kill().await;
            format!("no exit within {SSH_EXIT_GRACE:?} (killed)")
        }
    };
    let text = String::from_utf8_lossy(&said);
    let stderr = text.lines().map(str::trim).filter(|l| !l.is_empty());
    SpawnError::SshEnded {
        status,
        stderr: stderr.collect::<Vec<_>>().join("; "),
    }
}

/// "status 255", "signal 9 (SIGKILL)".
fn exit_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(s)) => match Signal::try_from(s) {
            Ok(sig) => format!("signal {s} ({sig})"),
            Err(_) => format!("signal {s}"),
        },
        _ => "an unknown status".to_owned(),
    }
}

impl WorkerProcess {
    /// The worker running as `child`, the leader of its process group;
    /// `stdin` is open for one started over ssh (a remote worker), which
    /// closing it stops.
    fn new(
        rank: usize,
        host: &str,
        child: Child,
        stdin: Option<ChildStdin>,
        step: Option<Arc<StepWatch>>,
    ) -> WorkerProcess {
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        WorkerProcess {
            rank,
            host: host.to_owned(),
            child,
            pgid,
            remote: stdin.is_some(),
            stdin,
            status: None,
            step,
            exit_pending: None,
        }
    }

    /// Its process group (a local worker's, or the ssh carrying a remote
    /// one), which its children share unless they left it.
    pub fn group(&self) -> Option<Pid> {
        self.pgid
    }

    fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.pgid {
            // The group may already be gone; that is the goal.
            let _ = killpg(pgid, sig);
        }
    }
}

impl Started for WorkerProcess {
    /// Records the exit status if the process has ended.
    fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_some() {
            return Ok(self.status);
        }
        let Some(st) = self.child.try_wait()? else {
            return Ok(None);
        };
        self.status = match &self.step {
            Some(w) if st.success() => {
                let now = tokio::time::Instant::now();
                let since = *self.exit_pending.get_or_insert(now);
                if !w.ended() && now.duration_since(since) < STEP_SETTLE {
                    return Ok(None);
                }
                let lost = std::os::unix::process::ExitStatusExt::from_raw(NODE_LOST_CODE << 8);
                Some(if w.node_lost() { lost } else { st })
            }
            _ => Some(st),
        };
        Ok(self.status)
    }

    fn host_lost(&self) -> bool {
        self.step.as_ref().is_some_and(|w| w.node_lost())
    }

    fn check_by(&self) -> Option<tokio::time::Instant> {
        self.exit_pending
            .filter(|_| self.status.is_none())
            .map(|_| tokio::time::Instant::now() + STEP_RECHECK)
    }

    /// "exited with code 3", "was killed by signal 9 (SIGKILL)", or for a
    /// remote worker what ssh's exit code says.
    fn how(&self, status: ExitStatus) -> String {
        if self.step.as_ref().is_some_and(|w| w.node_lost()) {
            return "lost its node (srun: node failure)".to_owned();
        }
        match (self.remote, status.code()) {
            (true, Some(code)) => super::ssh::describe_code(code),
            _ => describe(status),
        }
    }

    fn killed(&self, status: ExitStatus) -> bool {
        match (self.remote, status.code()) {
            (true, Some(code)) => super::ssh::killed_code(code),
            _ => std::os::unix::process::ExitStatusExt::signal(&status).is_some(),
        }
    }

    fn pass_on(&mut self, sig: Signal) -> bool {
        match (self.remote, &self.step) {
            // srun passes it to every process of the step.
            (true, Some(_)) => self
                .child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .is_some_and(|pid| nix::sys::signal::kill(Pid::from_raw(pid), sig).is_ok()),
            (true, None) => false,
            (false, _) => {
                self.signal(sig);
                true
            }
        }
    }

    /// SIGTERM to a local worker's process group; a remote one is stopped by
    /// its host when ssh's standard input closes.
    fn terminate(&mut self) {
        if self.remote {
            self.stdin = None;
        } else {
            self.signal(Signal::SIGTERM);
        }
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        // SIGKILL the group even if the leader exited: its children may live on.
        self.signal(Signal::SIGKILL);
        async move {
            if self.status.is_none() {
                self.status = self.child.wait().await.ok();
            }
        }
        .boxed()
    }
}

/// Whether any process is left in group `pgid`.
fn group_alive(pgid: Pid) -> bool {
    killpg(pgid, None).is_ok()
}

/// Stops what is left in the process groups `groups` (children a worker
/// left running when it exited): SIGTERM, then SIGKILL for what is still
/// there after `grace`. Returns how many groups had processes left.
pub async fn stop_groups(groups: &[Pid], grace: std::time::Duration) -> usize {
    let left: Vec<Pid> = groups.iter().copied().filter(|&g| group_alive(g)).collect();
    for &g in &left {
        let _ = killpg(g, Signal::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + grace;
    while left.iter().any(|&g| group_alive(g)) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for &g in &left {
        let _ = killpg(g, Signal::SIGKILL);
    }
    left.len()
}

/// "exited with code 3", "was killed by signal 9 (SIGKILL)".
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => match Signal::try_from(s) {
            Ok(sig) => format!("was killed by signal {s} ({sig})"),
            Err(_) => format!("was killed by signal {s}"),
        },
        _ => "ended with an unknown status".to_owned(),
    }
}
