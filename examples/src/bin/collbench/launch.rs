//! The launching collbench: starts `--np` copies of itself as ranks, brokers the
//! exchange of data-plane addresses over their stdin/stdout, forwards rank 0's
//! report, and makes sure no rank outlives it.
//!
//! ```text
//!  launcher ──spawn──> rank r: binds, prints "ADDR <its PeerAddress, JSON>"
//!  launcher <──────── "ADDR ..." from every rank
//!  launcher ──stdin──> "PEERS a0 a1 ..." to every rank; stdin stays open, and a
//!                      rank exits when it closes (the launcher died)
//! ```

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::{Args, say};

/// The run's secret (hex), from which the ranks derive their data-plane key.
pub(crate) const SECRET_ENV: &str = "COLLBENCH_JOB_SECRET";
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(5);
/// After one rank fails, how long the others get to notice and report it
/// themselves before they are stopped.
const REPORT_GRACE: Duration = Duration::from_secs(2);

pub(crate) fn main(args: &Args) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!("collbench: cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(launch(args)) {
        Ok(code) => code,
        Err(msg) => {
            say(&format!("collbench: {msg}"));
            ExitCode::FAILURE
        }
    }
}

struct Rank {
    child: Child,
    /// Dropped to ask the rank to exit.
    stdin: Option<ChildStdin>,
}

/// Whether the ranks are more than the GPUs, so that some share one. NCCL
/// refuses two ranks of a communicator on one GPU of one host ("Duplicate
/// GPU detected"); a distinct `NCCL_HOSTID` per rank makes them separate
/// hosts to NCCL, joined by its sockets (docs/gpu.md). A `NCCL_HOSTID` the
/// user set is left alone.
fn ranks_share_gpus(args: &Args) -> bool {
    args.device == crate::Place::Cuda
        && std::env::var_os("NCCL_HOSTID").is_none()
        && gpu::probe().is_ok_and(|info| info.devices < usize::from(args.np))
}

fn spawn(
    rank: usize,
    secret: &control::Secret,
    args: &Args,
    share_gpus: bool,
) -> Result<(Rank, ChildStdout), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let mut cmd = match args.netns.as_ref().and_then(|p| p.0.get(rank)) {
        Some((ns, _)) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    // The allocator settings elasticrun gives the workers it starts, so that
    // the ranks here measure what a job's do.
    let tunables = std::env::var_os(control::alloc_env::GLIBC_TUNABLES);
    if let Some((k, v)) = control::alloc_env::malloc_tunables(tunables.as_deref()) {
        cmd.env(k, v);
    }
    if share_gpus {
        cmd.env("NCCL_HOSTID", format!("collbench-rank-{rank}"));
    }
    let mut child = cmd
        .args(std::env::args_os().skip(1))
        .arg("--worker-rank")
        .arg(rank.to_string())
        .env(SECRET_ENV, secret.to_hex())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start rank {rank}: {e}"))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(format!("rank {rank} has no stdin/stdout pipe"));
    };
    Ok((
        Rank {
            child,
            stdin: Some(stdin),
        },
        stdout,
    ))
}

