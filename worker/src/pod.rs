//! Joining a job through etcd, as a Kubernetes pod does: no launcher, only
//! `ELASTICRUN_ETCD`, `ELASTICRUN_JOB` and the secret in a file
//! (`ELASTICRUN_SECRET_FILE`). The worker takes a lease it keeps alive,
//! claims the lowest free slot of its node (`NODE_NAME`) under the job,
//! finds the leading coordinator's address in etcd and joins as any worker
//! does; it follows the election afterwards and moves to a new leader as
//! soon as etcd names one. SIGTERM (a deleted pod) marks its key leaving: it
//! leaves at its next commit, a scale-down without rollback. A clean end of
//! training marks it finished.
//!
//! ```text
//!  etcd: lease ─► workers/<node>/<slot> ─► leader? ─► join (TCP, secret) ─► train
//!        leader changes ──► drop the old connection, register with the new one
//!        SIGTERM ──► key marked leaving ──► Leave at the next commit ──► exit 0
//! ```

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use control::tls::ClientStream;
use etcdjob::{Client, Endpoints, JobName, Keys, LeaderRecord, LeaderWatch, Lease, WorkerRecord};
use tokio::sync::watch;

use crate::InitError;
use crate::reconnect::Connect;

/// How soon a worker tries again to claim its slot when etcd did not answer.
const RECLAIM_RETRY: Duration = Duration::from_millis(200);

/// The variables of a worker that joins through etcd.
pub(crate) const ETCD: &str = "ELASTICRUN_ETCD";
pub(crate) const JOB: &str = "ELASTICRUN_JOB";
pub(crate) const SECRET_FILE: &str = "ELASTICRUN_SECRET_FILE";
pub(crate) const LEASE_TTL: &str = "ELASTICRUN_LEASE_TTL";

/// How long a worker keeps training without a coordinator when
/// `ELASTICRUN_COORDINATOR_TIMEOUT` does not say: long enough for a standby
/// to take over after the leader's lease ends.
pub(crate) const POD_COORDINATOR_TIMEOUT: &str = "30";

/// Who this worker is in etcd mode, from the pod's environment.
#[derive(Debug)]
pub(crate) struct PodEnv {
    endpoints: Endpoints,
    job: JobName,
    secret_file: std::path::PathBuf,
    node: String,
    record: WorkerRecord,
    lease_ttl: Duration,
}

/// `None` unless `ELASTICRUN_ETCD` is set.
pub(crate) fn read(get: &impl Fn(&str) -> Option<String>) -> Result<Option<PodEnv>, InitError> {
    let Some(etcd) = get(ETCD).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let bad = |var: &'static str, why: String| InitError::Environment { var, why };
    let endpoints = Endpoints::parse(&etcd).map_err(|e| bad(ETCD, e.to_string()))?;
    let job = get(JOB).ok_or_else(|| bad(JOB, "is not set".into()))?;
    let job = JobName::new(job.trim()).map_err(|e| bad(JOB, e.to_string()))?;
    let secret_file = get(SECRET_FILE)
        .ok_or_else(|| bad(SECRET_FILE, "is not set (the job secret's file)".into()))?
        .into();
    let hostname = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());
    let node = get("NODE_NAME").unwrap_or_else(|| hostname.clone());
    let pod = get("POD_NAME").unwrap_or_else(|| hostname.clone());
    let uid = get("POD_UID").unwrap_or_else(|| format!("{pod}-{}", std::process::id()));
    let ip = match get("POD_IP") {
        Some(v) => v
            .trim()
            .parse::<IpAddr>()
            .map_err(|_| bad("POD_IP", format!("{v:?} is not an IP address")))?,
        None => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    };
    let lease_ttl = match get(LEASE_TTL) {
        Some(v) => etcdjob::parse_lease_ttl(&v).map_err(|why| bad(LEASE_TTL, why))?,
        None => etcdjob::DEFAULT_LEASE_TTL,
    };
    Ok(Some(PodEnv {
        endpoints,
        job,
        secret_file,
        node,
        record: WorkerRecord {
            pod,
            uid,
            pid: std::process::id(),
            ip,
            leaving: false,
            finished: false,
        },
        lease_ttl,
    }))
}

/// A worker registered in etcd: its key, lease and view of the leader.
pub(crate) struct Pod {
    client: Client,
    keys: Keys,
    pub(crate) node: String,
    pub(crate) slot: u32,
    /// Replaced when etcd ended the last one while this worker lived on.
    lease: Mutex<Arc<Lease>>,
    lease_ttl: Duration,
    record: WorkerRecord,
    /// Marked leaving (SIGTERM): a key claimed again says so too.
    leaving: AtomicBool,
    leader: LeaderWatch,
    /// The leader found at the start.
    pub(crate) first: (i64, LeaderRecord),
    pub(crate) secret_hex: String,
}

