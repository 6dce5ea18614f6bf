//! `elasticrun serve`: a coordinator without a launcher, for workers that
//! start by themselves (Kubernetes pods) and find it through etcd. Any
//! number of replicas run; each stands for leadership of the job on its own
//! lease, and the one elected runs the job driver on the job's state in etcd
//! ([`EtcdStore`]), the workers' keys as its slots (`pods`) and a control
//! listener whose address it publishes in its election key. A replica that
//! can no longer count on its lease, or whose commit is fenced, steps down
//! without a word to the workers and stands again; the next leader adopts
//! the stored generation as it is, and the workers, who keep training
//! meanwhile, reconnect to it.
//!
//! ```text
//!  connect etcd ─► lease ─► listen ─► campaign ──(elected)──► driver on EtcdStore + pod watch
//!                    ▲                                            │
//!                    └──────── stepped down (lease lapsed, fenced, etcd gone) ◄┘
//! ```

pub mod node;
mod pods;

/// The variable that puts a job in etcd mode: `elasticrun serve` reads it,
/// and `elasticrun COMMAND` where it is set runs one node of such a job
/// ([`node`]).
pub const ETCD_VAR: &str = "ELASTICRUN_ETCD";

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use control::Secret;
use control::pki::JobCa;
use control::tls::ControlAcceptor;
use etcdjob::{Campaign, Endpoints, JobName, Keys, LeaderRecord, Lease, PodWatch};
use futures::FutureExt;

use crate::config::JobConfig;
use crate::job::{Ending, Say, Seams, Stops, WallClock};
use crate::server::Server;
use crate::store::EtcdStore;

/// What `elasticrun serve` needs besides a job's elastic options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeConfig {
    /// `--etcd`.
    pub endpoints: Endpoints,
    /// `--job`.
    pub job: JobName,
    /// `--lease-ttl`: of this replica's lease, and so how long a dead leader
    /// leads on.
    pub lease_ttl: Duration,
    /// `--secret-file`: the job's secret, in hex (a mounted Kubernetes Secret).
    pub secret_file: PathBuf,
    /// `--port`: where the control plane listens (0: any free port).
    pub port: u16,
    /// `--advertise-address` (`POD_IP` by default): the address published
    /// for workers; else the one this host reaches etcd from.
    pub advertise: Option<IpAddr>,
}

