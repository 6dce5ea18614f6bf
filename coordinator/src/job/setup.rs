//! Setting a job up: its membership policy, where the coordinator listens and
//! where the host sets come from, for a static job (`-np`, `-H`, `--hostfile`:
//! the host list discovered once, `min = max = np`, any failure ends the job) or
//! an elastic one (`--host-discovery-script`); and the [`Seams`] the driver
//! runs on.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use std::sync::Arc;

use control::Knobs;
use control::pki::JobCa;
use elastic::hosts::HostSlots;
use elastic::membership::{BlacklistPolicy, Membership, Policy};
use tokio::sync::mpsc;

use super::Watch;
use super::discovery::{Discovery, HostFeed};
use super::driver::{Driver, Terms, bind_address};
use super::journal::{Journal, STORE_TIMEOUT};
use super::links::Links;
use super::recovery::Recovery;
use super::waiting::Waiting;
use super::workers::Workers;
use super::{
    Ending, JobError, Say, Stops, WallClock, control_tls, data_token, hosts_and_np, job_ca,
    job_secret, knobs,
};
use crate::config::{ElasticConfig, JobConfig};
use crate::launch::Launcher;
use crate::launch::address::{control_addresses, is_this_machine};
use crate::launch::output;
use crate::launch::program_env::{self, Restart, StaticLayout};
use crate::launch::start::ProcessLauncher;
use crate::launch::warm::{SharedPool, WarmPool};
use crate::layout::place;
use crate::metrics::{JobMetrics, ResetCause};
use crate::server::{Arrivals, Server};
use crate::stall::StallConfig;
use crate::store::{MemoryStore, Revision, Store};
use crate::straggler::Detector;

/// Failures of one host's workers within this window blacklist it...
const BLACKLIST_WINDOW: Duration = Duration::from_secs(60);
/// ...when there are this many.
const BLACKLIST_FAILURES: u32 = 3;
/// A live member that has not rejoined a new generation by then has failed.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The membership core's policy of an elastic job.
pub(crate) fn policy(cfg: &JobConfig, e: &ElasticConfig) -> Policy {
    Policy {
        min_np: e.min_np,
        max_np: e.max_np.unwrap_or(usize::MAX),
        initial_np: e.initial_np,
        elastic_timeout: e.elastic_timeout,
        reset_limit: e.reset_limit,
        blacklist: BlacklistPolicy {
            failures: BLACKLIST_FAILURES,
            window: BLACKLIST_WINDOW,
            cooldown: e.blacklist_cooldown,
        },
        start_timeout: cfg.start_timeout,
        rejoin_timeout: REJOIN_TIMEOUT,
        replacement_wait: e.replacement_wait,
        on_failure: elastic::OnFailure::Replace,
        hot_spares: e.hot_spares,
    }
}

/// Where a job's host sets come from.
enum Hosts {
    /// A static job's list, discovered once.
    Fixed(Vec<HostSlots>),
    /// An elastic job's discovery script.
    Script(Discovery),
}

/// What differs between a static and an elastic job before the driver runs.
struct Setup {
    policy: Policy,
    bind: IpAddr,
    hosts: Hosts,
    /// A static job's layout (its workers' torchrun and Horovod variables).
    layout: Option<StaticLayout>,
}

/// Checks before any worker starts that the job's output directory and,
/// where rank 0 runs on this machine, its timeline file can be written (an
/// elastic job's rank 0 reports an unwritable timeline itself).
fn check_files(cfg: &JobConfig, rank0_here: bool) -> Result<(), JobError> {
    if let Some(dir) = &cfg.output_dir {
        output::check_dir(dir)?;
    }
    if let Some(t) = cfg.timeline.as_ref().filter(|_| rank0_here) {
        output::check_file("timeline file", &t.file)?;
    }
    Ok(())
}

async fn setup(cfg: &JobConfig) -> Result<Setup, JobError> {
    if let Some(e) = &cfg.elastic {
        let Some(source) = e.discovery.clone() else {
            return Err(JobError::NoDiscoveryScript);
        };
        check_files(cfg, false)?;
        return Ok(Setup {
            policy: policy(cfg, e),
            bind: bind_address(cfg)?,
            hosts: Hosts::Script(Discovery {
                source,
                interval: e.discovery_interval,
                timeout: e.discovery_timeout,
                slots_per_host: e.slots_per_host,
            }),
            layout: None,
        });
    }
    let (hosts, np) = hosts_and_np(cfg).await?;
    let placements = place(&hosts, np)?;
    let rank0_here = hosts.first().is_some_and(|h| is_this_machine(&h.host));
    check_files(cfg, rank0_here)?;
    let names: Vec<&str> = hosts.iter().map(|h| h.host.as_str()).collect();
    let addresses = control_addresses(&names, cfg.network_interface.as_deref())?;
    let layout = StaticLayout {
        hosts: hosts.clone(),
        placements,
        master_port: if rank0_here {
            program_env::free_port()
        } else {
            program_env::TORCHRUN_PORT
        },
    };
    Ok(Setup {
        policy: Policy::fixed(np, cfg.start_timeout),
        bind: addresses.bind,
        hosts: Hosts::Fixed(hosts),
        layout: Some(layout),
    })
}

