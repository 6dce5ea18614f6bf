//! The launcher seam: how the job driver starts a worker and watches it.
//!
//! ```text
//!  driver ──start(label, slot)──► Launcher ──► Box<dyn Started>: poll / how / terminate / kill
//!         ──adopt(label, slot, pid)──► (a worker another coordinator started; rarely possible)
//!         ──exit_news()──► resolves when a worker may have ended: the driver polls them then
//!         ──finish()──► output forwarding done
//! ```
//!
//! [`ProcessLauncher`](super::start::ProcessLauncher) starts processes, on this
//! machine or through ssh, with their output forwarded; an in-process cluster
//! (the integration tests) starts tasks. Both are object-safe (a job picks its
//! launcher at run time); starting a worker is rare, so boxed futures cost
//! nothing that matters.

use std::process::ExitStatus;
use std::time::Duration;

use elastic::hosts::HostSlots;
use elastic::membership::SlotId;
use futures::future::BoxFuture;

use super::address::AddressError;

/// Why a worker could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The address the worker is told to dial could not be found.
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Start(#[from] StartError),
}

#[derive(Debug, thiserror::Error)]
#[error("cannot start rank {rank} on {host} ({program}): {why}")]
pub struct StartError {
    pub rank: usize,
    pub host: String,
    pub program: String,
    pub why: String,
}

/// Starts a job's workers.
pub trait Launcher: Send + std::fmt::Debug {
    /// Starts a worker on `slot`; `label` is the number its output lines
    /// carry (its rank in a static job, its worker id in an elastic one).
    fn start<'a>(
        &'a mut self,
        label: usize,
        slot: &'a SlotId,
    ) -> BoxFuture<'a, Result<Box<dyn Started>, LaunchError>>;

    /// Takes over the worker that registered on `slot` from process `pid`
    /// though this launcher did not start it: a worker of the coordinator
    /// this one took the job over from. `None` (the default): this launcher
    /// supervises only what it started, and the registration is refused.
    fn adopt(&mut self, label: usize, slot: &SlotId, pid: u32) -> Option<Box<dyn Started>> {
        let _ = (label, slot, pid);
        None
    }

    /// The hosts and slots an elastic job's discovery has just given (the
    /// whole list, each time it changes); the default ignores them.
    fn hosts_discovered(&mut self, hosts: &[HostSlots]) {
        let _ = hosts;
    }

    /// Waits for what the launcher does besides running workers (forwarding
    /// their output) to end; called once every worker has stopped.
    fn finish(&mut self) -> BoxFuture<'_, ()>;

    /// Whether the workers start by themselves (pods, `elasticrun serve`)
    /// and this launcher only watches them: only telling them stops them,
    /// they outlive this coordinator (the next leader takes them over), and
    /// the addresses they publish are the ones they listen on.
    fn self_started(&self) -> bool {
        false
    }

    /// The job is failing: every worker is about to be stopped. A static
    /// job's launcher notes when, to time its restart (`--max-restarts`).
    fn job_failing(&mut self) {}

    /// How long a registration on a slot that was not offered yet waits for
    /// it (a pod's etcd key may reach the coordinator after the pod does);
    /// `None` (the default): such a registration is refused at once.
    fn early_registration_wait(&self) -> Option<Duration> {
        None
    }

    /// How long a worker whose control connection closed is given for its
    /// exit status to come before the closing counts as its end; `finished`:
    /// it said it ended its training cleanly.
    fn exit_grace(&self, finished: bool) -> Duration {
        if finished {
            // Its exit status, when it comes, says whether its end went
            // well too.
            FINISHED_EXIT_GRACE
        } else {
            EXIT_GRACE
        }
    }

    /// The process id of the self-started worker on `slot`, as it registered
    /// it (a pod's key); `None` where the launcher does not know.
    fn known_pid(&self, slot: &SlotId) -> Option<u32> {
        let _ = slot;
        None
    }

    /// Resolves when a worker it started may have ended, so that the driver
    /// polls them ([`Started::poll`]) then and sleeps otherwise; news that
    /// came while nobody waited resolves the next call at once. The default,
    /// for a launcher that cannot tell, resolves every [`EXIT_POLL`].
    fn exit_news(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(EXIT_POLL))
    }

    /// How often the driver looks at every worker's exit whatever else
    /// comes. A launcher whose [`Launcher::exit_news`] tells of every exit
    /// says [`EXIT_SWEEP`]: the look is then only a net for news lost, and
    /// a pass over 10,000 workers every [`EXIT_POLL`] was a quarter of the
    /// driver's time in a reset. The default: every [`EXIT_POLL`].
    fn exit_sweep(&self) -> Duration {
        EXIT_POLL
    }
}

/// How long a closed control connection waits for its process's exit status
/// (a better description of the failure) before counting as the failure.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long a worker that said it finished and closed its control
/// connection gets to exit before it counts as finished: a process still
/// tearing down (an interpreter unloading its libraries) may yet exit
/// non-zero, and that is a failure.
const FINISHED_EXIT_GRACE: Duration = Duration::from_secs(10);

/// How often the driver polls the workers of a launcher that cannot say
/// when one has ended.
pub const EXIT_POLL: Duration = Duration::from_millis(20);

/// How often the driver looks at every worker of a launcher that tells of
/// each exit, in case news was lost.
pub const EXIT_SWEEP: Duration = Duration::from_secs(1);

/// A started worker, as its launcher sees it.
pub trait Started: Send + std::fmt::Debug {
    /// Its exit status once it has ended.
    fn poll(&mut self) -> std::io::Result<Option<ExitStatus>>;

    /// How it ended: "exited with code 3", "was killed by signal 9
    /// (SIGKILL)", or what a remote launch's status means.
    fn how(&self, status: ExitStatus) -> String;

    /// Whether `status` says it was killed by a signal (a remote worker's
    /// status comes through ssh as 128 + the signal).
    fn killed(&self, status: ExitStatus) -> bool {
        std::os::unix::process::ExitStatusExt::signal(&status).is_some()
    }

    /// Whether it ended because its host is gone (srun said the node under
    /// its step failed): the host is left out until discovery lists it
    /// again.
    fn host_lost(&self) -> bool {
        false
    }

    /// When [`Started::poll`] may change its answer with no news from the
    /// launcher ([`Launcher::exit_news`]): a worker that counts as gone once
    /// it has not shown up for a while. `None` (the default): never.
    fn check_by(&self) -> Option<tokio::time::Instant> {
        None
    }

    /// Passes `sig` on to it (its process group; through srun to a Slurm
    /// step's processes). Whether it could: a worker over ssh cannot be
    /// signalled.
    fn pass_on(&mut self, sig: nix::sys::signal::Signal) -> bool {
        let _ = sig;
        false
    }

    /// Asks it to stop (SIGTERM to a process).
    fn terminate(&mut self);

    /// Ends it for good (SIGKILL to its process group, even if the leader has
    /// exited: its children may live on) and waits until it is reaped.
    fn kill(&mut self) -> BoxFuture<'_, ()>;
}

/// How often [`stop_all`] looks whether the workers have exited.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Asks every running worker to stop, then kills what is left after `grace`.
/// Returns when every worker is reaped.
pub async fn stop_all(workers: &mut [Box<dyn Started>], grace: Duration) {
    for w in workers.iter_mut() {
        if matches!(w.poll(), Ok(None)) {
            w.terminate();
        }
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline
        && workers.iter_mut().any(|w| matches!(w.poll(), Ok(None)))
    {
        tokio::time::sleep(STOP_POLL).await;
    }
    for w in workers.iter_mut() {
        w.kill().await;
    }
}
