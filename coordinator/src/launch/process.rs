//! Worker processes on this machine: each in its own process group, so that
//! stopping a worker reaches whatever it started too. A [`WorkerProcess`] is
//! the [`Started`] handle of the process launcher.

use std::process::{ExitStatus, Stdio};

use futures::FutureExt;
use futures::future::BoxFuture;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use super::launcher::Started;

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
}

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
    pub argv: &'a [String],
    /// Added to elasticrun's environment.
    pub env: &'a [(String, String)],
    /// Text written to standard input, which then stays open (remote
    /// workers: the secret and the environment); `None` gives the worker no
    /// standard input.
    pub stdin_line: Option<String>,
}

/// Starts a worker in a process group of its own.
pub async fn spawn(spec: Spec<'_>) -> std::io::Result<(WorkerProcess, Pipes)> {
    let (program, args) = spec.argv.split_first().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command to run")
    })?;
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
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(std::io::Error::other("worker has no output pipes"));
    };
    let mut stdin = child.stdin.take();
    if let (Some(pipe), Some(line)) = (stdin.as_mut(), spec.stdin_line) {
        // ssh reads it at once; a large environment waits for it here.
        pipe.write_all(line.as_bytes()).await?;
        pipe.flush().await?;
    }
    let p = WorkerProcess {
        rank: spec.rank,
        host: spec.host.to_owned(),
        child,
        pgid,
        stdin,
        remote,
        status: None,
    };
    Ok((p, Pipes { stdout, stderr }))
}

impl WorkerProcess {
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
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// "exited with code 3", "was killed by signal 9 (SIGKILL)", or for a
    /// remote worker what ssh's exit code says.
    fn how(&self, status: ExitStatus) -> String {
        match (self.remote, status.code()) {
            (true, Some(code)) => super::ssh::describe_code(code),
            _ => describe(status),
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