/// Feeds the driver its host sets: the static list once, or the discovery
/// script's results (its failures said on `say`).
fn feed(hosts: Hosts, say: Say, metrics: &JobMetrics) -> HostFeed {
    match hosts {
        Hosts::Fixed(list) => HostFeed::fixed(list),
        Hosts::Script(d) => HostFeed::script(d, say, metrics.clone()),
    }
}

/// The core a job starts with: resumed from the store's state when there is
/// one (another coordinator ran this job), else a new job from now.
struct Resumed {
    core: Membership,
    revision: Option<Revision>,
    epoch: SystemTime,
    age: Duration,
}

async fn resume(store: &dyn Store, policy: Policy, clock: WallClock) -> Result<Resumed, JobError> {
    let loaded = tokio::time::timeout(STORE_TIMEOUT, store.load())
        .await
        .map_err(|_| JobError::StoreTimeout {
            after: STORE_TIMEOUT,
        })??;
    let Some((revision, state)) = loaded else {
        return Ok(Resumed {
            core: Membership::new(policy),
            revision: None,
            epoch: clock.now(),
            age: Duration::ZERO,
        });
    };
    let age = state.age(clock.now());
    tracing::info!(%revision, generation = state.membership.generation.0, "resuming the job");
    Ok(Resumed {
        core: Membership::resume(policy, &state.membership, age),
        revision: Some(revision),
        epoch: state.epoch,
        age,
    })
}

/// What a job runs on besides its configuration. [`run`] makes a job's: a
/// process launcher, a TCP listener, the host list or discovery script, an
/// in-memory store, the system clock, the signal handlers and status lines
/// on stderr; an in-process cluster passes its own to [`run_on`].
#[derive(Debug)]
pub struct Seams {
    pub launcher: Box<dyn Launcher>,
    pub arrivals: Arrivals,
    pub hosts: HostFeed,
    /// Where the job's durable state is committed; a stored state is resumed.
    pub store: Box<dyn Store>,
    pub clock: WallClock,
    pub stops: Stops,
    /// Where elasticrun's own status lines go.
    pub say: Say,
    /// The job's certificate authority, derived from its secret.
    pub ca: Arc<JobCa>,
    /// What the job shows at `/metrics`.
    pub metrics: JobMetrics,
}

/// The job's metrics, served at `--metrics-address` (said, with the port a
/// port 0 got) until the returned guard drops.
pub(crate) async fn serve_metrics(
    cfg: &JobConfig,
    say: &Say,
    metrics: JobMetrics,
) -> Result<(JobMetrics, Option<MetricsServer>), JobError> {
    let Some(addr) = cfg.metrics_address else {
        return Ok((metrics, None));
    };
    let (at, server) = crate::metrics::http::serve(addr, metrics.clone())?;
    say.line(format_args!(
        "metrics at http://{at}/metrics, the status page at http://{at}/"
    ));
    Ok((metrics, Some(server)))
}

/// The metrics server, stopped when this drops.
pub(crate) type MetricsServer = crate::metrics::http::Server;

/// Runs the job described by `cfg` until it ends; a static job whose
/// workers failed starts them all again, up to `--max-restarts` times, and
/// an elastic one with `--max-restarts` runs by restarts
/// (`job/rescale.rs`).
pub async fn run(cfg: JobConfig) -> Result<Ending, JobError> {
    if let Some(e) = cfg.elastic.clone().filter(|_| cfg.max_restarts > 0) {
        return super::rescale::run(cfg, e).await;
    }
    let say = Say::stderr(cfg.output_timestamps);
    let (metrics, _server) = serve_metrics(&cfg, &say, JobMetrics::new()).await?;
    let max = cfg.max_restarts;
    let mut count = 0;
    let mut failed_at = None;
    let warm = WarmPool::for_job(&cfg.command, &cfg.prestart_imports);
    loop {
        let restart = Restart {
            count,
            max,
            failed_at,
        };
        let (ending, failing) =
            run_once(cfg.clone(), restart, None, metrics.clone(), warm.clone()).await?;
        failed_at = failing;
        if ending != Ending::Failed || max == 0 {
            return Ok(ending);
        }
        if count == max {
            say.line(format_args!(
                "the job failed after {max} restarts (--max-restarts {max}); giving up"
            ));
            return Ok(ending);
        }
        count += 1;
        say.line(format_args!(
            "restarting every worker: restart {count} of {max} (TORCHELASTIC_RESTART_COUNT={count})"
        ));
    }
}

