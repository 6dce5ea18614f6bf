//! Workers that start by themselves (pods) as the job driver sees them: the
//! slots they claimed in etcd are the job's slots ([`feed`]), and a
//! "started" worker is the pod registered on its slot ([`PodLauncher`]),
//! alive while its key is, finished when it says so, gone when its lease
//! ends. Nothing here starts or kills a process: Kubernetes does.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use elastic::membership::SlotId;
use etcdjob::{Pods, WorkerRecord};
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

/// How long a worker key that vanished (its lease ended) is still taken for
/// there: a worker that lived on while etcd ended its lease (etcd stalled
/// longer than the lease) claims its slot again on a new lease within it
/// (worker/src/pod.rs), and the job goes on as if nothing had happened. A
/// killed worker is not waited for: its connection's end fails it at once.
pub(crate) const RECLAIM_GRACE: Duration = Duration::from_secs(5);

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

/// The workers' keys as the job sees them: etcd's, plus each key that
/// vanished while its worker was neither leaving nor finished, for
/// [`RECLAIM_GRACE`] after it vanished or until it is back.
#[derive(Debug, Default)]
pub(crate) struct Reclaims {
    last: Pods,
    vanished: BTreeMap<(String, u32), (Instant, WorkerRecord)>,
}

impl Reclaims {
    /// The view of `raw` at `now`, and when it changes by itself next.
    pub(crate) fn view(&mut self, raw: &Pods, now: Instant) -> (Pods, Option<Instant>) {
        for (id, r) in &self.last {
            if !raw.contains_key(id) && !r.leaving && !r.finished {
                self.vanished.entry(id.clone()).or_insert((now, r.clone()));
            }
        }
        self.last = raw.clone();
        self.vanished
            .retain(|id, (at, _)| !raw.contains_key(id) && now < *at + RECLAIM_GRACE);
        let mut view = raw.clone();
        for (id, (_, r)) in &self.vanished {
            view.insert(id.clone(), r.clone());
        }
        let next = self
            .vanished
            .values()
            .map(|(at, _)| *at + RECLAIM_GRACE)
            .min();
        (view, next)
    }
}

/// [`Reclaims`]'s view of the workers' watch `raw`, kept by a task that ends
/// with `raw`.
pub(crate) fn reclaimable(mut raw: watch::Receiver<Option<Pods>>) -> watch::Receiver<Option<Pods>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let mut reclaims = Reclaims::default();
        loop {
            let now = Instant::now();
            let (view, next) = match &*raw.borrow_and_update() {
                Some(pods) => {
                    let (view, next) = reclaims.view(pods, now);
                    (Some(view), next)
                }
                None => (None, None),
            };
            tx.send_if_modified(|v| {
                let changed = *v != view;
                *v = view;
                changed
            });
            let next = next.unwrap_or(now + Duration::from_secs(3600));
            tokio::select! {
                changed = raw.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(next) => {}
            }
        }
    });
    rx
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

    /// Every pod's end changes the workers' keys.
    fn exit_sweep(&self) -> Duration {
        crate::launch::EXIT_SWEEP
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(uid: &str, leaving: bool, finished: bool) -> WorkerRecord {
        WorkerRecord {
            pod: "pod".into(),
            uid: uid.into(),
            pid: 7,
            ip: std::net::Ipv4Addr::LOCALHOST.into(),
            leaving,
            finished,
        }
    }

    fn pods(entries: &[(&str, u32, WorkerRecord)]) -> Pods {
        entries
            .iter()
            .map(|(n, s, r)| (((*n).to_owned(), *s), r.clone()))
            .collect()
    }

    #[test]
    fn a_vanished_key_stays_for_the_grace_and_goes_after_it() {
        let t0 = Instant::now();
        let mut r = Reclaims::default();
        let both = pods(&[
            ("a", 0, record("u0", false, false)),
            ("b", 0, record("u1", false, false)),
        ]);
        let (view, next) = r.view(&both, t0);
        assert_eq!((view, next), (both.clone(), None));
        let one = pods(&[("b", 0, record("u1", false, false))]);
        let at = t0 + Duration::from_millis(10);
        let (view, next) = r.view(&one, at);
        assert_eq!(view, both, "the vanished key is still there");
        assert_eq!(next, Some(at + RECLAIM_GRACE));
        let (view, _) = r.view(&one, at + RECLAIM_GRACE - Duration::from_millis(1));
        assert_eq!(view, both);
        let (view, next) = r.view(&one, at + RECLAIM_GRACE);
        assert_eq!((view, next), (one, None), "gone once the grace is over");
    }

    #[test]
    fn a_key_claimed_again_ends_its_grace_and_a_later_loss_starts_a_new_one() {
        let t0 = Instant::now();
        let mut r = Reclaims::default();
        let full = pods(&[("a", 1, record("u0", false, false))]);
        r.view(&full, t0);
        r.view(&Pods::new(), t0 + Duration::from_secs(1));
        let (view, next) = r.view(&full, t0 + Duration::from_secs(2));
        assert_eq!((view, next), (full.clone(), None));
        let later = t0 + Duration::from_secs(10);
        let (view, next) = r.view(&Pods::new(), later);
        assert_eq!((view, next), (full, Some(later + RECLAIM_GRACE)));
    }

    #[test]
    fn keys_of_leaving_or_finished_workers_go_at_once() {
        let t0 = Instant::now();
        let mut r = Reclaims::default();
        let ending = pods(&[
            ("a", 0, record("u0", true, false)),
            ("a", 1, record("u1", false, true)),
        ]);
        r.view(&ending, t0);
        let (view, next) = r.view(&Pods::new(), t0 + Duration::from_millis(5));
        assert_eq!((view, next), (Pods::new(), None));
    }
}
