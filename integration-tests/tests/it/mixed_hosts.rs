//! Jobs that mix this machine and a remote host (see
//! [`integration_tests::netns`]): elasticrun runs in the coordinator's
//! namespace with `localhost` slots of its own and slots on a host namespace
//! reached over ssh. Workers on this machine reach the coordinator over
//! loopback, yet their remote peers must reach their data planes: the job
//! trains to the end, static, or elastic with the remote host joining later. A mesh that cannot form (a firewall
//! between the two) is reported as such, naming both ranks and the address,
//! and not as a silent worker.
//!
//! Needs root, `ip netns` and OpenSSH (and `nft` for the firewall); skipped
//! (with a note on stderr) otherwise, unless `ELASTICRUN_REQUIRE_NETNS` is
//! set (`.ci/run` sets it): then a test that cannot run fails.

use std::process::Stdio;
use std::time::{Duration, Instant};

use integration_tests::needs::{Need, on_path};
use integration_tests::netns::{Cluster, Line, SSH_PORT, Watched, event, render, write_atomically};
use integration_tests::train;

/// One host namespace, or `None` when namespaces cannot be made here and
/// are not required.
#[track_caller]
fn cluster(tag: &str, net: (u8, u8)) -> Option<Cluster> {
    Need::NetworkNamespaces.or_skip(Cluster::create(tag, net, 1))
}

/// Samples per epoch: 32 batches of 64.
const SAMPLES: u64 = 2048;

/// The steps of `epochs` epochs.
fn steps(epochs: u64) -> u64 {
    epochs * SAMPLES.div_ceil(64)
}

/// `train` for `epochs` epochs, 20 ms a step, with a line per step if `log`.
fn train_args(epochs: u64, log: bool) -> Vec<String> {
    let train = train();
    let mut args = vec![
        train.to_str().unwrap().to_owned(),
        "--epochs".to_owned(),
        epochs.to_string(),
        "--samples".to_owned(),
        SAMPLES.to_string(),
        "--step-delay-ms".to_owned(),
        "20".to_owned(),
    ];
    if log {
        args.push("--log-steps".to_owned());
    }
    args
}

/// The `done` lines of a job that exited 0 within `limit`: one per rank of
/// a `size`-rank world, every rank with the same weights after `steps`
/// steps; no worker failed on the way.
fn trains_to_the_end(job: Watched, size: usize, steps: u64, limit: Duration) -> Vec<Line> {
    let (run, lines) = job.finish(limit);
    assert_eq!(
        run.status.code(),
        Some(0),
        "the job failed\n{}",
        render(&lines)
    );
    let mut done: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(event)
        .filter(|e| e["event"] == "done")
        .collect();
    done.sort_by_key(|e| e["rank"].as_u64());
    assert_eq!(
        done.len(),
        size,
        "one done line per rank\n{}",
        render(&lines)
    );
    for (r, d) in done.iter().enumerate() {
        assert_eq!(d["rank"], r, "{d}");
        assert_eq!(d["world_size"], size, "{d}");
        assert_eq!(d["steps"], steps, "{d}");
        assert_eq!(d["state"], done[0]["state"], "ranks disagree: {done:?}");
    }
    assert!(
        !lines
            .iter()
            .any(|l| l.stderr && l.text.starts_with("elasticrun: worker")),
        "a worker failed\n{}",
        render(&lines)
    );
    lines
}

/// This machine first (ranks 0), the remote host's rank dials it.
#[test]
fn a_static_job_on_this_machine_and_a_remote_host_trains() {
    let Some(c) = cluster("s11", (232, 1)) else {
        return;
    };
    let hosts = format!("localhost:1,{}:1", c.host(0));
    let mut args = vec!["-H".to_owned(), hosts];
    args.extend(train_args(1, false));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let job = Watched::start(c.elasticrun(&args));
    trains_to_the_end(job, 2, steps(1), Duration::from_secs(90));
}

/// Epochs of the job a host joins: about 3 s of steps, room for the join,
/// which takes an ssh start of two workers (1.2 s on a loaded 2-core
/// machine, when 2 epochs, 1.4 s, had left it none).
const JOIN_EPOCHS: u64 = 5;

