//! Starting a worker of a job: directly on this machine, through ssh on
//! others, with its output forwarded. [`ProcessLauncher`] is the job
//! driver's launcher for real jobs.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use control::Secret;
use elastic::hosts::HostSlots;
use elastic::membership::SlotId;
use futures::FutureExt;
use futures::future::BoxFuture;
use nix::unistd::Pid;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinHandle;

use super::address::{control_addresses, is_this_machine};
pub use super::launcher::StartError;
use super::launcher::{EXIT_POLL, EXIT_SWEEP, LaunchError, Launcher, Started};
use super::output::{self, Stream};
use super::process::{self, Spec, WorkerProcess};
use super::program_env::{Restart, StaticLayout, omp_threads, program_env};
use super::srun::StepWatch;
use super::ssh::{self, SshOptions};
use super::warm::{self, SharedPool};
use crate::config::JobConfig;
use crate::job::{STOP_GRACE, Say};
use control::alloc_env;

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
        (
            control::env::GLOO_TIMEOUT_SECONDS.into(),
            cfg.data_timeout.as_secs_f64().to_string(),
        ),
        // Empty when not pinned, so that a value this environment happens to
        // hold does not reach the workers.
        (
            control::env::THREAD_AFFINITY.into(),
            cfg.engine_cpus.as_deref().map(cpu_list).unwrap_or_default(),
        ),
        (
            control::env::DATA_ALL_INTERFACES.into(),
            u8::from(w.spans_hosts).to_string(),
        ),
        (control::env::TRANSPORT.into(), cfg.transport.name().into()),
        // Always set, so that a value this environment happens to hold does
        // not reach the workers.
        (
            control::env::SHARED_MEMORY.into(),
            u8::from(cfg.shared_memory).to_string(),
        ),
        (
            control::env::CONNECTIONS.into(),
            cfg.connections.name().into(),
        ),
        // The runtime in each worker logs at elasticrun's own level.
        (control::env::LOG_LEVEL.into(), cfg.log_level.name().into()),
    ];
    if let Some(e) = &cfg.elastic {
        env.push((
            control::env::ELASTIC_TIMEOUT.into(),
            e.elastic_timeout.as_secs_f64().to_string(),
        ));
        if e.hot_spares > 0 {
            env.push((control::env::HOT_SPARES.into(), e.hot_spares.to_string()));
        }
    }
    env
}

/// `0,2,4`, as [`control::env::parse_cpu_list`] reads it.
fn cpu_list(cpus: &[usize]) -> String {
    let ids: Vec<String> = cpus.iter().map(usize::to_string).collect();
    ids.join(",")
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
    /// The job may span hosts (see [`control::env::DATA_ALL_INTERFACES`]).
    pub spans_hosts: bool,
    /// A static job's torchrun and Horovod variables for this worker
    /// ([`super::program_env`]); empty in an elastic job.
    pub program_env: Vec<(String, String)>,
}