/// Enters the job through etcd (a pod): registers, finds the leader, and
/// leaves on SIGTERM from then on. Returns the job's launch settings and the
/// pod, whose [`Pod::connect`] dials the leader: what joining it takes.
pub(crate) fn enter_job(
    rt: &tokio::runtime::Runtime,
    pe: PodEnv,
) -> Result<(crate::env::Launch, Arc<Pod>), InitError> {
    let within = std::env::var(control::env::START_TIMEOUT)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(Duration::from_secs(60), Duration::from_secs_f64);
    let pod = Arc::new(rt.block_on(enter(pe, within))?);
    let launch = crate::env::read(|k| launch_var(&pod, k))?.ok_or(InitError::Environment {
        var: ETCD,
        why: "cannot describe the job".into(),
    })?;
    let leader = &pod.first.1;
    let named = leader.transport.as_deref();
    if leader.tls != launch.transport.encrypted()
        || named.is_some_and(|t| t != launch.transport.name())
    {
        return Err(InitError::TransportMismatch {
            leader: pod.first.1.instance.clone(),
            ours: launch.transport.name(),
        });
    }
    watch_signals(rt, &pod, launch.coordinator_timeout);
    Ok((launch, pod))
}

/// Registers in etcd and finds the leader, within `within`.
pub(crate) async fn enter(env: PodEnv, within: Duration) -> Result<Pod, InitError> {
    let secret = std::fs::read_to_string(&env.secret_file).map_err(|e| InitError::Environment {
        var: SECRET_FILE,
        why: format!("{}: {e}", env.secret_file.display()),
    })?;
    let client = etcdjob::connect(&env.endpoints, within).await?;
    let keys = Keys::new(&env.job);
    if let Some(ok) = etcdjob::read_done(&mut client.clone(), &keys).await? {
        let how = if ok { "succeeded" } else { "failed" };
        return Err(InitError::Refused {
            reason: format!("job {} is over ({how})", env.job),
        });
    }
    let lease = Lease::grant(&client, env.lease_ttl, "worker").await?;
    let slot = etcdjob::claim_slot(&client, &keys, &env.node, &lease, &env.record).await?;
    tracing::info!(node = %env.node, slot, "registered in etcd");
    let leader = LeaderWatch::start(&client, &keys);
    let first = leader
        .wait(within)
        .await
        .ok_or_else(|| InitError::NoLeader {
            job: env.job.to_string(),
            waited: within,
        })?;
    Ok(Pod {
        client,
        keys,
        node: env.node,
        slot,
        lease: Mutex::new(Arc::new(lease)),
        lease_ttl: env.lease_ttl,
        record: env.record,
        leaving: AtomicBool::new(false),
        leader,
        first,
        secret_hex: secret.trim().to_owned(),
    })
}

impl std::fmt::Debug for Pod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.keys.worker(&self.node, self.slot))
    }
}

impl Pod {
    /// The coordinator as the control task redials it: whoever leads now.
    pub(crate) fn connect(&self, tls: Option<control::tls::ControlConnector>) -> LeaderConn {
        LeaderConn {
            rx: self.leader.subscribe(),
            dialled: Arc::new(AtomicI64::new(self.first.0)),
            tls,
        }
    }

    fn lease(&self) -> Arc<Lease> {
        self.lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Marks this worker leaving (SIGTERM).
    pub(crate) async fn leave(&self) -> Result<(), etcdjob::EtcdError> {
        self.leaving.store(true, Ordering::SeqCst);
        let lease = self.lease();
        let (c, k, n, s, r) = (
            &self.client,
            &self.keys,
            &self.node,
            self.slot,
            &self.record,
        );
        etcdjob::set_leaving(c, k, n, s, &lease, r).await
    }

    /// Marks this worker finished (its training ended cleanly).
    pub(crate) async fn finished(&self) {
        let done = WorkerRecord {
            finished: true,
            ..self.record.clone()
        };
        let lease = self.lease();
        if let Err(e) = etcdjob::finish(
            &self.client,
            &self.keys,
            &self.node,
            self.slot,
            &lease,
            &done,
        )
        .await
        {
            tracing::warn!(%e, "cannot mark this worker finished in etcd");
        }
    }

    /// Resolves once etcd says this worker's lease is gone.
    pub(crate) fn lost(&self) -> impl Future<Output = String> + Send + 'static {
        self.lease().lost()
    }

    /// Takes a new lease and claims this worker's slot again on it: what a
    /// worker that lived on while etcd ended its lease (etcd stalled longer
    /// than the lease) does. `Ok(false)`: another worker holds the slot now.
    async fn reclaim(&self) -> Result<bool, etcdjob::EtcdError> {
        let lease = Lease::grant(&self.client, self.lease_ttl, "worker").await?;
        let record = WorkerRecord {
            leaving: self.leaving.load(Ordering::SeqCst),
            ..self.record.clone()
        };
        let (c, k, n, s) = (&self.client, &self.keys, &self.node, self.slot);
        if !etcdjob::reclaim_slot(c, k, n, s, &lease, &record).await? {
            return Ok(false);
        }
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(lease);
        Ok(true)
    }

