//! collbench as users run it: real processes over TCP loopback. Every op end to end
//! with checked results; a rank killed or stopped mid-collective; the launcher
//! itself terminated or killed. Every wait has a deadline, and each test checks that
//! no rank outlives the run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_collbench");

struct Run {
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

fn start(args: &[&str]) -> Run {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start collbench");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    Run {
        child,
        stdout,
        stderr,
    }
}

/// Waits for exit within `limit`; kills and fails the test otherwise.
fn finish(mut run: Run, limit: Duration) -> (std::process::ExitStatus, String, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = run.child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = run.child.kill();
            panic!("collbench did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        status,
        run.stdout.join().unwrap(),
        run.stderr.join().unwrap(),
    )
}

/// Polls `cond` every 20 ms until it holds; fails with `what` after `limit`.
fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `/proc/PID/stat` fields after the command name: state is index 0, ppid 1,
/// utime 11, stime 12.
fn stat(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|f| f[0] != "Z")
}

fn cpu_ticks(pid: u32) -> u64 {
    stat(pid).map_or(0, |f| {
        f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
    })
}

/// Live children of `parent`, with the rank each was started as.
fn ranks_of(parent: u32) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some(f) = stat(pid) else { continue };
        if f[1] != parent.to_string() || f[0] == "Z" {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmd
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let rank = args
            .iter()
            .position(|a| a == "--worker-rank")
            .and_then(|i| args.get(i + 1))
            .and_then(|r| r.parse().ok());
        if let Some(r) = rank {
            out.push((r, pid));
        }
    }
    out.sort_unstable();
    out
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success(), "kill {sig} {pid}");
}

/// Starts a long run of `np` ranks and waits until every rank is busy in
/// collectives (its CPU time grows), returning (run, rank pids).
fn busy_run(np: usize, extra: &[&str]) -> (Run, Vec<u32>) {
    let npa = np.to_string();
    let mut args = vec![
        "--np",
        &npa,
        "--min-bytes",
        "16M",
        "--max-bytes",
        "16M",
        "--iters",
        "1000000",
        "--no-check",
    ];
    args.extend_from_slice(extra);
    let run = start(&args);
    let parent = run.child.id();
    let mut pids = Vec::new();
    wait_until(Duration::from_secs(30), "all ranks to start", || {
        pids = ranks_of(parent).into_iter().map(|(_, p)| p).collect();
        pids.len() == np
    });
    let start_ticks: Vec<u64> = pids.iter().map(|&p| cpu_ticks(p)).collect();
    wait_until(Duration::from_secs(30), "ranks to run collectives", || {
        pids.iter()
            .zip(&start_ticks)
            .all(|(&p, &t)| cpu_ticks(p) >= t + 20)
    });
    (run, pids)
}

#[derive(serde::Deserialize)]
struct Row {
    op: String,
    np: usize,
    bytes: usize,
    count: usize,
    time_us: f64,
    busbw_gbps: f64,
    check: String,
}

#[test]
fn every_op_runs_checked_across_processes() {
    for (op, np) in [
        ("allreduce", "3"),
        ("allgather", "3"),
        ("broadcast", "4"),
        ("alltoall", "2"),
        ("reducescatter", "3"),
        ("allreduce", "1"),
    ] {
        for dtype in ["f32", "bf16"] {
            let run = start(&[
                "--np",
                np,
                "--op",
                op,
                "--dtype",
                dtype,
                "--min-bytes",
                "4K",
                "--max-bytes",
                "1M",
                "--step-factor",
                "16",
                "--iters",
                "3",
                "--json",
            ]);
            let (st, out, err) = finish(run, Duration::from_secs(120));
            assert!(st.success(), "{op} {dtype} np={np}: {st}\nstderr:\n{err}");
            let rows: Vec<Row> = out
                .lines()
                .map(|l| serde_json::from_str(l).expect(l))
                .collect();
            assert_eq!(
                rows.len(),
                3,
                "{op}: one row per size (4K, 64K, 1M):\n{out}"
            );
            for r in &rows {
                assert_eq!((r.op.as_str(), r.np.to_string().as_str()), (op, np));
                assert_eq!(r.check, "ok", "{op} {dtype} {} bytes", r.bytes);
                assert!(r.count > 0 && r.time_us > 0.0 && r.busbw_gbps.is_finite());
            }
        }
    }
}