async fn launch(args: &Args) -> Result<ExitCode, String> {
    let secret = control::Secret::generate().map_err(|e| e.to_string())?;
    let mut ranks = Vec::new();
    let mut outputs = Vec::new();
    let share_gpus = ranks_share_gpus(args);
    for r in 0..usize::from(args.np) {
        let (rank, stdout) = spawn(r, &secret, args, share_gpus)?;
        ranks.push(rank);
        outputs.push(BufReader::new(stdout).lines());
    }
    let mut addrs = Vec::new();
    for (r, lines) in outputs.iter_mut().enumerate() {
        let line = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await;
        match line {
            Ok(Ok(Some(l))) if l.starts_with("ADDR ") => addrs.push(l[5..].trim().to_owned()),
            Ok(Ok(other)) => {
                return Err(format!(
                    "rank {r} did not report its address (got {other:?})"
                ));
            }
            Ok(Err(e)) => return Err(format!("reading rank {r}'s address: {e}")),
            Err(_) => return Err(format!("rank {r} did not start within {START_TIMEOUT:?}")),
        }
    }
    let peers = format!("PEERS {}\n", addrs.join(" "));
    for (r, rank) in ranks.iter_mut().enumerate() {
        if let Some(stdin) = rank.stdin.as_mut() {
            stdin
                .write_all(peers.as_bytes())
                .await
                .map_err(|e| format!("rank {r} went away during start-up: {e}"))?;
        }
    }
    let forwarders: Vec<_> = outputs
        .into_iter()
        .map(|mut lines| {
            tokio::spawn(async move {
                while let Ok(Some(l)) = lines.next_line().await {
                    // A reader that went away (`collbench | head`) ends
                    // the forwarding, not the launcher.
                    let mut out = std::io::stdout().lock();
                    if writeln!(out, "{l}").is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    let code = supervise(&mut ranks).await?;
    for f in forwarders {
        let _ = f.await;
    }
    Ok(code)
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "an unknown status".to_owned(),
    }
}

/// Records the exit status of every rank that has finished; errors name the rank.
fn poll_exits(ranks: &mut [Rank], exits: &mut [Option<ExitStatus>]) -> Result<(), String> {
    for (r, rank) in ranks.iter_mut().enumerate() {
        if exits[r].is_none() {
            exits[r] = rank
                .child
                .try_wait()
                .map_err(|e| format!("waiting for rank {r}: {e}"))?;
        }
    }
    Ok(())
}

const POLL: Duration = Duration::from_millis(20);

/// Waits for every rank; on the first failure or on SIGINT/SIGTERM, stops the rest.
async fn supervise(ranks: &mut [Rank]) -> Result<ExitCode, String> {
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut exits: Vec<Option<ExitStatus>> = vec![None; ranks.len()];
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = sigint.recv() => return stop_all(ranks, "interrupted").await.map(|()| ExitCode::from(130)),
            _ = sigterm.recv() => return stop_all(ranks, "terminated").await.map(|()| ExitCode::from(143)),
        }
        poll_exits(ranks, &mut exits)?;
        if exits.iter().flatten().any(|st| !st.success()) {
            // Give the others a moment to notice the failure and say so themselves.
            let deadline = tokio::time::Instant::now() + REPORT_GRACE;
            while exits.iter().any(Option::is_none) && tokio::time::Instant::now() < deadline {
                tick.tick().await;
                poll_exits(ranks, &mut exits)?;
            }
            for (r, st) in exits.iter().enumerate() {
                if let Some(st) = st.filter(|st| !st.success()) {
                    say(&format!("collbench: rank {r} failed with {}", describe(st)));
                }
            }
            stop_all(ranks, "a rank failed").await?;
            return Ok(ExitCode::FAILURE);
        }
        if exits.iter().all(Option::is_some) {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// Closes every rank's stdin (a rank exits when it sees that), then SIGKILLs any
/// rank still alive after the grace period (a stopped or hung one).
async fn stop_all(ranks: &mut [Rank], why: &str) -> Result<(), String> {
    say(&format!(
        "collbench: stopping every rank still running ({why})"
    ));
    for rank in ranks.iter_mut() {
        rank.stdin = None;
    }
    let deadline = tokio::time::Instant::now() + STOP_GRACE;
    for rank in ranks.iter_mut() {
        if tokio::time::timeout_at(deadline, rank.child.wait())
            .await
            .is_err()
        {
            let _ = rank.child.start_kill();
        }
    }
    for (r, rank) in ranks.iter_mut().enumerate() {
        if tokio::time::timeout(STOP_GRACE, rank.child.wait())
            .await
            .is_err()
        {
            return Err(format!("rank {r} survived SIGKILL for {STOP_GRACE:?}"));
        }
    }
    Ok(())
}
