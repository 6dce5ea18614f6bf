//! Workers that start by themselves (pods) as the job driver sees them: the
//! slots they claimed in etcd are the job's slots ([`feed`]), and a
//! "started" worker is the pod registered on its slot ([`PodLauncher`]),
//! alive while its key is, finished when it says so, gone when its lease
//! ends. Nothing here starts or kills a process: Kubernetes does.

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use elastic::membership::SlotId;
use etcdjob::Pods;
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::job::discovery::HostFeed;
use crate::launch::{LaunchError, Launcher, Started};

/// How long a slot the driver heard of first from a registration may wait
/// for its key to show in etcd before the worker counts as gone.
const KEY_GRACE: Duration = Duration::from_secs(10);

/// How long a pod's registration on a slot not offered yet waits for its
/// key to reach the pods' watch.
const EARLY_REGISTRATION_WAIT: Duration = Duration::from_secs(10);

/// The raw wait status of a pod whose lease ended (as if killed by SIGKILL).
const GONE: i32 = 9;

/// Workers the driver has given up on (failed, stopped) while their key
/// lingers until their lease ends: `(node, slot, pod incarnation)`. Their
/// slot is not offered again until a new incarnation holds it.
pub(crate) type Dead = Arc<Mutex<BTreeSet<(String, u32, String)>>>;

/// How often the feed looks at `Dead` besides the watch's changes.
const FEED_POLL: Duration = Duration::from_millis(20);

/// The slots offered to the job: every worker key not marked leaving and
/// not given up on, in key order.
pub(crate) fn offered(pods: &Pods, dead: &Dead) -> Vec<SlotId> {
    let dead = dead.lock().unwrap_or_else(PoisonError::into_inner);
    pods.iter()
        .filter(|((node, slot), r)| {
            !r.leaving && !dead.contains(&(node.clone(), *slot, r.uid.clone()))
        })
        .map(|((node, slot), _)| SlotId::new(node.clone(), *slot))
        .collect()
}

/// A host feed of the slots offered, from the workers' watch.
pub(crate) fn feed(mut pods: watch::Receiver<Option<Pods>>, dead: Dead) -> HostFeed {
    let (tx, rx) = mpsc::channel(4);
    let task = tokio::spawn(async move {
        let mut last = None;
        loop {
            let now = pods.borrow_and_update().as_ref().map(|p| offered(p, &dead));
            if let Some(slots) = now
                && last.as_ref() != Some(&slots)
            {
                if tx.send(slots.clone()).await.is_err() {
                    return;
                }
                last = Some(slots);
            }
            tokio::select! {
                changed = pods.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(FEED_POLL) => {}
            }
        }
    });
    HostFeed::slots(rx, task)
}

/// The "launcher" of a job whose workers start by themselves.
#[derive(Debug)]
pub(crate) struct PodLauncher {
    pub(crate) pods: watch::Receiver<Option<Pods>>,
    pub(crate) dead: Dead,
}

impl Launcher for PodLauncher {
    fn start<'a>(
        &'a mut self,
        _label: usize,
        slot: &'a SlotId,
    ) -> BoxFuture<'a, Result<Box<dyn Started>, LaunchError>> {
        let handle: Box<dyn Started> = Box::new(Pod::new(self, slot));
        async move { Ok(handle) }.boxed()
    }

    fn adopt(&mut self, _label: usize, slot: &SlotId, _pid: u32) -> Option<Box<dyn Started>> {
        Some(Box::new(Pod::new(self, slot)))
    }

    fn finish(&mut self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }

    fn self_started(&self) -> bool {
        true
    }

    /// A pod's key in etcd may reach the pods' watch after the pod
    /// registers.
    fn early_registration_wait(&self) -> Option<Duration> {
        Some(EARLY_REGISTRATION_WAIT)
    }

    /// A pod's exit status is its key vanishing (a lease later): no use
    /// waiting for it.
    fn exit_grace(&self, _finished: bool) -> Duration {
        Duration::ZERO
    }

    fn known_pid(&self, slot: &SlotId) -> Option<u32> {
        let pods = self.pods.borrow();
        let id = (slot.host.clone(), slot.slot);
        pods.as_ref()?.get(&id).map(|r| r.pid)
    }

    /// A change of the workers' keys: a pod's end is its key finished or
    /// gone.
    fn exit_news(&mut self) -> BoxFuture<'_, ()> {
        async move {
            if self.pods.changed().await.is_err() {
                // The watch ended (the job is ending): poll what is left.
                tokio::time::sleep(crate::launch::EXIT_POLL).await;
            }
        }
        .boxed()
    }
}

/// The worker registered on one slot, seen through its key.
#[derive(Debug)]
struct Pod {
    pods: watch::Receiver<Option<Pods>>,
    dead: Dead,
    id: (String, u32),
    since: Instant,
    seen: bool,
}

impl Pod {
    fn new(launcher: &PodLauncher, slot: &SlotId) -> Self {
        Pod {
            pods: launcher.pods.clone(),
            dead: launcher.dead.clone(),
            id: (slot.host.clone(), slot.slot),
            since: Instant::now(),
            seen: false,
        }
    }
}

impl Started for Pod {
    fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        let record = self
            .pods
            .borrow()
            .as_ref()
            .and_then(|p| p.get(&self.id).cloned());
        match record {
            Some(r) if r.finished => Ok(Some(ExitStatus::from_raw(0))),
            Some(_) => {
                self.seen = true;
                Ok(None)
            }
            None if self.seen || self.since.elapsed() > KEY_GRACE => {
                Ok(Some(ExitStatus::from_raw(GONE)))
            }
            None => Ok(None),
        }
    }

    /// A pod not seen yet counts as gone once [`KEY_GRACE`] has passed.
    fn check_by(&self) -> Option<Instant> {
        (!self.seen).then(|| self.since + KEY_GRACE)
    }

    fn how(&self, status: ExitStatus) -> String {
        if status.success() {
            "finished".to_owned()
        } else {
            "is gone: its etcd lease ended (the pod was deleted, killed or cut off)".to_owned()
        }
    }

    /// A pod is stopped by telling it (`Stop`), which the driver does; here
    /// its incarnation is given up on, so that its slot is not offered
    /// again while its key lingers.
    fn terminate(&mut self) {
        let uid = self
            .pods
            .borrow()
            .as_ref()
            .and_then(|p| p.get(&self.id).map(|r| r.uid.clone()));
        if let Some(uid) = uid {
            let mut dead = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
            dead.insert((self.id.0.clone(), self.id.1, uid));
        }
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }
}
