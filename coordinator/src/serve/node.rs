//! etcd mode on one node: `elasticrun COMMAND` in a pod whose environment
//! names etcd (`ELASTICRUN_ETCD`, `ELASTICRUN_JOB`, `ELASTICRUN_SECRET_FILE`),
//! as Kubeflow Trainer runs torchrun on each node. It starts
//! `--nproc-per-node` copies of COMMAND (torchrun's `PET_NPROC_PER_NODE`),
//! each a worker that joins through etcd by itself with an incarnation of
//! its own, and, on nodes 0 and 1 (`PET_NODE_RANK`; every node where it is
//! not set), an `elasticrun serve` replica with the same options, so that
//! the job's coordinator lives in its pods and fails over between them.
//!
//! A pod is one unit, as Kubernetes sees it: when one of its workers fails,
//! its other workers are killed (as a container's processes are when it
//! restarts; the job has reset to its last commit, which every other rank
//! holds) and the pod ends with the failure's code, for its restart policy
//! to start it again; it rejoins. SIGTERM to the pod (deleted, scaled down)
//! is passed to every child: the workers leave at their next commit. When
//! every worker has finished, the replica is given [`REPLICA_GRACE`] to see
//! the job over and end by itself.
//!
//! ```text
//!  elasticrun COMMAND ──► elasticrun serve OPTIONS (nodes 0, 1) ──► etcd election
//!                     └─► COMMAND x nproc-per-node ──► etcd ──► the leader
//! ```

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::config::JobConfig;
use crate::job::Say;

/// How long the replica may take to end by itself once the pod's workers
/// have finished: the leader records the job as done, a standby sees it.
pub const REPLICA_GRACE: Duration = Duration::from_secs(20);

/// How long children told to leave get before they are killed.
pub const STOP_GRACE: Duration = Duration::from_secs(60);

/// Who a child is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Member {
    Worker(usize),
    Replica,
}

/// What the pod does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Wait,
    /// Tell every child still running to leave (SIGTERM).
    LeaveAll,
    /// Kill the workers still running (SIGKILL); the replica resigns
    /// (SIGTERM).
    KillAll,
    /// Every worker has ended: give the replica [`REPLICA_GRACE`], then
    /// end with this code.
    Finish(u8),
}

/// The pod's children as they end: a pure core the driver feeds.
#[derive(Debug)]
pub struct PodState {
    workers_left: usize,
    replica_running: bool,
    /// The first failure's exit code.
    failed: Option<u8>,
    stopping: bool,
}

impl PodState {
    pub fn new(workers: usize, replica: bool) -> PodState {
        PodState {
            workers_left: workers,
            replica_running: replica,
            failed: None,
            stopping: false,
        }
    }

    /// `who` ended with `code` (128 + the signal for one killed).
    pub fn ended(&mut self, who: Member, code: u8) -> Action {
        match who {
            Member::Replica => {
                self.replica_running = false;
                if code != 0 && self.workers_left > 0 && !self.stopping {
                    return self.fail(code);
                }
            }
            Member::Worker(_) => {
                self.workers_left = self.workers_left.saturating_sub(1);
                if code != 0 && !self.stopping {
                    return self.fail(code);
                }
                if code != 0 {
                    self.failed.get_or_insert(code);
                }
            }
        }
        self.finish_or_wait()
    }

    /// SIGTERM or SIGINT: every child leaves.
    pub fn signalled(&mut self) -> Action {
        self.stopping = true;
        Action::LeaveAll
    }

    pub fn replica_running(&self) -> bool {
        self.replica_running
    }

    fn fail(&mut self, code: u8) -> Action {
        self.failed.get_or_insert(code);
        self.stopping = true;
        match self.workers_left {
            0 => self.finish_or_wait(),
            _ => Action::KillAll,
        }
    }

    fn finish_or_wait(&self) -> Action {
        match self.workers_left {
            0 => Action::Finish(self.failed.unwrap_or(0)),
            _ => Action::Wait,
        }
    }
}

/// Why the pod could not run.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot start {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("cannot watch for SIGTERM: {0}")]
    Signals(std::io::Error),
}

/// The exit code of `status`: its own, or 128 + the signal that ended it.
fn code(status: std::io::Result<ExitStatus>) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => u8::try_from(c).unwrap_or(1),
            (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
            (None, None) => 1,
        },
        Err(_) => 1,
    }
}

