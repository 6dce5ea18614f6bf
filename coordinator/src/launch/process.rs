//! Worker processes on this machine: each in its own process group, so that
//! stopping a worker reaches whatever it started too.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

/// A started worker.
#[derive(Debug)]
pub struct WorkerProcess {
    pub rank: usize,
    pub host: String,
    child: Child,
    pgid: Option<Pid>,
    pub status: Option<ExitStatus>,
}

#[derive(Debug)]
pub struct Pipes {
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
}

/// Starts `command` as `rank`, with `env` added to elasticrun's environment.
pub fn spawn(
    command: &[String],
    rank: usize,
    host: &str,
    env: &[(String, String)],
) -> std::io::Result<(WorkerProcess, Pipes)> {
    let (program, args) = command.split_first().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command to run")
    })?;
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
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
    let p = WorkerProcess {
        rank,
        host: host.to_owned(),
        child,
        pgid,
        status: None,
    };
    Ok((p, Pipes { stdout, stderr }))
}

impl WorkerProcess {
    /// Records the exit status if the process has ended.
    pub fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.pgid {
            // The group may already be gone; that is the goal.
            let _ = killpg(pgid, sig);
        }
    }
}

/// Asks every running worker to stop (SIGTERM to its process group), then
/// SIGKILLs what is left after `grace`. Returns when every worker is reaped.
pub async fn stop_all(workers: &mut [WorkerProcess], grace: Duration) {
    for w in workers.iter_mut() {
        if matches!(w.poll(), Ok(None)) {
            w.signal(Signal::SIGTERM);
        }
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline
        && workers.iter_mut().any(|w| matches!(w.poll(), Ok(None)))
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for w in workers.iter_mut() {
        // SIGKILL the group even if the leader exited: its children may live on.
        w.signal(Signal::SIGKILL);
        if w.status.is_none() {
            w.status = w.child.wait().await.ok();
        }
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