#[test]
fn the_table_has_a_header_and_a_row_per_size() {
    let (st, out, err) = finish(
        start(&[
            "--np",
            "2",
            "--min-bytes",
            "4K",
            "--max-bytes",
            "16K",
            "--iters",
            "2",
        ]),
        Duration::from_secs(60),
    );
    assert!(st.success(), "{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("busbw_GB/s") && l.contains("time_us(med)")),
        "{out}"
    );
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_end().ends_with("ok"))
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
}

#[test]
fn a_rank_killed_mid_collective_fails_the_run_naming_it() {
    let (run, pids) = busy_run(3, &["--timeout-secs", "60"]);
    let killed_at = Instant::now();
    signal(pids[1], "-KILL");
    let (st, _, err) = finish(run, Duration::from_secs(20));
    assert!(!st.success());
    assert!(err.contains("rank 1 failed with signal 9"), "{err}");
    // The survivors saw the loss through their sockets, not by timing out. A
    // survivor may first see the other survivor leave (it failed too), but the
    // killed rank is named.
    for r in [0, 2] {
        assert!(
            err.contains(&format!("collbench rank {r}: error: peer rank ")),
            "rank {r}:\n{err}"
        );
    }
    assert!(
        err.contains(": error: peer rank 1 lost in generation 0"),
        "{err}"
    );
    assert!(!err.contains("timed out"), "{err}");
    assert!(killed_at.elapsed() < Duration::from_secs(20));
    for p in pids {
        assert!(!alive(p), "rank process {p} outlived the run");
    }
}

#[test]
fn a_stopped_rank_times_out_and_is_cleaned_up() {
    let (run, pids) = busy_run(3, &["--timeout-secs", "2"]);
    signal(pids[2], "-STOP");
    let (st, _, err) = finish(run, Duration::from_secs(30));
    assert!(!st.success());
    // The ranks' 2 s waits end about together: one waiting to receive from
    // rank 2 says it timed out; one whose send to it timed out half-way
    // says the send was abandoned, and that rank's exit may reach the other
    // first. In the ring a rank may also wait on a live rank that waits on
    // rank 2, and its own 2 s may end first (rank 1: "timed out after 2s
    // waiting on rank 0"): a 2 s timeout is said either way, and no rank
    // outlives the run.
    let timed_out = err.contains("timed out after 2s waiting on rank ");
    let abandoned = err.contains("peer rank 2 lost in generation 0: a send to it was abandoned");
    assert!(timed_out || abandoned, "{err}");
    for p in pids {
        assert!(!alive(p), "rank process {p} outlived the run");
    }
}

#[test]
fn sigterm_to_collbench_stops_every_rank() {
    let (run, pids) = busy_run(2, &[]);
    signal(run.child.id(), "-TERM");
    let (st, _, err) = finish(run, Duration::from_secs(20));
    assert_eq!(st.code(), Some(143), "{err}");
    for p in pids {
        assert!(!alive(p), "rank process {p} outlived the run");
    }
}

#[test]
fn ranks_exit_when_collbench_is_killed() {
    let (run, pids) = busy_run(2, &[]);
    signal(run.child.id(), "-KILL");
    let _ = finish(run, Duration::from_secs(10));
    wait_until(Duration::from_secs(15), "orphaned ranks to exit", || {
        pids.iter().all(|&p| !alive(p))
    });
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    let (st, _, err) = finish(
        start(&["--min-bytes", "8M", "--max-bytes", "4M"]),
        Duration::from_secs(10),
    );
    assert_eq!(st.code(), Some(2));
    assert!(err.contains("--min-bytes"), "{err}");
    let (st, _, err) = finish(start(&["--dtype", "f8"]), Duration::from_secs(10));
    assert_eq!(st.code(), Some(2));
    assert!(err.contains("unknown dtype"), "{err}");
    let (st, _, err) = finish(start(&["--min-bytes", "12Q"]), Duration::from_secs(10));
    assert_eq!(st.code(), Some(2));
    assert!(err.contains("suffix"), "{err}");
    let (st, _, err) = finish(start(&["--np", "0"]), Duration::from_secs(10));
    assert_eq!(st.code(), Some(2), "{err}");
}