/// One start of the job's workers, the `restart.count`th restart, stopped
/// too when `rescale` resolves; with its ending, when it was seen failing.
pub(super) async fn run_once(
    cfg: JobConfig,
    restart: Restart,
    rescale: Option<futures::future::BoxFuture<'static, String>>,
    metrics: JobMetrics,
    warm: Option<SharedPool>,
) -> Result<(Ending, Option<Instant>), JobError> {
    let Setup {
        policy,
        bind,
        hosts,
        layout,
    } = setup(&cfg).await?;
    let secret = job_secret()?;
    let ca = job_ca(&secret)?;
    let tls = control_tls(cfg.transport, &ca)?;
    let server = Server::bind(SocketAddr::new(bind, 0), secret.clone(), tls).await?;
    tracing::debug!(addr = %server.local_addr(), "control plane listening");
    let listening = server.local_addr();
    let say = Say::stderr(cfg.output_timestamps);
    let Some(mut stops) = Stops::install(&say) else {
        return Ok((Ending::Failed, None));
    };
    if let Some(r) = rescale {
        stops = stops.or_rescale(r);
    }
    let knobs = knobs(&cfg);
    let watch = watch(&cfg);
    let launcher = ProcessLauncher::new(cfg, secret, listening)
        .with_layout(layout)
        .with_restart(restart)
        .with_warm(warm);
    let failing = launcher.failure_clock();
    let seams = Seams {
        launcher: Box::new(launcher),
        arrivals: server.into_arrivals(),
        hosts: feed(hosts, say.clone(), &metrics),
        store: Box::new(MemoryStore::new()),
        clock: WallClock::System,
        stops,
        say,
        ca,
        metrics,
    };
    let ending = drive(policy, knobs, watch, seams).await?;
    let failed_at = failing.lock().ok().and_then(|at| *at);
    Ok((ending, failed_at))
}

/// Runs the job described by `cfg` on `seams` until it ends: `cfg` gives
/// the membership policy and the knobs, `seams` everything else (its
/// launcher supersedes `cfg`'s command and hosts).
pub async fn run_on(cfg: &JobConfig, seams: Seams) -> Result<Ending, JobError> {
    let policy = match &cfg.elastic {
        Some(e) => policy(cfg, e),
        None => {
            let (_, np) = hosts_and_np(cfg).await?;
            Policy::fixed(np, cfg.start_timeout)
        }
    };
    drive(policy, knobs(cfg), watch(cfg), seams).await
}

/// Runs an elastic job on `seams` with `policy` and `knobs`, a worker
/// watched as `watch` says (`elasticrun serve`'s leader, whose
/// seams are etcd's).
pub(crate) async fn drive_elastic(
    policy: Policy,
    knobs: Knobs,
    watch: Watch,
    seams: Seams,
) -> Result<Ending, JobError> {
    drive(policy, knobs, watch, seams).await
}

/// How `cfg`'s workers are watched.
pub(crate) fn watch(cfg: &JobConfig) -> Watch {
    Watch {
        silence: cfg.heartbeat_timeout,
        stragglers: cfg.stragglers,
    }
}

async fn drive(
    policy: Policy,
    knobs: Knobs,
    watch: Watch,
    seams: Seams,
) -> Result<Ending, JobError> {
    let Seams {
        launcher,
        mut arrivals,
        mut hosts,
        store,
        clock,
        stops,
        say,
        ca,
        metrics,
    } = seams;
    let cap = (policy.max_np != usize::MAX).then_some(policy.max_np);
    metrics.set_bounds(policy.min_np, cap);
    let data_token = data_token()?;
    let (events_tx, events_rx) = mpsc::channel(1024);
    let Resumed {
        core,
        revision,
        epoch,
        age,
    } = resume(store.as_ref(), policy, clock).await?;
    let mut driver = Driver {
        core,
        launcher,
        workers: Workers::default(),
        links: Links::new(events_tx, watch.silence),
        journal: Journal::new(store, revision, epoch, age),
        stall: StallConfig::from_knobs(&knobs),
        terms: Terms {
            knobs,
            data_token,
            ca,
        },
        inspector: None,
        ending: None,
        say,
        waiting: Waiting::default(),
        recovery: Recovery::default(),
        discovered: false,
        metrics,
        detector: Detector::new(&watch.stragglers, 0),
        watch,
        reset_cause: None,
        host_change: ResetCause::HostsAdded,
    };
    let ending = driver
        .run(&mut arrivals, &mut hosts, events_rx, stops)
        .await;
    // No more discovery runs while the workers stop.
    drop(hosts);
    if driver.replaces_failed() {
        driver.say.line(driver.metrics.goodput_summary());
    }
    driver.wind_down(ending).await;
    drop(arrivals);
    Ok(ending)
}
