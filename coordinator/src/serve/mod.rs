//! `elasticrun serve`: a coordinator without a launcher, for workers that
//! start by themselves (Kubernetes pods) and find it through etcd. Any
//! number of replicas run; each stands for leadership of the job on its own
//! lease, and the one elected runs the job driver on the job's state in etcd
//! ([`EtcdStore`]), the workers' keys as its slots ([`pods`]) and a control
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

mod pods;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use control::Secret;
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
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    Secret::from_hex(&text).map_err(|e| bad(e.to_string()))
}

/// How long before its lease could expire a leader stops acting.
fn margin(ttl: Duration) -> Duration {
    (ttl / 4).max(Duration::from_millis(500))
}

/// Runs this replica until the job ends or it is stopped.
pub async fn run(cfg: JobConfig, serve: ServeConfig) -> Result<Ending, ServeError> {
    let say = Say::stderr(cfg.output_timestamps);
    let secret = read_secret(&serve.secret_file)?;
    let e = cfg.elastic.as_ref().ok_or(ServeError::NotElastic)?;
    let policy = crate::job::policy_of(&cfg, e);
    let knobs = crate::job::knobs(&cfg);
    let client = etcdjob::connect(&serve.endpoints, cfg.start_timeout).await?;
    let keys = Keys::new(&serve.job);
    let advertise = match serve.advertise {
        Some(ip) => ip,
        None => advertised_ip(&serve.endpoints)?,
    };
    let instance = instance_name();
    let mut outage = Outage::default();
    let mut held: Option<Lease> = None;
    loop {
        let over = match etcdjob::read_done(&mut client.clone(), &keys).await {
            Ok(over) => over,
            Err(e) => {
                outage.wait(&say, &e).await;
                continue;
            }
        };
        if let Some(ok) = over {
            say.line(format_args!("job {} is over already", serve.job));
            return Ok(if ok { Ending::Success } else { Ending::Failed });
        }
        // A lease that outlived the step-down (etcd extends leases when it
        // comes back) is stood on again: its election key may still lead.
        let kept = held
            .take()
            .filter(|l| !matches!(l.health(), etcdjob::LeaseHealth::Lost { .. }));
        let lease = match kept {
            Some(l) => l,
            None => match Lease::grant(&client, serve.lease_ttl, "coordinator").await {
                Ok(l) => l,
                Err(e) => {
                    outage.wait(&say, &e).await;
                    continue;
                }
            },
        };
        outage.over(&say);
        let server = Server::bind(
            SocketAddr::new(unspecified(advertise), serve.port),
            secret.clone(),
        )
        .await
        .map_err(crate::job::JobError::from)?;
        let addr = SocketAddr::new(advertise, server.local_addr().port());
        let record = LeaderRecord {
            addr,
            instance: instance.clone(),
        };
        let Some(stops) = Stops::install(&say) else {
            return Ok(Ending::Failed);
        };
        let said = say.clone();
        let job = serve.job.clone();
        let standing = etcdjob::campaign(&client, &keys, &lease, &record, move |c| {
            let Campaign::StandingBy { leader } = c;
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
                    say.line(format_args!("{e}; standing again"));
                    continue;
                }
            },
            ending = stop_signal() => {
                lease.revoke(&client).await;
                return Ok(ending);
            }
        };
        // The job may have ended while this replica stood by.
        if let Some(ok) = etcdjob::read_done(&mut client.clone(), &keys).await? {
            say.line(format_args!("job {} is over already", serve.job));
            leadership.resign(&client).await;
            lease.revoke(&client).await;
            return Ok(if ok { Ending::Success } else { Ending::Failed });
        }
        say.line(format_args!(
            "leading job {} (epoch {}); workers reach this coordinator at {addr}",
            serve.job, leadership.epoch
        ));
        let pods = PodWatch::start(&client, &keys);
        // The workers as etcd has them before the job is resumed (bounded:
        // without a listing the driver starts anyway and learns them later).
        let mut listed = pods.subscribe();
        let _ = tokio::time::timeout(
            etcdjob::REQUEST_TIMEOUT * 2,
            listed.wait_for(Option::is_some),
        )
        .await;
        let store = EtcdStore::new(
            client.clone(),
            &keys,
            leadership.clone(),
            serve.endpoints.to_string(),
        );
        let seams = Seams {
            launcher: Box::new(pods::PodLauncher {
                pods: pods.subscribe(),
            }),
            arrivals: server.into_arrivals(),
            hosts: pods::feed(pods.subscribe()),
            store: Box::new(store),
            clock: WallClock::System,
            stops: stops.or_lapse(lease.lapse(margin(lease.ttl())).boxed()),
            say: say.clone(),
        };
        let ending = crate::job::drive_elastic(policy.clone(), knobs.clone(), seams).await?;
        drop(pods);
        match ending {
            Ending::SteppedDown => {
                held = Some(lease);
                continue;
            }
            Ending::Success | Ending::Failed => {
                let ok = ending == Ending::Success;
                say.line(format_args!(
                    "job {} {}",
                    serve.job,
                    if ok { "succeeded" } else { "failed" }
                ));
                if let Err(e) =
                    etcdjob::mark_done(&mut client.clone(), &keys, &leadership, ok).await
                {
                    say.line(format_args!("cannot record the end of the job: {e}"));
                }
            }
            Ending::Interrupted | Ending::Terminated => {}
        }
        leadership.resign(&client).await;
        lease.revoke(&client).await;
        return Ok(ending);
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
