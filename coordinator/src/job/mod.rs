//! One job, start to end: place ranks, start the control-plane server and the
//! workers, forward their output, hand out assignments, and supervise until
//! every worker has exited (or one fails, or elasticrun is told to stop).

pub mod assign;
mod commands;
pub mod discovery;
mod driver;
pub mod links;
mod setup;

use std::net::SocketAddr;
use std::time::Duration;

use control::{Knobs, PendingReport, Secret};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::config::{HostSpec, JobConfig, StallCheck};
use crate::launch::address::{AddressError, control_addresses};
use crate::launch::process::{self, WorkerProcess};
use crate::launch::start::{Plan, StartError, Started, start_all};
use crate::layout::place;
use crate::rendezvous::Rendezvous;
use crate::server::{LinkEnd, Server, WorkerLink};
use crate::stall::{self, Beat, StallConfig};
use elastic::hosts::{HostSlots, parse_hostfile};

/// How long stopped workers get between SIGTERM and SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(3);
/// A worker silent for this long (no heartbeat) has failed.
pub(crate) const SILENCE: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Server(#[from] crate::server::ServerError),
    #[error(transparent)]
    Start(#[from] StartError),
}

/// How the job ended, as elasticrun's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Success,
    Failed,
    Interrupted,
    Terminated,
}

impl Ending {
    pub fn code(self) -> u8 {
        match self {
            Ending::Success => 0,
            Ending::Failed => 1,
            Ending::Interrupted => 130,
            Ending::Terminated => 143,
        }
    }
}

/// The hosts of the job and the number of processes.
async fn hosts_and_np(cfg: &JobConfig) -> Result<(Vec<HostSlots>, usize), JobError> {
    let hosts = match &cfg.hosts {
        HostSpec::Localhost => {
            let np = cfg
                .np
                .ok_or_else(|| JobError::Config("-np is needed when no hosts are given".into()))?;
            vec![HostSlots {
                host: "localhost".into(),
                slots: np,
            }]
        }
        HostSpec::List(h) => h.clone(),
        HostSpec::File(p) => {
            let text = tokio::fs::read_to_string(p).await.map_err(|e| {
                JobError::Config(format!("cannot read hostfile {}: {e}", p.display()))
            })?;
            parse_hostfile(&text).map_err(|e| JobError::Config(format!("{}: {e}", p.display())))?
        }
    };
    let np = cfg
        .np
        .unwrap_or_else(|| hosts.iter().map(|h| h.slots).sum());
    Ok((hosts, np))
}