/// Starts one worker, with its output forwarded by the returned tasks; on
/// this machine through the process `warm` holds for its slot, if any
/// (and then another is started ahead for the slot's next start).
pub async fn start_one(
    cfg: &JobConfig,
    secret: &Secret,
    one: &WorkerStart<'_>,
    warm: Option<&SharedPool>,
) -> Result<Forwarded, StartError> {
    let mut env = one.program_env.clone();
    env.append(&mut job_env(cfg, one));
    let tunables = std::env::var_os(alloc_env::GLIBC_TUNABLES);
    env.extend(alloc_env::malloc_tunables(tunables.as_deref()));
    let local = is_this_machine(one.host) && cfg.slurm.is_none();
    let (w, pipes, step) = match warm.filter(|_| local) {
        Some(pool) => {
            let mut all = env.clone();
            all.push((control::env::SECRET.into(), secret.to_hex()));
            let (waiting, rank0) = {
                let mut p = pool.lock().unwrap_or_else(PoisonError::into_inner);
                (p.take(one.slot).map(|w| (w, p.line(&all))), p.rank0())
            };
            let child = waiting.and_then(|(w, line)| w.start(line, env.clone(), rank0.clone()));
            let started = match child {
                Some(child) => process::started(one.label, one.host, child)
                    .map(|(w, p)| (w, p, None))
                    .map_err(|e| start_error(one, &cfg.command, &e))?,
                None => spawn_worker(cfg, secret, one, env.clone()).await?,
            };
            if env.iter().any(|(k, v)| k == "RANK" && v == "0") {
                let pid = started.0.group().map_or(0, |g| g.as_raw());
                rank0.store(
                    u32::try_from(pid).unwrap_or(0),
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
            // Without the secret: the process waiting gets it when it starts.
            warm::prestart_later(pool, one.slot, env);
            started
        }
        None => spawn_worker(cfg, secret, one, env).await?,
    };
    forward(cfg, one, w, pipes, step)
}

fn start_error(
    one: &WorkerStart<'_>,
    argv: &[std::ffi::OsString],
    e: &impl ToString,
) -> StartError {
    StartError {
        rank: one.label,
        host: one.host.to_owned(),
        program: argv
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        why: e.to_string(),
    }
}

/// Starts a worker's process, here or on its host, with `env` added.
async fn spawn_worker(
    cfg: &JobConfig,
    secret: &Secret,
    one: &WorkerStart<'_>,
    mut env: Vec<(String, String)>,
) -> Result<(WorkerProcess, process::Pipes, Option<Arc<StepWatch>>), StartError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let ssh_opts = SshOptions {
        port: cfg.ssh_port,
        identity_file: cfg.ssh_identity_file.clone(),
    };
    let host = one.host;
    let (argv, stdin_line) = if is_this_machine(host) && cfg.slurm.is_none() {
        // In the environment, never on a command line: not visible in ps.
        env.push((control::env::SECRET.into(), secret.to_hex()));
        (cfg.command.clone(), None)
    } else {
        let mut all: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| ssh::forwarded(k) && !k.starts_with(control::env::PREFIX))
            .collect();
        if cfg.slurm.is_some() {
            // srun gives each step Slurm's variables for it.
            all.retain(|(k, _)| !k.starts_with("SLURM_"));
        }
        all.append(&mut env);
        let argv = match &cfg.slurm {
            // A step of the allocation, on this host too.
            Some(a) => super::srun::command(host, a.cpus_per_task, &cwd, &cfg.command),
            None => ssh::command(host, &ssh_opts, &cwd, &cfg.command),
        };
        (argv, Some(ssh::stdin_text(&secret.to_hex(), &all)))
    };
    let step = cfg.slurm.as_ref().map(|_| Arc::new(StepWatch::default()));
    let spec = Spec {
        rank: one.label,
        host,
        argv: &argv,
        env: &env,
        stdin_line,
        step: step.clone(),
    };
    let (w, pipes) = process::spawn(spec)
        .await
        .map_err(|e| start_error(one, &argv, &e))?;
    Ok((w, pipes, step))
}

/// A started worker and the tasks forwarding its output.
type Forwarded = (WorkerProcess, Vec<JoinHandle<std::io::Result<()>>>);

/// Forwards a started worker's output.
fn forward(
    cfg: &JobConfig,
    one: &WorkerStart<'_>,
    w: WorkerProcess,
    pipes: process::Pipes,
    step: Option<Arc<StepWatch>>,
) -> Result<Forwarded, StartError> {
    let file = |s| {
        cfg.output_dir
            .as_ref()
            .map(|d| output::rank_file(d, one.label, s))
    };
    let ts = cfg.output_timestamps;
    let fd = |p: std::io::Result<std::os::fd::OwnedFd>| {
        p.map_err(|e| StartError {
            rank: one.label,
            host: one.host.to_owned(),
            program: "its output pipe".into(),
            why: e.to_string(),
        })
    };
    let (out, err) = (
        fd(pipes.stdout.into_owned_fd())?,
        fd(pipes.stderr.into_owned_fd())?,
    );
    let label = one.label;
    let tap = step.map(|w| w as Arc<dyn output::Tap>);
    let forwarders = vec![
        output::spawn_forward(out, label, Stream::Stdout, ts, file(Stream::Stdout), None),
        output::spawn_forward(err, label, Stream::Stderr, ts, file(Stream::Stderr), tap),
    ];
    Ok((w, forwarders))
}

/// A started worker's output forwarding, and the process group whose
/// processes hold its pipes.
#[derive(Debug)]
struct Output {
    group: Option<Pid>,
    forwarders: Vec<JoinHandle<std::io::Result<()>>>,
}