/// This pod's incarnation as its workers' keys name it: the pod's
/// `POD_UID` (else its name, else the host's), this start and the worker.
fn incarnation(env: &dyn Fn(&str) -> Option<String>, started_ms: u128, i: usize) -> String {
    let base = env("POD_UID")
        .or_else(|| env("POD_NAME"))
        .or_else(|| nix::unistd::gethostname().ok()?.into_string().ok())
        .unwrap_or_else(|| "pod".into());
    format!("{base}.{started_ms}.{i}")
}

/// Runs this node's share of the job: `options` are the words before the
/// command, given to the replica as they were given here; what it has to
/// say goes to `say`. Returns the pod's exit code.
pub async fn run(cfg: JobConfig, options: Vec<OsString>, say: &Say) -> Result<u8, NodeError> {
    let replica = cfg.torchrun.as_ref().is_none_or(|t| t.runs_replica());
    let workers = cfg.nproc_per_node;
    let with = if replica {
        ", and a coordinator replica"
    } else {
        ""
    };
    say.line(format_args!(
        "etcd mode on this node: {workers} worker(s){with}"
    ));
    let (tx, mut ended) = mpsc::unbounded_channel();
    let mut pids = Vec::new();
    if replica {
        let exe = std::env::current_exe().map_err(|source| NodeError::Spawn {
            what: "elasticrun serve".into(),
            source,
        })?;
        let mut serve = Command::new(exe);
        serve.arg("serve").args(&options);
        pids.push(spawn(serve, Member::Replica, "elasticrun serve", &tx)?);
    }
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    for i in 0..workers {
        let mut worker = Command::new(&cfg.command[0]);
        worker.args(&cfg.command[1..]);
        worker.env("POD_UID", incarnation(&env, started_ms, i));
        let what = format!("worker {i}: {}", cfg.command[0].to_string_lossy());
        pids.push(spawn(worker, Member::Worker(i), &what, &tx)?);
    }
    drop(tx);
    drive(PodState::new(workers, replica), &mut ended, pids, say).await
}

/// Starts `cmd` as `who`; its end is sent on `tx`. Returns its pid.
fn spawn(
    mut cmd: Command,
    who: Member,
    what: &str,
    tx: &mpsc::UnboundedSender<(Member, u8)>,
) -> Result<(Member, u32), NodeError> {
    cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let mut child: Child = cmd.spawn().map_err(|source| NodeError::Spawn {
        what: what.to_owned(),
        source,
    })?;
    let pid = child.id().unwrap_or(0);
    let tx = tx.clone();
    tokio::spawn(async move {
        let status = child.wait().await;
        let _ = tx.send((who, code(status)));
    });
    Ok((who, pid))
}

/// Feeds the pod's core its children's ends and SIGTERM, and carries out
/// what it decides. `alive` are the children not seen to end yet: only they
/// are signalled (an ended one's pid may be another process's by then).
async fn drive(
    mut pod: PodState,
    ended: &mut mpsc::UnboundedReceiver<(Member, u8)>,
    mut alive: Vec<(Member, u32)>,
    say: &Say,
) -> Result<u8, NodeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(NodeError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(NodeError::Signals)?;
    let mut stop_deadline: Option<tokio::time::Instant> = None;
    loop {
        let action = tokio::select! {
            e = ended.recv() => match e {
                Some((who, code)) => {
                    if code != 0 {
                        say.line(format_args!("{} of this pod ended with exit code {code}", name(who)));
                    }
                    alive.retain(|(w, _)| *w != who);
                    pod.ended(who, code)
                }
                None => Action::Finish(1),
            },
            _ = term.recv() => pod.signalled(),
            _ = int.recv() => pod.signalled(),
            _ = sleep_until(stop_deadline) => {
                signal_all(&alive, |_| Signal::SIGKILL);
                stop_deadline = None;
                Action::Wait
            }
        };
        match action {
            Action::Wait => {}
            Action::LeaveAll => {
                signal_all(&alive, |_| Signal::SIGTERM);
                stop_deadline.get_or_insert(tokio::time::Instant::now() + STOP_GRACE);
            }
            Action::KillAll => {
                signal_all(&alive, |who| match who {
                    Member::Worker(_) => Signal::SIGKILL,
                    Member::Replica => Signal::SIGTERM,
                });
                stop_deadline.get_or_insert(tokio::time::Instant::now() + STOP_GRACE);
            }
            Action::Finish(code) => return Ok(finish(pod, ended, &alive, code).await),
        }
    }
}

