//! Starting every worker of a job: directly on this machine, through ssh on
//! others, each with its output forwarded.

use std::net::SocketAddr;

use control::Secret;
use tokio::task::JoinHandle;

use super::address::{ControlAddresses, is_this_machine};
use super::output::{self, Stream};
use super::process::{self, Spec, WorkerProcess};
use super::ssh::{self, SshOptions};
use crate::config::JobConfig;
use crate::hosts::HostSlots;
use crate::layout::Placement;

/// What the job needs to start its workers.
#[derive(Debug)]
pub struct Plan<'a> {
    pub cfg: &'a JobConfig,
    pub hosts: &'a [HostSlots],
    pub placements: &'a [Placement],
    pub coordinator_port: u16,
    pub addresses: &'a ControlAddresses,
    pub secret: &'a Secret,
}

/// The started workers and the tasks forwarding their output.
#[derive(Debug, Default)]
pub struct Started {
    pub workers: Vec<WorkerProcess>,
    pub forwarders: Vec<JoinHandle<std::io::Result<()>>>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot start rank {rank} on {host} ({program}): {why}")]
pub struct StartError {
    pub rank: usize,
    pub host: String,
    pub program: String,
    pub why: String,
}

/// What elasticrun tells a worker about the job (the secret aside).
fn job_env(plan: &Plan<'_>, p: &Placement) -> Vec<(String, String)> {
    let coordinator = SocketAddr::new(plan.addresses.advertised[p.host], plan.coordinator_port);
    vec![
        ("ELASTICRUN_COORDINATOR".into(), coordinator.to_string()),
        ("ELASTICRUN_HOST".into(), plan.hosts[p.host].host.clone()),
        ("ELASTICRUN_SLOT".into(), p.local_rank.to_string()),
        (
            "ELASTICRUN_START_TIMEOUT".into(),
            plan.cfg.start_timeout.as_secs_f64().to_string(),
        ),
    ]
}

/// Starts every worker into `into`; on an error the workers started so far
/// are left there for the caller to stop.
pub async fn start_all(plan: &Plan<'_>, into: &mut Started) -> Result<(), StartError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let ssh_opts = SshOptions {
        port: plan.cfg.ssh_port,
        identity_file: plan.cfg.ssh_identity_file.clone(),
    };
    for p in plan.placements {
        let host = plan.hosts[p.host].host.as_str();
        let mut env = job_env(plan, p);
        let (argv, stdin_line) = if is_this_machine(host) {
            // In the environment, never on a command line: not visible in ps.
            env.push(("ELASTICRUN_SECRET".into(), plan.secret.to_hex()));
            (plan.cfg.command.clone(), None)
        } else {
            let mut all: Vec<(String, String)> = std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .filter(|(k, _)| ssh::forwarded(k) && !k.starts_with("ELASTICRUN_"))
                .collect();
            all.append(&mut env);
            (
                ssh::command(host, &ssh_opts, &cwd, &all, &plan.cfg.command),
                Some(plan.secret.to_hex()),
            )
        };
        let spec = Spec {
            rank: p.rank,
            host,
            argv: &argv,
            env: &env,
            stdin_line,
        };
        let (w, pipes) = process::spawn(spec).await.map_err(|e| StartError {
            rank: p.rank,
            host: host.to_owned(),
            program: argv.first().cloned().unwrap_or_default(),
            why: e.to_string(),
        })?;
        let file = |s| {
            plan.cfg
                .output_dir
                .as_ref()
                .map(|d| output::rank_file(d, p.rank, s))
        };
        let ts = plan.cfg.output_timestamps;
        into.forwarders.push(tokio::spawn(output::forward(
            pipes.stdout,
            p.rank,
            Stream::Stdout,
            ts,
            file(Stream::Stdout),
        )));
        into.forwarders.push(tokio::spawn(output::forward(
            pipes.stderr,
            p.rank,
            Stream::Stderr,
            ts,
            file(Stream::Stderr),
        )));
        into.workers.push(w);
    }
    Ok(())
}
