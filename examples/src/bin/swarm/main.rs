//! swarm: a load generator for elasticrun's coordinator. It starts a
//! coordinator process (elasticrun's job driver, server and protocol, with
//! its launcher ordering this process to start workers instead of processes)
//! and holds N simulated workers' real control connections to it over
//! loopback: register, a heartbeat a second, assignments answered, resets
//! rejoined. It times the start, measures the coordinator's CPU while the
//! heartbeats flow, kills one worker, times the new generation, ends the job
//! and prints one JSON line of figures whose names carry their units.
//!
//! ```text
//! swarm --workers 10000 [--slots-per-host 8] [--steady 5] [--seed N] [-- ELASTICRUN OPTIONS]
//! swarm --etcd http://127.0.0.1:2379 --workers 1000 [...]
//! ```
//! With `--etcd`, the workers are pods of etcd mode instead, against two
//! `elasticrun serve` replicas (`pods.rs`).

mod coordinator;
mod pipe;
#[cfg(feature = "etcd")]
mod pods;
mod stats;
mod workers;

use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ::coordinator::malloc;
use clap::Parser;
use control::Secret;
use rand::{RngExt, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

use pipe::Order;
use stats::{Stats, Tally, usage};
use workers::{Identity, Roster};

/// Where the coordinator process finds the job's secret.
const SECRET_VAR: &str = "SWARM_JOB_SECRET";

#[derive(Parser, Debug)]
#[command(
    about = "Load generator for elasticrun's coordinator: N simulated workers' control connections, one kill, figures as JSON"
)]
struct Args {
    /// Simulated workers.
    #[arg(long, default_value_t = 1000)]
    workers: usize,
    /// Workers a simulated host holds.
    #[arg(long, default_value_t = 8)]
    slots_per_host: usize,
    /// Seconds of heartbeats over which the coordinator's CPU is measured.
    #[arg(long, default_value_t = 5.0)]
    steady: f64,
    /// Seed of the choice of the worker killed [default: from the clock].
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds each phase (start, recovery, end) may take before the run fails.
    #[arg(long, default_value_t = 300.0)]
    within: f64,
    /// Simulate pods of etcd mode against the etcd at this URL and two
    /// `elasticrun serve` replicas (the `elasticrun` beside this program).
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Run as the coordinator process (the load generator starts it).
    #[arg(long, hide = true)]
    coordinator: bool,
    /// elasticrun options for the job (after `--`).
    #[arg(last = true)]
    options: Vec<String>,
}

