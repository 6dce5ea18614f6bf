//! `--connections on-demand` (the default): a job of 64 ranks on one machine whose
//! workers hold only the links their collectives need, where the full
//! mesh holds 63 each.

use std::collections::BTreeSet;
use std::time::Duration;

use integration_tests::{assert_all_gone, descendants, launch, shared_segments, train, workers};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The sockets process `pid` holds (its `/proc/<pid>/fd` entries that are
/// sockets): the data plane's listener and links, the control connection.
fn sockets(pid: i32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.to_string_lossy().starts_with("socket:"))
        .count()
}

#[test]
fn workers_of_64_ranks_on_demand_hold_only_the_links_their_collectives_need() {
    let np = 64;
    let train = train();
    let mut job = launch(&[
        "--connections",
        "on-demand",
        "-np",
        &np.to_string(),
        train.to_str().unwrap(),
        "--epochs",
        "1000",
        "--step-delay-ms",
        "20",
        "--log-steps",
    ]);
    let pids = workers(job.pid(), np, Duration::from_secs(120));
    // Several steps: every collective a step runs (the engine's negotiation
    // and the gradients' allreduce) has run a few times on every rank.
    job.wait_for_stdout_line("rank 0's fifth step", Duration::from_secs(120), |l| {
        l.contains("\"event\":\"step\"") && l.contains("\"step\":5,")
    });
    let all: BTreeSet<i32> = descendants(job.pid())
        .into_iter()
        .chain(pids.iter().copied())
        .collect();
    for (rank, &pid) in pids.iter().enumerate() {
        let (held, segments) = (sockets(pid), shared_segments(pid));
        // The ring's two neighbours, the negotiation's partners (recursive
        // doubling's six, the tree's parent and children), the listener,
        // the control connection and the program's own: 12 measured here;
        // the full mesh holds 63 links (67 sockets) in every worker.
        assert!(held <= 16, "rank {rank} (pid {pid}) holds {held} sockets");
        assert!(
            (1..=14).contains(&segments),
            "rank {rank} (pid {pid}) maps {segments} shared-memory segments"
        );
    }
    kill(Pid::from_raw(job.pid()), Signal::SIGTERM).unwrap();
    let run = job.finish(Duration::from_secs(120));
    assert_eq!(run.status.code(), Some(143), "{}", run.stderr);
    assert_all_gone(&all, Duration::from_secs(30));
}