impl Output {
    /// Whether every pipe of the worker has been read to its end.
    fn ended(&self) -> bool {
        self.forwarders.iter().all(JoinHandle::is_finished)
    }
}

/// Waits up to `limit` for the output of `outputs` to end; whether it did.
async fn drain(outputs: &mut [Output], limit: Duration) -> bool {
    let open = outputs
        .iter_mut()
        .flat_map(|o| o.forwarders.iter_mut())
        .filter(|f| !f.is_finished());
    let all = futures::future::join_all(open);
    tokio::time::timeout(limit, all).await.is_ok()
}

/// How long the workers' output is forwarded once the job has ended before
/// the processes still holding it open are stopped.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// Starts workers as processes (locally or through ssh) that dial the
/// coordinator listening on `port`, and forwards their output.
#[derive(Debug)]
pub struct ProcessLauncher {
    cfg: JobConfig,
    secret: Secret,
    port: u16,
    /// The coordinator listens on every interface: hosts other than this
    /// machine may take part.
    spans_hosts: bool,
    /// Each started worker's output forwarding, while it runs.
    outputs: Vec<Output>,
    /// A static job's layout: its workers get torchrun's and Horovod's
    /// variables.
    layout: Option<StaticLayout>,
    /// An elastic job's hosts and their slots, as discovery last gave them.
    host_slots: HashMap<String, usize>,
    /// SIGCHLD, which every exit of a worker (or of the ssh carrying it)
    /// sends: the driver's news of exits. Made before the first worker
    /// starts; `None` until then, or where it cannot be had.
    child_exits: Option<Signal>,
    /// Which start of a static job's workers this is.
    restart: Restart,
    /// Workers started so far.
    started: usize,
    /// When the job was seen failing, for the restart that follows.
    failing: Arc<Mutex<Option<Instant>>>,
    /// Python processes started ahead, one per slot of this machine
    /// (`--prestart-imports`).
    warm: Option<SharedPool>,
}

impl ProcessLauncher {
    /// Starts workers that dial the coordinator listening on `coordinator`.
    pub fn new(cfg: JobConfig, secret: Secret, coordinator: SocketAddr) -> Self {
        Self {
            cfg,
            secret,
            port: coordinator.port(),
            spans_hosts: coordinator.ip().is_unspecified(),
            outputs: Vec::new(),
            layout: None,
            host_slots: HashMap::new(),
            child_exits: None,
            restart: Restart::default(),
            started: 0,
            failing: Arc::default(),
            warm: None,
        }
    }

    /// Where [`Launcher::job_failing`] notes when the job was seen failing.
    pub fn failure_clock(&self) -> Arc<Mutex<Option<Instant>>> {
        Arc::clone(&self.failing)
    }

    /// After a restart's last worker started: how long since the failure.
    fn restarted(&self) {
        let (Some(at), Some(l)) = (self.restart.failed_at, &self.layout) else {
            return;
        };
        if self.started != l.placements.len() {
            return;
        }
        let Restart { count, max, .. } = self.restart;
        Say::stderr(self.cfg.output_timestamps).line(format_args!(
            "restart {count} of {max}: every worker started again {} ms after the failure",
            at.elapsed().as_millis()
        ));
    }

    /// Which start of the job's workers this launcher makes
    /// (`--max-restarts`).
    /// Starts this machine's workers through `warm`'s processes.
    pub fn with_warm(mut self, warm: Option<SharedPool>) -> Self {
        self.warm = warm;
        self
    }

    pub fn with_restart(mut self, restart: Restart) -> Self {
        self.restart = restart;
        self
    }

    /// Listens for SIGCHLD from now on, if it does not yet.
    fn listen_for_exits(&mut self) {
        if self.child_exits.is_none() {
            match signal(SignalKind::child()) {
                Ok(s) => self.child_exits = Some(s),
                Err(e) => tracing::debug!(%e, "no SIGCHLD stream: the workers are polled"),
            }
        }
    }

    /// Gives a static job's workers their places as torchrun and Horovod
    /// name them.
    pub fn with_layout(mut self, layout: Option<StaticLayout>) -> Self {
        self.layout = layout;
        self
    }