/// The job's shape: how many workers, on hosts of how many slots.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) workers: usize,
    pub(crate) slots_per_host: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The coordinator process runs on elasticrun's own runtime; the load
    // generator on one thread of its own too, its thousands of simulated
    // workers taking turns as the coordinator's links do: on two threads
    // its cross-thread wake-ups took CPU from the coordinator it measures.
    let rt = match ::coordinator::runtime::build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("swarm: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let shape = Shape {
        workers: args.workers.max(1),
        slots_per_host: args.slots_per_host.max(1),
    };
    if args.coordinator {
        let code = rt.block_on(coordinator::run(&shape, &args.options));
        // Its stdin's reader blocks a thread a plain shutdown would wait for.
        rt.shutdown_background();
        return code;
    }
    match rt.block_on(measure(&args, shape)) {
        Ok(figures) => {
            println!("{figures}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("swarm: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The running coordinator process and the load generator's side of it.
struct Run {
    child: Child,
    pid: u32,
    stats: Arc<Stats>,
    roster: Arc<Roster>,
    within: Duration,
}

async fn measure(args: &Args, shape: Shape) -> Result<serde_json::Value, String> {
    let _ = control::limits::raise_open_files();
    let seed = args.seed.unwrap_or_else(clock_seed);
    eprintln!("swarm: {} workers, seed {seed}", shape.workers);
    if let Some(url) = &args.etcd {
        return etcd_mode(args, shape, url, seed).await;
    }
    let t0 = Instant::now();
    let mut run = start(args, shape).await?;
    let n = shape.workers;
    let (g1, first) = run
        .wait("every worker assigned a generation", |t| {
            t.newest().filter(|(_, a)| a.workers == n)
        })
        .await?;
    let registered = run.stats.now().last_registered.unwrap_or(first.last);
    let steady = steady(&run, args.steady).await?;
    let recovery = kill_one(&mut run, seed, g1).await?;
    let quiet = run
        .wait("every worker placed and every lookup answered", |t| {
            let whole = t.newest().is_some_and(|(_, a)| a.workers == n);
            (whole && t.rejoining == 0 && t.answers == t.lookups).then_some(())
        })
        .await;
    quiet?;
    let before_end = usage(run.pid).unwrap_or_default();
    let ending = Instant::now();
    let exit = end(&mut run).await?;
    let end_ms = ms(Instant::now() - ending);
    let tally = run.stats.now();
    let failures = tally.failures.len();
    Ok(serde_json::json!({
        "workers": n,
        "slots_per_host": shape.slots_per_host,
        "seed": seed,
        "register_ms": ms(registered - t0),
        "assign_ms": ms(first.last.saturating_duration_since(registered)),
        "start_ms": ms(first.last - t0),
        "heartbeat_cpu_pct": steady.cpu_pct,
        "steady_s": args.steady,
        "coordinator_rss_mib": steady.rss_mib,
        "recovery_ms": recovery.survivors_ms,
        "recovery_full_ms": recovery.full_ms,
        "recovery_coordinator_cpu_ms": recovery.cpu_ms,
        "reset_bytes": recovery.bytes,
        "reset_bytes_per_worker": recovery.bytes / n as u64,
        "coordinator_peak_rss_mib": round(before_end.peak_rss_mib),
        "coordinator_cpu_s": round(before_end.cpu_s),
        "load_generator_rss_mib": round(usage(std::process::id()).unwrap_or_default().rss_mib),
        "coordinator_exit_code": exit,
        "end_ms": end_ms,
        "worker_failures": failures,
        "lookups": tally.lookups,
        "lookups_answered": tally.lookups_answered,
    }))
}

#[cfg(feature = "etcd")]
async fn etcd_mode(
    args: &Args,
    shape: Shape,
    url: &str,
    seed: u64,
) -> Result<serde_json::Value, String> {
    pods::measure(args, shape, url, seed).await
}

#[cfg(not(feature = "etcd"))]
async fn etcd_mode(_: &Args, _: Shape, _: &str, _: u64) -> Result<serde_json::Value, String> {
    Err("built without etcd mode (cargo feature `etcd`)".into())
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn ms(d: Duration) -> f64 {
    round(d.as_secs_f64() * 1e3)
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Starts the coordinator process and the tasks that carry its orders and
/// the workers' exits.
async fn start(args: &Args, shape: Shape) -> Result<Run, String> {
    let secret = Secret::generate().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut child = Command::new(exe);
    // The allocator `elasticrun` gives itself (coordinator::malloc).
    let tunables = std::env::var_os(malloc::TUNABLES_VAR);
    if let malloc::Step::Restart { tunables, .. } = malloc::step(tunables.as_deref(), None) {
        child.env(malloc::TUNABLES_VAR, tunables);
    }
    let mut child = child
        .args(["--coordinator", "--workers", &shape.workers.to_string()])
        .args(["--slots-per-host", &shape.slots_per_host.to_string(), "--"])
        .args(&args.options)
        .env(SECRET_VAR, secret.to_hex())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the coordinator process: {e}"))?;
    let pid = child.id().ok_or("the coordinator process ended at once")?;
    let (Some(out), Some(mut into)) = (child.stdout.take(), child.stdin.take()) else {
        return Err("the coordinator process has no pipes".into());
    };
    let mut lines = BufReader::new(out).lines();
    let within = Duration::from_secs_f64(args.within);
    let first = tokio::time::timeout(within, lines.next_line()).await;
    let Ok(Ok(Some(line))) = first else {
        return Err("the coordinator process said nothing of where it listens".into());
    };
    let Ok(Order::Listening(coordinator)) = Order::parse(&line) else {
        return Err(format!("the coordinator process began with {line:?}"));
    };
    let stats = Arc::new(Stats::default());
    let roster = Arc::new(Roster::default());
    let (exits, mut exits_rx) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        while let Some(line) = exits_rx.recv().await {
            if into
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    let secret = Arc::new(secret);
    let (s, r) = (stats.clone(), roster.clone());
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            obey(&line, coordinator, &secret, &s, &r, &exits);
        }
        s.coordinator_gone();
    });
    Ok(Run {
        child,
        pid,
        stats,
        roster,
        within,
    })
}

/// Carries out one order of the coordinator's launcher.
fn obey(
    line: &str,
    coordinator: std::net::SocketAddr,
    secret: &Arc<Secret>,
    stats: &Arc<Stats>,
    roster: &Arc<Roster>,
    exits: &mpsc::UnboundedSender<String>,
) {
    match Order::parse(line) {
        Ok(Order::Start { id, host, slot }) => {
            let who = Identity {
                id,
                host,
                slot,
                coordinator: workers::Reach::At(coordinator),
                secret: secret.clone(),
            };
            let commands = roster.add(id);
            let (stats, roster, exits) = (stats.clone(), roster.clone(), exits.clone());
            tokio::spawn(async move {
                let status = workers::run(who, stats, commands).await;
                roster.remove(id);
                let _ = exits.send(pipe::exit_line(id, status));
            });
        }
        Ok(Order::Term { id }) => {
            roster.tell(id, workers::Command::Term);
        }
        Ok(Order::Kill { id }) => {
            roster.tell(id, workers::Command::Kill);
        }
        Ok(Order::Listening(_)) | Err(_) => stats.failed(format!("coordinator said {line:?}")),
    }
}

impl Run {
    async fn wait<T>(&self, what: &str, done: impl Fn(&Tally) -> Option<T>) -> Result<T, String> {
        self.stats.wait_for(what, self.within, done).await
    }
}

struct Steady {
    cpu_pct: f64,
    rss_mib: f64,
}

/// The coordinator's CPU and memory over `seconds` of heartbeats.
async fn steady(run: &Run, seconds: f64) -> Result<Steady, String> {
    let gone = || "the coordinator process ended".to_string();
    let before = usage(run.pid).ok_or_else(gone)?;
    let at = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let after = usage(run.pid).ok_or_else(gone)?;
    let wall = at.elapsed().as_secs_f64();
    Ok(Steady {
        cpu_pct: round((after.cpu_s - before.cpu_s) / wall * 100.0),
        rss_mib: round(after.rss_mib),
    })
}

struct Recovery {
    survivors_ms: f64,
    full_ms: f64,
    /// The coordinator's CPU time from the kill until every survivor was
    /// assigned, all its threads'.
    cpu_ms: f64,
    bytes: u64,
}

/// Kills one worker, chosen by `seed`, and times the generation after
/// `g1`: when every survivor was assigned it, and when the job was whole
/// again (the replacement assigned too).
async fn kill_one(run: &mut Run, seed: u64, g1: u64) -> Result<Recovery, String> {
    let ids = run.roster.ids();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let victim = ids[rng.random_range(0..ids.len())];
    let n = ids.len();
    let bytes = run.stats.bytes_read();
    let gone = || "the coordinator process ended".to_owned();
    let cpu = || stats::cpu_ms(run.pid).ok_or_else(gone);
    let cpu0 = cpu()?;
    let at = Instant::now();
    run.roster.tell(victim, workers::Command::Kill);
    let survivors = run
        .wait("every survivor assigned a new generation", |t| {
            let after = t.generations.range(g1 + 1..);
            after
                .map(|(_, a)| a)
                .find(|a| a.survivors >= n - 1)
                .map(|a| a.last_survivor)
        })
        .await?;
    let cpu1 = cpu()?;
    let full = run
        .wait("the whole job assigned a new generation", |t| {
            let after = t.generations.range(g1 + 1..);
            after
                .map(|(_, a)| a)
                .find(|a| a.workers >= n)
                .map(|a| a.last)
        })
        .await?;
    Ok(Recovery {
        survivors_ms: ms(survivors - at),
        full_ms: ms(full - at),
        cpu_ms: round(cpu1 - cpu0),
        bytes: run.stats.bytes_read() - bytes,
    })
}

/// Every worker says it finished; the coordinator's exit code.
async fn end(run: &mut Run) -> Result<i32, String> {
    run.roster.tell_all(workers::Command::Finish);
    match tokio::time::timeout(run.within, run.child.wait()).await {
        Ok(Ok(status)) => Ok(status.code().unwrap_or(-1)),
        Ok(Err(e)) => Err(format!("cannot wait for the coordinator process: {e}")),
        Err(_) => Err(format!(
            "the coordinator did not end within {:?} of the workers finishing",
            run.within
        )),
    }
}