/// Every worker has ended: the replica (in `alive` if it has not ended)
/// ends by itself within [`REPLICA_GRACE`] (the job over) or is told to.
async fn finish(
    mut pod: PodState,
    ended: &mut mpsc::UnboundedReceiver<(Member, u8)>,
    alive: &[(Member, u32)],
    code: u8,
) -> u8 {
    let replica = alive.iter().filter(|(w, _)| *w == Member::Replica);
    for step in [None, Some(Signal::SIGTERM)] {
        if !pod.replica_running() {
            break;
        }
        if let Some(sig) = step {
            for (_, pid) in replica.clone() {
                send(*pid, sig);
            }
        }
        let wait = if step.is_none() {
            REPLICA_GRACE
        } else {
            STOP_GRACE
        };
        if let Ok(Some((who, c))) = tokio::time::timeout(wait, ended.recv()).await {
            pod.ended(who, c);
        }
    }
    code
}

fn name(who: Member) -> String {
    match who {
        Member::Worker(i) => format!("worker {i}"),
        Member::Replica => "the coordinator replica".into(),
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Signals every child, each with the signal `sig` says for it.
fn signal_all(pids: &[(Member, u32)], sig: impl Fn(Member) -> Signal) {
    for (who, pid) in pids {
        send(*pid, sig(*who));
    }
}

/// Signals one child; one that has ended already is no error.
fn send(pid: u32, sig: Signal) {
    if let Ok(pid) = i32::try_from(pid)
        && pid > 0
    {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_finishing_ends_the_pod_cleanly() {
        let mut pod = PodState::new(2, true);
        assert_eq!(pod.ended(Member::Worker(0), 0), Action::Wait);
        assert_eq!(pod.ended(Member::Worker(1), 0), Action::Finish(0));
        assert!(pod.replica_running(), "the replica gets its grace");
    }

    #[test]
    fn a_failed_worker_stops_the_others_and_ends_the_pod_with_its_code() {
        let mut pod = PodState::new(3, true);
        assert_eq!(pod.ended(Member::Worker(1), 137), Action::KillAll);
        assert_eq!(pod.ended(Member::Worker(0), 0), Action::Wait);
        assert_eq!(pod.ended(Member::Replica, 0), Action::Wait);
        assert_eq!(pod.ended(Member::Worker(2), 143), Action::Finish(137));
    }

    #[test]
    fn a_replica_that_fails_while_workers_train_ends_the_pod() {
        let mut pod = PodState::new(1, true);
        assert_eq!(pod.ended(Member::Replica, 2), Action::KillAll);
        assert_eq!(pod.ended(Member::Worker(0), 0), Action::Finish(2));
        // One that ends cleanly (it resigned, the job is over) does not.
        let mut pod = PodState::new(1, true);
        assert_eq!(pod.ended(Member::Replica, 0), Action::Wait);
        assert_eq!(pod.ended(Member::Worker(0), 0), Action::Finish(0));
    }

    #[test]
    fn sigterm_lets_every_worker_leave_and_ends_cleanly_if_they_did() {
        let mut pod = PodState::new(2, false);
        assert_eq!(pod.signalled(), Action::LeaveAll);
        assert_eq!(pod.ended(Member::Worker(0), 0), Action::Wait);
        assert_eq!(pod.ended(Member::Worker(1), 0), Action::Finish(0));
        let mut pod = PodState::new(2, false);
        pod.signalled();
        pod.ended(Member::Worker(0), 1);
        assert_eq!(pod.ended(Member::Worker(1), 0), Action::Finish(1));
    }

    #[test]
    fn each_worker_of_each_start_is_an_incarnation_of_its_own() {
        let env = |k: &str| (k == "POD_UID").then(|| "6f1c".to_owned());
        assert_eq!(incarnation(&env, 7, 0), "6f1c.7.0");
        assert_ne!(incarnation(&env, 7, 1), incarnation(&env, 7, 0));
        assert_ne!(incarnation(&env, 8, 0), incarnation(&env, 7, 0));
        let named = |k: &str| (k == "POD_NAME").then(|| "train-0".to_owned());
        assert_eq!(incarnation(&named, 7, 0), "train-0.7.0");
    }
}