    /// torchrun's and Horovod's variables for the worker on `slot`, which
    /// dials the coordinator at `ip`.
    fn program_env(&self, slot: &SlotId, ip: IpAddr) -> Vec<(String, String)> {
        let Some(l) = &self.layout else {
            return Vec::new();
        };
        let (Some(p), Some(rank0)) = (l.placement(&slot.host, slot.slot), l.rank0_host()) else {
            return Vec::new();
        };
        // Rank 0 on this machine: reachable where the coordinator is.
        let master = match (is_this_machine(rank0), is_this_machine(&slot.host)) {
            (true, true) => Ipv4Addr::LOCALHOST.to_string(),
            (true, false) => ip.to_string(),
            (false, _) => rank0.to_owned(),
        };
        let size = l.placements.len();
        let hosts = l
            .placements
            .iter()
            .map(|q| q.host)
            .max()
            .map_or(0, |m| m + 1);
        program_env(
            p,
            size,
            hosts,
            &slot.host,
            &master,
            l.master_port,
            self.restart,
        )
    }

    /// How many of the job's workers run on `slot`'s host: a static job's
    /// local size there; in an elastic job the slots discovery last gave the
    /// host (at most `--max-np`), 1 for a host it has not named.
    fn workers_on(&self, slot: &SlotId) -> usize {
        if let Some(l) = &self.layout {
            return l
                .placement(&slot.host, slot.slot)
                .map_or(1, |p| p.local_size);
        }
        let cap = self
            .cfg
            .elastic
            .as_ref()
            .and_then(|e| e.max_np)
            .unwrap_or(usize::MAX);
        self.host_slots
            .get(&slot.host)
            .copied()
            .unwrap_or(1)
            .min(cap)
    }

    async fn start_process(
        &mut self,
        label: usize,
        slot: &SlotId,
    ) -> Result<Box<dyn Started>, LaunchError> {
        self.listen_for_exits();
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
            spans_hosts: self.spans_hosts,
            program_env: {
                let mut env = self.program_env(slot, ip);
                let inherited = std::env::var_os("OMP_NUM_THREADS").is_some();
                env.extend(omp_threads(self.workers_on(slot), inherited));
                env
            },
        };
        let warm = self.warm.as_ref();
        let (process, forwarders) = start_one(&self.cfg, &self.secret, &one, warm).await?;
        // Workers whose output has ended are done with: their process
        // groups may be gone, and their ids another's.
        self.outputs.retain(|o| !o.ended());
        self.outputs.push(Output {
            group: process.group(),
            forwarders,
        });
        self.started += 1;
        self.restarted();
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

    fn hosts_discovered(&mut self, hosts: &[HostSlots]) {
        self.host_slots = hosts.iter().map(|h| (h.host.clone(), h.slots)).collect();
    }

    fn job_failing(&mut self) {
        if let Ok(mut at) = self.failing.lock() {
            at.get_or_insert_with(Instant::now);
        }
    }

    /// Every exit of a child is a SIGCHLD, once their stream is open.
    fn exit_sweep(&self) -> Duration {
        if self.child_exits.is_some() {
            EXIT_SWEEP
        } else {
            EXIT_POLL
        }
    }