/// An elastic job trains on this machine, then a remote host joins: the
/// survivors keep ranks 0 and 1, the newcomers dial them from the remote
/// host, and the job ends on all four.
#[test]
fn a_remote_host_joins_an_elastic_job_on_this_machine() {
    let Some(c) = cluster("s12", (232, 2)) else {
        return;
    };
    let hosts_file = c.dir().join("hosts");
    write_atomically(&hosts_file, "localhost:2\n");
    let discovery = integration_tests::elastic::file_discovery(&hosts_file);
    let mut args: Vec<String> = [
        "--min-np",
        "2",
        "--max-np",
        "4",
        "--host-discovery-script",
        &discovery,
        "--discovery-interval",
        "0.2",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(train_args(JOIN_EPOCHS, true));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut job = Watched::start(c.elasticrun(&args));
    let on_two = |l: &Line| {
        event(l).is_some_and(|e| e["event"] == "step" && e["world_size"] == 2 && e["step"] == 5)
    };
    job.wait_line(
        "step 5 on 2 workers",
        Instant::now(),
        Duration::from_secs(60),
        on_two,
    );
    write_atomically(&hosts_file, &format!("localhost:2\n{}:2\n", c.host(0)));
    let lines = trains_to_the_end(job, 4, steps(JOIN_EPOCHS), Duration::from_secs(90));
    let grown = lines
        .iter()
        .filter_map(event)
        .any(|e| e["event"] == "step" && e["world_size"] == 4);
    assert!(grown, "never trained on 4 workers\n{}", render(&lines));
}

/// Runs `nft` inside namespace `ns` with `rules` as its script.
fn nft(c: &Cluster, ns: &str, rules: &str) {
    let mut child = c
        .in_ns(ns, "nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), rules.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Rank 0 on the remote host, rank 1 here; a firewall here refuses every new
/// connection to the remote host but ssh. With every pair connected before
/// the generation (`--connections all`: rank 1 dials rank 0), rank 1 cannot
/// dial rank 0's data plane: the job ends with rank 1 saying so, while both
/// ranks keep heart-beating (no "no heartbeat" verdict). (On demand, the
/// pair may instead be linked by rank 0's dial, which the firewall lets
/// through.)
#[test]
fn a_mesh_that_cannot_form_names_the_ranks_and_the_address() {
    if on_path("nft").is_none() {
        Need::NetworkNamespaces.unavailable("nft (nftables) is not installed");
        return;
    }
    let Some(c) = cluster("s13", (232, 3)) else {
        return;
    };
    let remote = c.host(0);
    nft(
        &c,
        &c.coordinator_ns(),
        &format!(
            "table inet mesh {{\n chain out {{\n  type filter hook output priority 0;\n  \
             ip daddr {remote} tcp dport != {SSH_PORT} ct state new reject with tcp reset\n }}\n}}\n"
        ),
    );
    let hosts = format!("{remote}:1,localhost:1");
    // A start timeout past the heartbeat limit (15 s): a worker silent while
    // the mesh forms would be declared dead first.
    let mut args = vec![
        "-H".to_owned(),
        hosts,
        "--start-timeout".to_owned(),
        "40".to_owned(),
        "--connections".to_owned(),
        "all".to_owned(),
    ];
    args.extend(train_args(1, false));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let (run, lines) = Watched::start(c.elasticrun(&args)).finish(Duration::from_secs(90));
    assert_ne!(run.status.code(), Some(0), "{}", render(&lines));
    let want = format!("rank 1 cannot reach rank 0 at {remote}:");
    let said = lines
        .iter()
        .find(|l| l.text.contains(&want))
        .unwrap_or_else(|| panic!("nobody said {want:?}\n{}", render(&lines)));
    assert!(
        said.text.contains("Connection refused"),
        "{}\n{}",
        said.text,
        render(&lines)
    );
    assert!(
        !lines.iter().any(|l| l.text.contains("no heartbeat")),
        "a worker building its mesh was taken for dead\n{}",
        render(&lines)
    );
    eprintln!(
        "the job ended {:.1} s after it started; it said:\n{}",
        started.elapsed().as_secs_f64(),
        render(&lines)
    );
}