/// Why `elasticrun serve` could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot read the job secret from {}: {why}", path.display())]
    Secret { path: PathBuf, why: String },
    #[error(transparent)]
    Etcd(#[from] etcdjob::EtcdError),
    #[error(transparent)]
    Job(#[from] crate::job::JobError),
    #[error(transparent)]
    Address(#[from] crate::launch::address::AddressError),
    #[error("`elasticrun serve` needs the elastic options (--min-np at least)")]
    NotElastic,
}

/// Reads the job secret: 64 hex digits, surrounding space ignored.
pub fn read_secret(path: &std::path::Path) -> Result<Secret, ServeError> {
    let bad = |why: String| ServeError::Secret {
        path: path.to_owned(),
        why,
    };
    let text = crate::files::read_text(path, 4096).map_err(|e| bad(e.to_string()))?;
    Secret::from_hex(&text).map_err(|e| bad(e.to_string()))
}

/// How long before its lease could expire a leader stops acting.
fn margin(ttl: Duration) -> Duration {
    (ttl / 4).max(Duration::from_millis(500))
}

/// Runs this replica until the job ends or it is stopped.
pub async fn run(cfg: JobConfig, serve: ServeConfig) -> Result<Ending, ServeError> {
    let e = cfg.elastic.as_ref().ok_or(ServeError::NotElastic)?;
    let client = etcdjob::connect(&serve.endpoints, cfg.start_timeout).await?;
    let advertise = match serve.advertise {
        Some(ip) => ip,
        None => advertised_ip(&serve.endpoints)?,
    };
    let secret = read_secret(&serve.secret_file)?;
    let ca = crate::job::job_ca(&secret)?;
    let tls = crate::job::control_tls(cfg.transport, &ca)?;
    let say = Say::stderr(cfg.output_timestamps);
    let (metrics, _server) =
        crate::job::serve_metrics(&cfg, &say, crate::metrics::JobMetrics::for_serve()).await?;
    let keys = Keys::new(&serve.job);
    let pods = PodWatch::start(&client, &keys);
    let seen = pods::reclaimable(pods.subscribe());
    let mut replica = Replica {
        transport: cfg.transport,
        say,
        metrics,
        secret,
        ca,
        tls,
        policy: crate::job::policy_of(&cfg, e),
        knobs: crate::job::knobs(&cfg),
        watch: crate::job::watch(&cfg),
        keys,
        pods,
        seen,
        client,
        advertise,
        instance: instance_name(),
        outage: Outage::default(),
        held: None,
        serve,
    };
    loop {
        if let Some(ending) = replica.term().await? {
            return Ok(ending);
        }
    }
}

/// One replica of `elasticrun serve`, between its terms.
struct Replica {
    say: Say,
    /// What the job shows at `/metrics`, across terms.
    metrics: crate::metrics::JobMetrics,
    secret: Secret,
    /// The job's certificate authority, derived from the secret.
    ca: Arc<JobCa>,
    /// TLS of the control plane (a job on the QUIC or TLS data plane).
    tls: Option<ControlAcceptor>,
    /// The job's data plane, which the leader's record names.
    transport: control::env::TransportKind,
    policy: elastic::membership::Policy,
    knobs: control::Knobs,
    /// A worker silent this long has failed (`--heartbeat-timeout`).
    watch: crate::job::Watch,
    client: etcdjob::Client,
    keys: Keys,
    /// The workers' keys, followed for as long as the replica runs, led or
    /// not: a key that vanishes while no replica leads (etcd stalled past
    /// the leases) is still a pod claiming its slot again
    /// ([`pods::RECLAIM_GRACE`]) for the replica that leads next, not a
    /// worker missing from the job's first listing.
    pods: PodWatch,
    /// [`Replica::pods`] as the job sees it ([`pods::reclaimable`]).
    seen: tokio::sync::watch::Receiver<Option<etcdjob::Pods>>,
    advertise: IpAddr,
    instance: String,
    serve: ServeConfig,
    outage: Outage,
    /// The lease of the last term, kept when it stepped down.
    held: Option<Lease>,
}

/// Which way a term ended: `None` from [`Replica::term`] stands again.
type Over = Option<Ending>;

impl Replica {
    /// The job's end recorded in etcd, if it is over; `Err` (said, after a
    /// pause) when etcd cannot say.
    async fn job_over(&mut self) -> Result<Over, ()> {
        match etcdjob::read_done(&mut self.client.clone(), &self.keys).await {
            Ok(None) => Ok(None),
            Ok(Some(ok)) => {
                self.say
                    .line(format_args!("job {} is over already", self.serve.job));
                Ok(Some(if ok { Ending::Success } else { Ending::Failed }))
            }
            Err(e) => {
                self.outage.wait(&self.say, &e).await;
                Err(())
            }
        }
    }

    /// This term's lease: the last term's if etcd kept it (its election key
    /// may still lead), else a new one.
    async fn lease(&mut self) -> Option<Lease> {
        let kept = self
            .held
            .take()
            .filter(|l| !matches!(l.health(), etcdjob::LeaseHealth::Lost { .. }));
        if kept.is_some() {
            return kept;
        }
        match Lease::grant(&self.client, self.serve.lease_ttl, "coordinator").await {
            Ok(l) => Some(l),
            Err(e) => {
                self.outage.wait(&self.say, &e).await;
                None
            }
        }
    }

    /// Stands for leadership and, elected, runs the job until it ends or
    /// this replica steps down.
    async fn term(&mut self) -> Result<Over, ServeError> {
        match self.job_over().await {
            Ok(Some(ending)) => return Ok(Some(ending)),
            Ok(None) => {}
            Err(()) => return Ok(None),
        }
        let Some(lease) = self.lease().await else {
            return Ok(None);
        };
        self.outage.over(&self.say);
        let bind = SocketAddr::new(unspecified(self.advertise), self.serve.port);
        let server = Server::bind(bind, self.secret.clone(), self.tls.clone())
            .await
            .map_err(crate::job::JobError::from)?;
        let record = LeaderRecord {
            addr: SocketAddr::new(self.advertise, server.local_addr().port()),
            instance: self.instance.clone(),
            tls: self.tls.is_some(),
            transport: Some(self.transport.name().to_owned()),
        };
        let said = self.say.clone();
        let job = self.serve.job.clone();
        let other_led = Arc::new(AtomicBool::new(false));
        let saw = other_led.clone();
        self.metrics.etcd(None);
        let standing = etcdjob::campaign(&self.client, &self.keys, &lease, &record, move |c| {
            let Campaign::StandingBy { leader } = c;
            saw.fetch_or(leader.is_some(), Ordering::Relaxed);
            match leader {
                Some(l) => said.line(format_args!(
                    "standing by: {} at {} leads job {job}",
                    l.instance, l.addr
                )),
                None => said.line(format_args!("standing by: waiting to lead job {job}")),
            }
        });
        let leadership = tokio::select! {
            l = standing => match l {
                Ok(l) => l,
                Err(e) => {
                    self.say.line(format_args!("{e}; standing again"));
                    return Ok(None);
                }
            },
            ending = stop_signal() => {
                lease.revoke(&self.client).await;
                return Ok(Some(ending));
            }
        };
        let failover = other_led.load(Ordering::Relaxed);
        self.metrics.etcd(Some((leadership.epoch, failover)));
        let over = self.lead(lease, leadership, server, record.addr).await;
        self.metrics.etcd(None);
        over
    }

    /// Runs the job as its leader.
    async fn lead(
        &mut self,
        lease: Lease,
        leadership: etcdjob::Leadership,
        server: Server,
        addr: SocketAddr,
    ) -> Result<Over, ServeError> {
        // The job may have ended while this replica stood by.
        match self.job_over().await {
            Ok(None) => {}
            Ok(Some(ending)) => {
                leadership.resign(&self.client).await;
                lease.revoke(&self.client).await;
                return Ok(Some(ending));
            }
            // etcd did not answer: stand again (on this lease, if it lasts).
            Err(()) => {
                self.held = Some(lease);
                return Ok(None);
            }
        }
        let Some(stops) = Stops::install(&self.say) else {
            return Ok(Some(Ending::Failed));
        };
        self.say.line(format_args!(
            "leading job {} (epoch {}); workers reach this coordinator at {addr}",
            self.serve.job, leadership.epoch
        ));
        // The workers as etcd has them before the job is resumed (bounded:
        // without a listing the driver starts anyway and learns them later).
        let mut listed = self.pods.subscribe();
        let first = listed.wait_for(Option::is_some);
        let _ = tokio::time::timeout(etcdjob::REQUEST_TIMEOUT * 2, first).await;
        let endpoints = self.serve.endpoints.to_string();
        let store = EtcdStore::new(
            self.client.clone(),
            &self.keys,
            leadership.clone(),
            endpoints,
        );
        let dead = pods::Dead::default();
        let seen = self.seen.clone();
        let seams = Seams {
            launcher: Box::new(pods::PodLauncher {
                pods: seen.clone(),
                dead: dead.clone(),
            }),
            arrivals: server.into_arrivals(),
            hosts: pods::feed(seen, dead),
            store: Box::new(store),
            clock: WallClock::System,
            stops: stops.or_lapse(lease.lapse(margin(lease.ttl())).boxed()),
            say: self.say.clone(),
            ca: self.ca.clone(),
            metrics: self.metrics.clone(),
        };
        let ending =
            crate::job::drive_elastic(self.policy.clone(), self.knobs.clone(), self.watch, seams)
                .await?;
        self.end_term(ending, lease, &leadership).await
    }

    /// After a term: stand again on the same lease after stepping down, or
    /// record the job's end, resign and stop.
    async fn end_term(
        &mut self,
        ending: Ending,
        lease: Lease,
        leadership: &etcdjob::Leadership,
    ) -> Result<Over, ServeError> {
        if ending == Ending::SteppedDown {
            self.held = Some(lease);
            return Ok(None);
        }
        if matches!(ending, Ending::Success | Ending::Failed) {
            let ok = ending == Ending::Success;
            let how = if ok { "succeeded" } else { "failed" };
            self.say.line(format_args!("job {} {how}", self.serve.job));
            let mut c = self.client.clone();
            if let Err(e) = etcdjob::mark_done(&mut c, &self.keys, leadership, ok).await {
                self.say
                    .line(format_args!("cannot record the end of the job: {e}"));
            }
        }
        leadership.resign(&self.client).await;
        lease.revoke(&self.client).await;
        Ok(Some(ending))
    }
}

/// etcd out of reach between two terms: said once, retried with backoff.
#[derive(Debug, Default)]
struct Outage {
    since: Option<tokio::time::Instant>,
    backoff: Duration,
}

impl Outage {
    async fn wait(&mut self, say: &Say, e: &etcdjob::EtcdError) {
        if self.since.is_none() {
            say.line(format_args!("{e}; retrying"));
            self.since = Some(tokio::time::Instant::now());
            self.backoff = Duration::from_millis(100);
        }
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(2));
    }

    fn over(&mut self, say: &Say) {
        if let Some(since) = self.since.take() {
            say.line(format_args!(
                "etcd answers again (after {:.1} s)",
                since.elapsed().as_secs_f64()
            ));
        }
    }
}

/// SIGINT or SIGTERM while standing by.
async fn stop_signal() -> Ending {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => tokio::select! {
            _ = int.recv() => Ending::Interrupted,
            _ = term.recv() => Ending::Terminated,
        },
        _ => std::future::pending().await,
    }
}

/// Where to listen so that `advertise` is reached: every interface of its
/// family.
fn unspecified(advertise: IpAddr) -> IpAddr {
    match advertise {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}

/// The address this host reaches the first etcd endpoint from: workers, who
/// reach etcd too, can reach it there.
fn advertised_ip(endpoints: &Endpoints) -> Result<IpAddr, ServeError> {
    let first = endpoints
        .urls()
        .first()
        .map_or("127.0.0.1:2379", String::as_str);
    let hostport = first.trim_start_matches("http://");
    let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
    Ok(crate::launch::address::source_address_towards(host)?)
}

/// This replica's name in messages: host name and process id.
fn instance_name() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "coordinator".into());
    format!("{host}/{}", std::process::id())
}
