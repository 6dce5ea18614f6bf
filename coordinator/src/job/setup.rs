//! Elastic jobs (`--host-discovery-script`): the discovery script is run every
//! interval, the membership core of the `elastic` crate decides who runs
//! where in each generation, and the driver here starts and stops workers and
//! tells them about generations over their control connections.
//!
//! ```text
//!  discovery task ──host sets──┐
//!  control listener ──arrivals─┤      ┌── Spawn / Stop (processes)
//!  link tasks ──rejoin, beats, ├─> Membership core ──┼── Reset / HostsUpdated / Leave
//!               lost links ────┤      └── Assign (per-rank assignments)
//!  exits, stalls, clock ───────┘
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use elastic::membership::{BlacklistPolicy, Membership, Policy};
use tokio::sync::mpsc;

use super::discovery::{self, Discovery};
use super::driver::{Driver, bind_address};
use crate::config::{ElasticConfig, JobConfig};
use crate::job::{Ending, JobError, job_secrets, knobs};
use crate::server::Server;
use crate::stall::StallConfig;

/// Failures of one host's workers within this window blacklist it...
const BLACKLIST_WINDOW: Duration = Duration::from_secs(60);
/// ...when there are this many.
const BLACKLIST_FAILURES: u32 = 3;
/// A live member that has not rejoined a new generation by then has failed.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The membership core's policy from the job's configuration.
pub(super) fn policy(cfg: &JobConfig, e: &ElasticConfig) -> Policy {
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
    }
}

/// Runs the elastic job described by `cfg` (whose `elastic` part is set).
pub(super) async fn run(cfg: JobConfig) -> Result<Ending, JobError> {
    let Some(e) = cfg.elastic.clone() else {
        return Err(JobError::Config("not an elastic job".into()));
    };
    let (secret, data_token) = job_secrets()?;
    let mut server = Server::bind(SocketAddr::new(bind_address(&cfg)?, 0), secret.clone()).await?;
    let port = server.local_addr().port();
    let (disc_tx, disc_rx) = mpsc::channel(4);
    let discovery = tokio::spawn(discovery::watch(
        Discovery {
            script: e.discovery_script.clone(),
            interval: e.discovery_interval,
            timeout: e.discovery_timeout,
            slots_per_host: e.slots_per_host,
        },
        disc_tx,
    ));
    let (events_tx, events_rx) = mpsc::channel(1024);
    let knobs = knobs(&cfg);
    let mut driver = Driver {
        core: Membership::new(policy(&cfg, &e)),
        stall: StallConfig::from_knobs(&knobs),
        knobs,
        cfg,
        secret,
        data_token,
        port,
        started: tokio::time::Instant::now(),
        workers: HashMap::new(),
        next_id: 0,
        addrs: HashMap::new(),
        forwarders: Vec::new(),
        stopping: Vec::new(),
        events: events_tx,
        inspector: None,
        ending: None,
    };
    let ending = driver.run(&mut server, disc_rx, events_rx).await;
    discovery.abort();
    driver.wind_down().await;
    Ok(ending)
}