    /// [`Pod::reclaim`], tried again while etcd does not answer, for up to
    /// `within`; why not, if the slot is not this worker's again.
    pub(crate) async fn reclaim_within(&self, within: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match self.reclaim().await {
                Ok(true) => return Ok(()),
                Ok(false) => return Err("another worker holds its slot now".into()),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("{e}, for {within:?}"));
                }
                Err(e) => tracing::debug!(%e, "cannot claim the slot again yet"),
            }
            tokio::time::sleep(RECLAIM_RETRY).await;
        }
    }
}

/// Dials whichever coordinator leads now; a connection to one that no
/// longer leads is dropped ([`Connect::superseded`]).
#[derive(Clone, Debug)]
pub(crate) struct LeaderConn {
    rx: watch::Receiver<Option<(i64, LeaderRecord)>>,
    /// The epoch of the leader last dialled.
    dialled: Arc<AtomicI64>,
    /// TLS around the connection (a job on the QUIC data plane).
    tls: Option<control::tls::ControlConnector>,
}

impl LeaderConn {
    fn leader(&self) -> Option<(i64, SocketAddr)> {
        self.rx.borrow().as_ref().map(|(e, r)| (*e, r.addr))
    }
}

impl Connect for LeaderConn {
    type Stream = ClientStream;

    fn target(&self) -> String {
        match self.leader() {
            Some((_, addr)) => addr.to_string(),
            None => "no coordinator (none leads the job in etcd)".into(),
        }
    }

    fn near(stream: &ClientStream) -> Option<std::net::IpAddr> {
        control::tls::local_ip(stream)
    }

    async fn connect(&self) -> std::io::Result<ClientStream> {
        let Some((epoch, addr)) = self.leader() else {
            return Err(std::io::Error::other("no coordinator leads the job now"));
        };
        let s = control::tls::dial(addr, self.tls.as_ref()).await?;
        self.dialled.store(epoch, Ordering::SeqCst);
        Ok(s)
    }

    fn superseded(&self) -> impl Future<Output = ()> + Send {
        let mut rx = self.rx.clone();
        let dialled = self.dialled.clone();
        async move {
            let moved = rx.wait_for(|l| {
                l.as_ref()
                    .is_some_and(|(e, _)| *e > dialled.load(Ordering::SeqCst))
            });
            if moved.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The launch variable `var` of a worker that joined through etcd: who it
/// is and where its coordinator is come from etcd, the rest from its
/// environment (with longer waits for a coordinator by default).
pub(crate) fn launch_var(pod: &Pod, var: &str) -> Option<String> {
    use control::env as e;
    let from_env = std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    match var {
        e::COORDINATOR => Some(pod.first.1.addr.to_string()),
        e::SECRET => Some(pod.secret_hex.clone()),
        e::HOST => Some(pod.node.clone()),
        e::SLOT => Some(pod.slot.to_string()),
        e::ELASTIC_TIMEOUT => from_env.or_else(|| Some("600".into())),
        e::COORDINATOR_TIMEOUT => from_env.or_else(|| Some(POD_COORDINATOR_TIMEOUT.into())),
        e::DATA_ALL_INTERFACES => None,
        _ => from_env,
    }
}

/// SIGTERM (a deleted pod): mark the key leaving, then wait to be told to
/// leave at the next commit; a second SIGTERM, or `grace` without a
/// coordinator's word, ends the process (143). A lease etcd has ended
/// while the process lived on (etcd stalled longer than the lease) is
/// replaced and the slot claimed again; if that fails within `grace` (or
/// another worker holds the slot), the process ends (1): the job counts
/// this worker gone.
pub(crate) fn watch_signals(rt: &tokio::runtime::Runtime, pod: &Arc<Pod>, grace: Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    let p = pod.clone();
    rt.spawn(async move {
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            tracing::warn!("cannot watch SIGTERM; a deleted pod fails instead of leaving");
            return;
        };
        term.recv().await;
        eprintln!("elasticrun worker: SIGTERM: leaving the job at its next commit");
        if let Err(e) = p.leave().await {
            eprintln!("elasticrun worker: cannot mark this worker leaving ({e}); exiting");
            std::process::exit(143);
        }
        tokio::select! {
            _ = term.recv() => {}
            () = tokio::time::sleep(grace) => {}
        }
        eprintln!("elasticrun worker: not released within {grace:?} of SIGTERM; exiting");
        std::process::exit(143);
    });
    let p = pod.clone();
    rt.spawn(async move {
        loop {
            let why = p.lost().await;
            eprintln!("elasticrun worker: etcd ended its lease ({why}); claiming its slot again");
            if let Err(why) = p.reclaim_within(grace).await {
                eprintln!(
                    "elasticrun worker: cannot claim its slot again ({why}); the job counts it gone; exiting"
                );
                std::process::exit(1);
            }
            eprintln!("elasticrun worker: {p:?} claimed its slot again");
        }
    });
}
