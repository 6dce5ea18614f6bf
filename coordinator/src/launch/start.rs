//! Starting a worker of a job: directly on this machine, through ssh on
//! others, with its output forwarded. [`ProcessLauncher`] is the job
//! driver's launcher for real jobs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use control::Secret;
use elastic::membership::SlotId;
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::task::JoinHandle;

use super::address::{control_addresses, is_this_machine};
use super::launcher::{LaunchError, Launcher, Started};
use super::output::{self, Stream};
use super::process::{self, Spec, WorkerProcess};
use super::ssh::{self, SshOptions};
use crate::config::JobConfig;

#[derive(Debug, thiserror::Error)]
#[error("cannot start rank {rank} on {host} ({program}): {why}")]
pub struct StartError {
    pub rank: usize,
    pub host: String,
    pub program: String,
    pub why: String,
}

/// What elasticrun tells a worker about the job (the secret aside).
fn job_env(cfg: &JobConfig, w: &WorkerStart<'_>) -> Vec<(String, String)> {
    let mut env = vec![
        (control::env::COORDINATOR.into(), w.coordinator.to_string()),
        (control::env::HOST.into(), w.host.to_owned()),
        (control::env::SLOT.into(), w.slot.to_string()),
        (
            control::env::START_TIMEOUT.into(),
            cfg.start_timeout.as_secs_f64().to_string(),
        ),
        (
            control::env::COORDINATOR_TIMEOUT.into(),
            cfg.coordinator_timeout.as_secs_f64().to_string(),
        ),
    ];
    if let Some(e) = &cfg.elastic {
        env.push((
            control::env::ELASTIC_TIMEOUT.into(),
            e.elastic_timeout.as_secs_f64().to_string(),
        ));
    }
    env
}

/// A worker to start: where, for which slot, and the coordinator it dials.
#[derive(Debug)]
pub struct WorkerStart<'a> {
    /// The number its output lines carry (`[N]`): its rank in a static job,
    /// its worker id in an elastic one.
    pub label: usize,
    pub host: &'a str,
    pub slot: u32,
    /// The coordinator address this host dials.
    pub coordinator: SocketAddr,
}

/// Starts one worker, with its output forwarded by the returned tasks.
pub async fn start_one(
    cfg: &JobConfig,
    secret: &Secret,
    one: &WorkerStart<'_>,
) -> Result<(WorkerProcess, Vec<JoinHandle<std::io::Result<()>>>), StartError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let ssh_opts = SshOptions {
        port: cfg.ssh_port,
        identity_file: cfg.ssh_identity_file.clone(),
    };
    let host = one.host;
    let mut env = job_env(cfg, one);
    let (argv, stdin_line) = if is_this_machine(host) {
        // In the environment, never on a command line: not visible in ps.
        env.push((control::env::SECRET.into(), secret.to_hex()));
        (cfg.command.clone(), None)
    } else {
        let mut all: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| ssh::forwarded(k) && !k.starts_with(control::env::PREFIX))
            .collect();
        all.append(&mut env);
        (
            ssh::command(host, &ssh_opts, &cwd, &all, &cfg.command),
            Some(secret.to_hex()),
        )
    };
    let spec = Spec {
        rank: one.label,
        host,
        argv: &argv,
        env: &env,
        stdin_line,
    };
    let (w, pipes) = process::spawn(spec).await.map_err(|e| StartError {
        rank: one.label,
        host: host.to_owned(),
        program: argv.first().cloned().unwrap_or_default(),
        why: e.to_string(),
    })?;
    let file = |s| {
        cfg.output_dir
            .as_ref()
            .map(|d| output::rank_file(d, one.label, s))
    };
    let ts = cfg.output_timestamps;
    let forwarders = vec![
        tokio::spawn(output::forward(
            pipes.stdout,
            one.label,
            Stream::Stdout,
            ts,
            file(Stream::Stdout),
        )),
        tokio::spawn(output::forward(
            pipes.stderr,
            one.label,
            Stream::Stderr,
            ts,
            file(Stream::Stderr),
        )),
    ];
    Ok((w, forwarders))
}

/// Starts workers as processes (locally or through ssh) that dial the
/// coordinator listening on `port`, and forwards their output.
#[derive(Debug)]
pub struct ProcessLauncher {
    cfg: JobConfig,
    secret: Secret,
    port: u16,
    forwarders: Vec<JoinHandle<std::io::Result<()>>>,
}

impl ProcessLauncher {
    pub fn new(cfg: JobConfig, secret: Secret, port: u16) -> Self {
        Self {
            cfg,
            secret,
            port,
            forwarders: Vec::new(),
        }
    }

    async fn start_process(
        &mut self,
        label: usize,
        slot: &SlotId,
    ) -> Result<Box<dyn Started>, LaunchError> {
        let iface = self.cfg.network_interface.as_deref();
        let addrs = control_addresses(&[slot.host.as_str()], iface)?;
        let ip = addrs
            .advertised
            .first()
            .copied()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let one = WorkerStart {
            label,
            host: &slot.host,
            slot: slot.slot,
            coordinator: SocketAddr::new(ip, self.port),
        };
        let (process, mut forwarders) = start_one(&self.cfg, &self.secret, &one).await?;
        self.forwarders.append(&mut forwarders);
        Ok(Box::new(process))
    }
}

impl Launcher for ProcessLauncher {
    fn start<'a>(
        &'a mut self,
        label: usize,
        slot: &'a SlotId,
    ) -> BoxFuture<'a, Result<Box<dyn Started>, LaunchError>> {
        self.start_process(label, slot).boxed()
    }

    /// Waits until every worker's output has been forwarded.
    fn finish(&mut self) -> BoxFuture<'_, ()> {
        async move {
            for f in self.forwarders.drain(..) {
                let _ = f.await;
            }
        }
        .boxed()
    }
}
