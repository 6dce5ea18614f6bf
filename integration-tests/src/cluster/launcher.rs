//! The cluster's launcher: starts simulated workers as tasks and hands the
//! driver handles that behave like processes (exit statuses, SIGTERM and
//! SIGKILL). Unlike the process launcher it can adopt a worker another
//! coordinator started: the workers outlive a coordinator that crashes.

use std::process::ExitStatus;

use coordinator::launch::process::describe;
use coordinator::launch::{LaunchError, Launcher, Started};
use elastic::SlotId;
use futures::FutureExt;
use futures::future::BoxFuture;

use super::worker::{self, Ctx};
use super::{Cluster, Entry, Event, Exit};

#[derive(Debug)]
pub(super) struct SimLauncher {
    cluster: Cluster,
}

impl SimLauncher {
    pub(super) fn new(cluster: Cluster) -> Self {
        Self { cluster }
    }
}

impl Launcher for SimLauncher {
    fn start<'a>(
        &'a mut self,
        _label: usize,
        slot: &'a SlotId,
    ) -> BoxFuture<'a, Result<Box<dyn Started>, LaunchError>> {
        let cluster = self.cluster.clone();
        let (pid, start_delay) = {
            let mut state = cluster.state();
            state.next_pid += 1;
            let pid = state.next_pid;
            let entry = Entry {
                slot: slot.clone(),
                status: None,
                task: None,
            };
            state.workers.insert(pid, entry);
            let delay = state.slow_starts.remove(slot).unwrap_or_default();
            (pid, delay)
        };
        cluster.record(Event::Started {
            pid,
            slot: slot.clone(),
        });
        let ctx = Ctx {
            pid,
            slot: slot.clone(),
            cluster: cluster.clone(),
            start_delay,
        };
        let task = tokio::spawn(async move {
            let exit = worker::run(&ctx).await;
            ctx.cluster.end(ctx.pid, exit);
        });
        if let Some(w) = cluster.state().workers.get_mut(&pid) {
            w.task = Some(task.abort_handle());
        }
        let started: Box<dyn Started> = Box::new(SimProcess { pid, cluster });
        async move { Ok(started) }.boxed()
    }

    fn adopt(&mut self, _label: usize, slot: &SlotId, pid: u32) -> Option<Box<dyn Started>> {
        let running = self
            .cluster
            .state()
            .workers
            .get(&pid)
            .is_some_and(|w| &w.slot == slot && w.status.is_none());
        running.then(|| {
            let cluster = self.cluster.clone();
            Box::new(SimProcess { pid, cluster }) as Box<dyn Started>
        })
    }

    fn finish(&mut self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }

    /// A simulated worker ended (or one ended while the driver was busy).
    fn exit_news(&mut self) -> BoxFuture<'_, ()> {
        self.cluster.inner.exits.notified().boxed()
    }
}

/// The driver's handle on a simulated worker.
#[derive(Debug)]
struct SimProcess {
    pid: u32,
    cluster: Cluster,
}

impl Started for SimProcess {
    fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        let state = self.cluster.state();
        Ok(state.workers.get(&self.pid).and_then(|w| w.status))
    }

    fn how(&self, status: ExitStatus) -> String {
        describe(status)
    }

    fn terminate(&mut self) {
        self.cluster.end(self.pid, Exit::Signal(15));
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        self.cluster.end(self.pid, Exit::Signal(9));
        async {}.boxed()
    }
}
