//! Hierarchical allreduce and allgather in real jobs: several ranks on each of
//! several hosts, run with and without `--hierarchical-allreduce
//! --hierarchical-allgather`. Every rank checks every result against the value
//! it computes from all ranks' inputs (`worker_probe --collectives`), so a run
//! that exits 0 got the flat ring's results (exactly for integers, within
//! rounding for one float average); each rank also reports which path ran.

use std::time::Duration;

use integration_tests::launch;
use integration_tests::sshd::TestSshd;

const JOB: Duration = Duration::from_secs(120);

const FLAGS: [&str; 2] = ["--hierarchical-allreduce", "--hierarchical-allgather"];

/// Runs `worker_probe --collectives` under `elasticrun ARGS`; returns each
/// rank's JSON line, by rank, once the job has exited 0.
fn collectives_job(args: &[&str]) -> Vec<serde_json::Value> {
    let probe = env!("CARGO_BIN_EXE_worker_probe");
    let mut all: Vec<&str> = args.to_vec();
    all.extend([probe, "--collectives"]);
    let run = launch(&all).finish(JOB);
    run.expect_code(0);
    let mut lines: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once("<stdout>:"))
        .map(|(_, json)| serde_json::from_str(json).unwrap())
        .collect();
    lines.sort_by_key(|p| p["rank"].as_u64());
    lines
}

/// Checks the places of a `hosts` x `slots` job and the path each rank took.
fn assert_job(lines: &[serde_json::Value], hosts: usize, slots: usize, path: &str) {
    assert_eq!(lines.len(), hosts * slots, "{lines:?}");
    for (r, p) in lines.iter().enumerate() {
        assert_eq!(p["rank"], r, "{p}");
        assert_eq!(p["local_rank"], r % slots, "{p}");
        assert_eq!(p["cross_rank"], r / slots, "{p}");
        assert_eq!(p["paths"]["allreduce"], path, "rank {r}: {p}");
        assert_eq!(p["paths"]["allgather"], path, "rank {r}: {p}");
    }
}

#[test]
fn two_ssh_hosts_of_two_slots_give_the_flat_results_on_both_paths() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.12", "127.0.0.13"]) else {
        return;
    };
    let hosts = format!("{}:2,{}:2", sshd.hosts[0], sshd.hosts[1]);
    let ssh = sshd.ssh_args();
    let ssh: Vec<&str> = ssh.iter().map(String::as_str).collect();
    for (flags, path) in [(&FLAGS[..], "hierarchical"), (&[][..], "flat")] {
        let mut args = vec!["-H", hosts.as_str()];
        args.extend(flags);
        args.extend(&ssh);
        let lines = collectives_job(&args);
        assert_job(&lines, 2, 2, path);
        for p in &lines {
            assert_eq!(p["udp_sockets"], 0, "a UDP socket on TCP: {p}");
        }
    }
}

/// `localhost` and `127.0.0.1` are two host names of this machine: two
/// hosts to the layout, started without ssh.
#[test]
fn two_local_host_names_of_three_slots_run_hierarchically() {
    let mut args = vec!["-H", "localhost:3,127.0.0.1:3"];
    args.extend(FLAGS);
    // Both host names are this machine: every pair shares memory, the
    // intra-host legs and the cross-host ones alike; with every pair
    // connected, five segments a rank; on demand, those of the pairs the
    // collectives linked.
    for (connections, segments) in [("all", 5..=5), ("on-demand", 2..=5)] {
        let mut args = args.clone();
        args.extend(["--connections", connections]);
        let lines = collectives_job(&args);
        assert_job(&lines, 2, 3, "hierarchical");
        for p in &lines {
            let n = p["shm_segments"].as_u64().unwrap_or(0);
            assert!(segments.contains(&n), "--connections {connections}: {p}");
        }
    }
    args.push("--no-shared-memory");
    let lines = collectives_job(&args);
    assert_job(&lines, 2, 3, "hierarchical");
    for p in &lines {
        assert_eq!(p["shm_segments"], 0, "{p}");
    }
}

/// The same over `--transport quic`: the local and cross-host legs both run
/// on the job's QUIC mesh, and every result is checked as over TCP.
#[test]
fn a_hierarchical_job_over_quic_gives_the_flat_results() {
    let mut args = vec!["-H", "localhost:2,127.0.0.1:2", "--transport", "quic"];
    args.extend(FLAGS);
    let lines = collectives_job(&args);
    assert_job(&lines, 2, 2, "hierarchical");
    for p in &lines {
        assert!(p["udp_sockets"].as_u64() >= Some(1), "no QUIC socket: {p}");
        assert_eq!(p["shm_segments"], 0, "QUIC uses no shared memory: {p}");
    }
}

/// The same over `--transport tls`: both legs on the job's TLS mesh, whose
/// pairs (all of this machine) share memory inside their sessions, or,
/// with `--no-shared-memory`, talk TLS. Links are made on demand: each rank
/// has two, its host's other rank and its peer across (the negotiation's
/// doubling partners are the same two).
#[test]
fn a_hierarchical_job_over_tls_gives_the_flat_results() {
    let mut args = vec!["-H", "localhost:2,127.0.0.1:2", "--transport", "tls"];
    args.extend(FLAGS);
    for (flags, segments) in [(&[][..], 2), (&["--no-shared-memory"][..], 0)] {
        let mut args = args.clone();
        args.extend(flags);
        let lines = collectives_job(&args);
        assert_job(&lines, 2, 2, "hierarchical");
        for p in &lines {
            assert_eq!(p["udp_sockets"], 0, "TLS runs over TCP: {p}");
            assert_eq!(p["shm_segments"], segments, "{flags:?}: {p}");
        }
    }
}

#[test]
fn layouts_without_a_grid_run_flat_and_say_why() {
    let uneven = collectives_job(&["-H", "localhost:3,127.0.0.1:1", FLAGS[0], FLAGS[1]]);
    assert_eq!(uneven.len(), 4);
    let why = "flat (host 1 has 1 rank(s) but host 0 has 3; the hierarchical path needs the \
               same number on every host)";
    for p in &uneven {
        assert_eq!(p["paths"]["allreduce"], why, "{p}");
        assert_eq!(p["paths"]["allgather"], why, "{p}");
    }
    let one_host = collectives_job(&["-np", "4", FLAGS[0]]);
    let why = "flat (the ranks are on 1 host(s); the hierarchical path needs at least two)";
    for p in &one_host {
        assert_eq!(p["paths"]["allreduce"], why, "{p}");
        assert_eq!(p["paths"]["allgather"], "flat", "{p}");
    }
}