    /// The next SIGCHLD (one that came since the last call, at once).
    fn exit_news(&mut self) -> BoxFuture<'_, ()> {
        self.listen_for_exits();
        async move {
            let heard = match self.child_exits.as_mut() {
                Some(s) => s.recv().await.is_some(),
                None => false,
            };
            if !heard {
                tokio::time::sleep(EXIT_POLL).await;
            }
        }
        .boxed()
    }

    /// Waits until every worker's output has been forwarded, for at most
    /// `OUTPUT_DRAIN` (2 s): output still held open then (by children a worker
    /// left running, a logger or a `nohup`) is that of processes the job
    /// has no more use for, which are stopped, and what they said by then
    /// forwarded.
    fn finish(&mut self) -> BoxFuture<'_, ()> {
        async move {
            if drain(&mut self.outputs, OUTPUT_DRAIN).await {
                return;
            }
            // Only the groups of workers whose output is still open: their
            // processes hold it, so those groups still exist.
            let open: Vec<Pid> = self
                .outputs
                .iter()
                .filter(|o| !o.ended())
                .filter_map(|o| o.group)
                .collect();
            let stopped = process::stop_groups(&open, STOP_GRACE).await;
            tracing::warn!(
                groups = stopped,
                "processes the workers left running still held their output {OUTPUT_DRAIN:?} \
                 after the job ended; stopped them"
            );
            if !drain(&mut self.outputs, OUTPUT_DRAIN).await {
                tracing::warn!(
                    "output still open after its processes were stopped; not waiting for it"
                );
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cli::Cli;
    use crate::config::file::ConfigFile;

    fn config(args: &str) -> JobConfig {
        let cli = Cli::parse_args(
            std::iter::once("elasticrun".to_owned())
                .chain(args.split_whitespace().map(str::to_owned)),
        )
        .unwrap();
        crate::config::resolve(&cli, &|_| None, &ConfigFile::default()).unwrap()
    }

    fn env_of(cfg: &JobConfig, slot: u32) -> Vec<(String, String)> {
        let one = WorkerStart {
            label: 0,
            host: "localhost",
            slot,
            coordinator: "127.0.0.1:9".parse().unwrap(),
            spans_hosts: false,
            program_env: Vec::new(),
        };
        job_env(cfg, &one)
    }

    fn value<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn an_elastic_jobs_worker_counts_the_slots_discovery_gave_its_host() {
        let cfg = config("--host-discovery-script ./hosts.sh --min-np 1 --max-np 3 prog");
        let secret = control::Secret::from_hex(&"5a".repeat(32)).unwrap();
        let mut l = ProcessLauncher::new(cfg, secret, "127.0.0.1:9".parse().unwrap());
        let on = |h: &str| SlotId::new(h, 0);
        assert_eq!(l.workers_on(&on("a")), 1, "before any discovery");
        let hosts = [("a", 4), ("b", 1)].map(|(h, slots)| HostSlots {
            host: h.into(),
            slots,
        });
        l.hosts_discovered(&hosts);
        // At most --max-np of the job's workers run on a host.
        assert_eq!(l.workers_on(&on("a")), 3);
        assert_eq!(l.workers_on(&on("b")), 1);
        assert_eq!(l.workers_on(&on("c")), 1);
        l.hosts_discovered(&hosts[1..]);
        assert_eq!(
            l.workers_on(&on("a")),
            1,
            "a host discovery no longer names"
        );
    }

    #[test]
    fn workers_get_the_data_timeout_and_the_cpu_list() {
        let cfg = config("--gloo-timeout-seconds 2.5 --thread-affinity 4,6 -np 2 ./t");
        let env = env_of(&cfg, 1);
        assert_eq!(value(&env, control::env::GLOO_TIMEOUT_SECONDS), Some("2.5"));
        assert_eq!(value(&env, control::env::THREAD_AFFINITY), Some("4,6"));
        // Not pinned: set empty, so that nothing inherited pins the workers.
        let env = env_of(&config("-np 2 ./t"), 0);
        assert_eq!(value(&env, control::env::GLOO_TIMEOUT_SECONDS), Some("60"));
        assert_eq!(value(&env, control::env::THREAD_AFFINITY), Some(""));
        for name in env.iter().map(|(k, _)| k) {
            assert!(control::env::ALL.contains(&name.as_str()), "{name}");
        }
    }

    #[test]
    fn workers_get_the_transport_and_whether_to_share_memory() {
        let env = env_of(&config("-np 2 ./t"), 0);
        assert_eq!(value(&env, control::env::TRANSPORT), Some("tcp"));
        assert_eq!(value(&env, control::env::SHARED_MEMORY), Some("1"));
        let env = env_of(&config("--no-shared-memory -np 2 ./t"), 0);
        assert_eq!(value(&env, control::env::SHARED_MEMORY), Some("0"));
        // With QUIC it is passed on all the same; the worker has no use for it.
        let cfg = config("--transport quic --no-shared-memory -np 2 ./t");
        let env = env_of(&cfg, 1);
        assert_eq!(value(&env, control::env::TRANSPORT), Some("quic"));
        assert_eq!(value(&env, control::env::SHARED_MEMORY), Some("0"));
    }

    #[test]
    fn workers_log_at_the_jobs_level() {
        let env = env_of(&config("-np 2 ./t"), 0);
        assert_eq!(value(&env, control::env::LOG_LEVEL), Some("warning"));
        let env = env_of(&config("--log-level DEBUG -np 2 ./t"), 1);
        assert_eq!(value(&env, control::env::LOG_LEVEL), Some("debug"));
        let env = env_of(&config("--verbose -np 2 ./t"), 1);
        assert_eq!(value(&env, control::env::LOG_LEVEL), Some("debug"));
    }
}
