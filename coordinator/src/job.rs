//! One job, start to end: place ranks, start the control-plane server and the
//! workers, forward their output, hand out assignments, and supervise until
//! every worker has exited (or one fails, or elasticrun is told to stop).

use std::net::SocketAddr;
use std::time::Duration;

use control::{Knobs, Secret};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::config::{HostSpec, JobConfig};
use crate::hosts::{HostSlots, parse_hostfile};
use crate::launch::output::{self, Stream};
use crate::launch::process::{self, WorkerProcess};
use crate::layout::{Placement, place};
use crate::rendezvous::Rendezvous;
use crate::server::Server;

/// How long stopped workers get between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// A worker silent for this long (no heartbeat) has failed.
const SILENCE: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("{0}")]
    Config(String),
    #[error("hosts other than this machine ({0}) need the ssh launcher, which is not built yet")]
    Remote(String),
    #[error(transparent)]
    Server(#[from] crate::server::ServerError),
    #[error("cannot start rank {rank}: {why}")]
    Spawn { rank: usize, why: String },
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

fn is_this_machine(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "::1")
        || nix::unistd::gethostname().is_ok_and(|h| h.to_str() == Some(host))
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

fn knobs(cfg: &JobConfig) -> Knobs {
    let t = &cfg.tuning;
    Knobs {
        fusion_threshold_bytes: t.fusion_threshold_bytes.value,
        cycle_time_us: t.cycle_time.value.as_micros() as u64,
        cache_capacity: u32::try_from(t.cache_capacity.value).unwrap_or(u32::MAX),
        hierarchical_allreduce: t.hierarchical_allreduce.value,
        hierarchical_allgather: t.hierarchical_allgather.value,
        timeline: cfg.timeline.as_ref().map(|t| t.file.display().to_string()),
        timeline_mark_cycles: cfg.timeline.as_ref().is_some_and(|t| t.mark_cycles),
    }
}

fn worker_env(
    coordinator: SocketAddr,
    secret: &Secret,
    host: &str,
    p: &Placement,
    cfg: &JobConfig,
) -> Vec<(String, String)> {
    vec![
        ("ELASTICRUN_COORDINATOR".into(), coordinator.to_string()),
        // Through the environment, never the command line: not visible in ps.
        ("ELASTICRUN_SECRET".into(), secret.to_hex()),
        ("ELASTICRUN_HOST".into(), host.to_owned()),
        ("ELASTICRUN_SLOT".into(), p.local_rank.to_string()),
        (
            "ELASTICRUN_START_TIMEOUT".into(),
            cfg.start_timeout.as_secs_f64().to_string(),
        ),
    ]
}

/// Runs the job described by `cfg`.
pub async fn run(cfg: JobConfig) -> Result<Ending, JobError> {
    let (hosts, np) = hosts_and_np(&cfg).await?;
    let placements = place(&hosts, np).map_err(|e| JobError::Config(e.to_string()))?;
    let remote: Vec<&str> = placements
        .iter()
        .map(|p| hosts[p.host].host.as_str())
        .filter(|h| !is_this_machine(h))
        .collect();
    if let Some(first) = remote.first() {
        return Err(JobError::Remote((*first).to_owned()));
    }
    let secret = Secret::generate().map_err(|e| JobError::Config(e.to_string()))?;
    let token_bytes = control::nonce().map_err(|e| JobError::Config(e.to_string()))?;
    let data_token = u64::from_le_bytes(token_bytes[..8].try_into().unwrap_or_default());
    let mut server = Server::bind(SocketAddr::from(([127, 0, 0, 1], 0)), secret.clone()).await?;
    let coordinator = server.local_addr();

    let mut workers = Vec::with_capacity(np);
    let mut forwarders = Vec::new();
    for p in &placements {
        let host = &hosts[p.host].host;
        let env = worker_env(coordinator, &secret, host, p, &cfg);
        let (w, pipes) =
            process::spawn(&cfg.command, p.rank, host, &env).map_err(|e| JobError::Spawn {
                rank: p.rank,
                why: e.to_string(),
            })?;
        let file = |s| {
            cfg.output_dir
                .as_ref()
                .map(|d| output::rank_file(d, p.rank, s))
        };
        let ts = cfg.output_timestamps;
        forwarders.push(tokio::spawn(output::forward(
            pipes.stdout,
            p.rank,
            Stream::Stdout,
            ts,
            file(Stream::Stdout),
        )));
        forwarders.push(tokio::spawn(output::forward(
            pipes.stderr,
            p.rank,
            Stream::Stderr,
            ts,
            file(Stream::Stderr),
        )));
        workers.push(w);
    }

    let (problems_tx, problems) = mpsc::channel::<String>(64);
    let (stop_tx, stop_rx) = watch::channel::<Option<String>>(None);
    let rv = Rendezvous::new(0, &hosts, &placements);
    let knobs = knobs(&cfg);
    let start_timeout = cfg.start_timeout;
    let control = tokio::spawn(async move {
        match server
            .rendezvous(rv, &knobs, data_token, start_timeout)
            .await
        {
            Ok(links) => {
                for link in links {
                    let (tx, stop) = (problems_tx.clone(), stop_rx.clone());
                    tokio::spawn(async move {
                        let slot = link.slot.clone();
                        if let (rank, end @ crate::server::LinkEnd::Silent(_)) =
                            link.watch(SILENCE, stop).await
                        {
                            let _ = tx.send(format!("rank {rank} ({slot}) failed: {end}")).await;
                        }
                    });
                }
                // Keep the listener (and its refusals of strangers) for the job's life.
                std::future::pending::<()>().await;
            }
            Err(e) => {
                let _ = problems_tx.send(e.to_string()).await;
            }
        }
    });

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

/// Waits for the workers; the first failure, problem report or signal ends it.
async fn supervise(workers: &mut [WorkerProcess], mut problems: mpsc::Receiver<String>) -> Ending {
    let (Ok(mut sigint), Ok(mut sigterm)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        eprintln!("elasticrun: cannot install signal handlers");
        return Ending::Failed;
    };
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = sigint.recv() => {
                eprintln!("elasticrun: interrupted; stopping every worker");
                return Ending::Interrupted;
            }
            _ = sigterm.recv() => {
                eprintln!("elasticrun: terminated; stopping every worker");
                return Ending::Terminated;
            }
            Some(p) = problems.recv() => {
                eprintln!("elasticrun: {p}; stopping every worker");
                return Ending::Failed;
            }
        }
        let mut all_done = true;
        for w in workers.iter_mut() {
            match w.poll() {
                Ok(Some(st)) if st.success() => {}
                Ok(Some(st)) => {
                    eprintln!(
                        "elasticrun: rank {} on {} {}; stopping every worker",
                        w.rank,
                        w.host,
                        process::describe(st)
                    );
                    return Ending::Failed;
                }
                Ok(None) => all_done = false,
                Err(e) => {
                    eprintln!("elasticrun: cannot wait for rank {}: {e}", w.rank);
                    return Ending::Failed;
                }
            }
        }
        if all_done {
            return Ending::Success;
        }
    }
}