pub(crate) fn knobs(cfg: &JobConfig) -> Knobs {
    let t = &cfg.tuning;
    Knobs {
        fusion_threshold_bytes: t.fusion_threshold_bytes.value,
        cycle_time_us: t.cycle_time.value.as_micros() as u64,
        cache_capacity: u32::try_from(t.cache_capacity.value).unwrap_or(u32::MAX),
        hierarchical_allreduce: t.hierarchical_allreduce.value,
        hierarchical_allgather: t.hierarchical_allgather.value,
        segment_bytes: t.segment_bytes.value,
        timeline: cfg.timeline.as_ref().map(|t| t.file.display().to_string()),
        timeline_mark_cycles: cfg.timeline.as_ref().is_some_and(|t| t.mark_cycles),
        stall_warning_ms: match cfg.stall_check {
            StallCheck::Off => None,
            StallCheck::On { warning, .. } => Some(millis(warning)),
        },
        stall_shutdown_ms: match cfg.stall_check {
            StallCheck::Off | StallCheck::On { shutdown: None, .. } => None,
            StallCheck::On {
                shutdown: Some(d), ..
            } => Some(millis(d)),
        },
        autotune: cfg.autotune.as_ref().map(|a| control::Autotune {
            log_file: a.log_file.as_ref().map(|p| p.display().to_string()),
            warmup_samples: a.warmup_samples,
            steps_per_sample: a.steps_per_sample,
            max_samples: a.max_samples,
            gaussian_process_noise: a.gaussian_process_noise,
            fixed: t.user_set(),
        }),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The job's secret and its data-plane token.
pub(crate) fn job_secrets() -> Result<(Secret, u64), JobError> {
    let secret = Secret::generate().map_err(|e| JobError::Config(e.to_string()))?;
    let token_bytes = control::nonce().map_err(|e| JobError::Config(e.to_string()))?;
    let data_token = u64::from_le_bytes(token_bytes[..8].try_into().unwrap_or_default());
    Ok((secret, data_token))
}

/// Runs the job described by `cfg` (an elastic one when it has a discovery
/// script).
pub async fn run(cfg: JobConfig) -> Result<Ending, JobError> {
    if cfg.elastic.is_some() {
        return setup::run(cfg).await;
    }
    let (hosts, np) = hosts_and_np(&cfg).await?;
    let placements = place(&hosts, np).map_err(|e| JobError::Config(e.to_string()))?;
    let names: Vec<&str> = hosts.iter().map(|h| h.host.as_str()).collect();
    let addresses = control_addresses(&names, cfg.network_interface.as_deref())?;
    let (secret, data_token) = job_secrets()?;
    let server = Server::bind(SocketAddr::new(addresses.bind, 0), secret.clone()).await?;
    tracing::debug!(addr = %server.local_addr(), "control plane listening");

    let plan = Plan {
        cfg: &cfg,
        hosts: &hosts,
        placements: &placements,
        coordinator_port: server.local_addr().port(),
        addresses: &addresses,
        secret: &secret,
    };
    let mut started = Started::default();
    if let Err(e) = start_all(&plan, &mut started).await {
        process::stop_all(&mut started.workers, STOP_GRACE).await;
        return Err(e.into());
    }
    let (problems_tx, problems) = mpsc::channel::<String>(64);
    let (stop_tx, stop_rx) = watch::channel::<Option<String>>(None);
    let rv = Rendezvous::new(0, &hosts, &placements);
    let control = tokio::spawn(control_plane(
        server,
        rv,
        knobs(&cfg),
        data_token,
        cfg.start_timeout,
        problems_tx,
        stop_rx,
    ));

    let Started {
        mut workers,
        forwarders,
    } = started;
    let ending = supervise(&mut workers, problems).await;
    if ending != Ending::Success {
        let _ = stop_tx.send(Some("the job is stopping".into()));
        process::stop_all(&mut workers, STOP_GRACE).await;
    }
    control.abort();
    for f in forwarders {
        let _ = f.await;
    }
    Ok(ending)
}

/// Hands out assignments, then watches every worker's heartbeats; whatever
/// goes wrong is reported on `problems`.
async fn control_plane(
    mut server: Server,
    rv: Rendezvous,
    knobs: Knobs,
    data_token: u64,
    start_timeout: Duration,
    problems: mpsc::Sender<String>,
    stop: watch::Receiver<Option<String>>,
) {
    match server
        .rendezvous(rv, &knobs, data_token, start_timeout)
        .await
    {
        Ok(links) => {
            let (beats, inspector) = match StallConfig::from_knobs(&knobs) {
                Some(cfg) => {
                    let (tx, rx) = mpsc::channel((links.len() * 4).max(64));
                    (Some(tx), Some(stall::inspect(cfg, rx, problems.clone())))
                }
                None => (None, None),
            };
            for link in links {
                tokio::spawn(watch_link(
                    link,
                    problems.clone(),
                    stop.clone(),
                    beats.clone(),
                ));
            }
            drop(beats);
            if let Some(inspector) = inspector {
                inspector.await;
            }
            // Keep the listener (and its refusals of strangers) for the job's life.
            std::future::pending::<()>().await;
        }
        Err(e) => {
            let _ = problems.send(e.to_string()).await;
        }
    }
}

/// Watches one worker's control connection: a silent worker is a problem; a
/// worker gone has nothing pending any more, so whatever the others still wait
/// for from it is a stall.
async fn watch_link(
    link: WorkerLink,
    problems: mpsc::Sender<String>,
    stop: watch::Receiver<Option<String>>,
    beats: Option<mpsc::Sender<Beat>>,
) {
    let slot = link.slot.clone();
    let (rank, end) = link.watch(SILENCE, stop, beats.clone()).await;
    if let LinkEnd::Silent(_) = end {
        let _ = problems
            .send(format!("rank {rank} ({slot}) failed: {end}"))
            .await;
    }
    if let Some(beats) = beats {
        let gone = Beat {
            rank,
            slot,
            pending: PendingReport::default(),
        };
        let _ = tokio::time::timeout(stall::POLL * 4, beats.send(gone)).await;
    }
}

/// SIGINT and SIGTERM to elasticrun, which end the job.
pub(crate) struct Stops {
    int: Signal,
    term: Signal,
}

impl Stops {
    /// `None` (and says so) when the handlers cannot be installed.
    pub(crate) fn install() -> Option<Stops> {
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => Some(Stops { int, term }),
            _ => {
                eprintln!("elasticrun: cannot install signal handlers");
                None
            }
        }
    }

    /// The next of the two signals, said on stderr, as the job's ending.
    pub(crate) async fn next(&mut self) -> Ending {
        tokio::select! {
            _ = self.int.recv() => {
                eprintln!("elasticrun: interrupted; stopping every worker");
                Ending::Interrupted
            }
            _ = self.term.recv() => {
                eprintln!("elasticrun: terminated; stopping every worker");
                Ending::Terminated
            }
        }
    }
}

/// Waits for the workers; the first failure, problem report or signal ends it.
async fn supervise(workers: &mut [WorkerProcess], mut problems: mpsc::Receiver<String>) -> Ending {
    let Some(mut stops) = Stops::install() else {
        return Ending::Failed;
    };
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            ending = stops.next() => return ending,
            Some(p) = problems.recv() => {
                eprintln!("elasticrun: {p}; stopping every worker");
                return Ending::Failed;
            }
        }
        let mut all_done = true;
        let mut failed = Vec::new();
        for w in workers.iter_mut() {
            match w.poll() {
                Ok(Some(st)) if st.success() => {}
                Ok(Some(st)) => failed.push(w.describe(st)),
                Ok(None) => all_done = false,
                Err(e) => failed.push(format!("cannot wait for rank {}: {e}", w.rank)),
            }
        }
        if !failed.is_empty() {
            // Several may have ended since the last look: a worker killed by a
            // signal is more likely the cause than peers that exited on losing it.
            failed.sort_by_key(|m| !m.contains("killed by signal"));
            eprintln!("elasticrun: {}; stopping every worker", failed.join("; "));
            return Ending::Failed;
        }
        if all_done {
            return Ending::Success;
        }
    }
}
