//! Pods on separate nodes: each node a network namespace of its own (see
//! [`integration_tests::netns`]) with its own address, the pods' `POD_IP`,
//! and etcd in the coordinator's namespace. The coordinator replicas run on
//! different nodes too, so a failover also moves the control plane's
//! address, and a node can be cut from the network while its pods live on.
//!
//! Needs root, `ip netns`, OpenSSH (the cluster's hosts run sshds) and etcd;
//! skipped with a note otherwise, unless `ELASTICRUN_REQUIRE_NETNS` and
//! `ELASTICRUN_REQUIRE_ETCD` are set (`.ci/run` sets both).

use std::time::Duration;

use integration_tests::Finished;
use integration_tests::elastic::{Train, check_done, done_lines, steps};
use integration_tests::etcd::Etcd;
use integration_tests::needs::Need;
use integration_tests::netns::Cluster;
use integration_tests::pods::{
    Node, PodJob, SERVE, check_first_generation, undisturbed_and_never_reset,
};
use nix::sys::signal::Signal;

const LIMIT: Duration = Duration::from_secs(60);

/// 20 steps an epoch, 40 ms each: long enough for an event in the middle.
fn long() -> Train {
    Train {
        epochs: 8,
        samples: 1280,
        step_delay_ms: 40,
        commit_every: 5,
    }
}

/// Two nodes, etcd in the coordinator's namespace, and a job on it; `None`
/// when namespaces or etcd are missing and not required.
#[track_caller]
fn nodes(tag: &str, net: (u8, u8), test: &str) -> Option<(Cluster, PodJob)> {
    let c = Need::NetworkNamespaces.or_skip(Cluster::create(tag, net, 2))?;
    let etcd = Etcd::start_in(&c.coordinator_ns(), &format!("10.{}.{}.1", net.0, net.1))?;
    Some((c, PodJob::new(test, etcd)))
}

/// Node `i` of the cluster: `node-a`, `node-b`, in host `i`'s namespace.
fn node(c: &Cluster, i: usize) -> Node {
    Node {
        name: format!("node-{}", char::from(b'a' + u8::try_from(i).unwrap())),
        ns: Some(c.host_ns(i)),
        ip: c.host(i),
    }
}

/// Two replicas of `options`, the first (which leads) in the coordinator's
/// namespace, the second on node a; the first's index.
fn two_replicas(c: &Cluster, job: &mut PodJob, options: &[&str]) -> usize {
    let endpoints = job.etcd.endpoints();
    let first = job.serve_in(Some(&c.coordinator_ns()), &endpoints, options);
    job.leader(&[], LIMIT);
    job.serve_in(Some(&c.host_ns(0)), &endpoints, options);
    first
}

/// Pods on two nodes, a replica on each of two namespaces: `kill -9` of the
/// leader moves the control plane to node a's address, and the job goes on
/// with 0 resets and every step once.
#[test]
fn pods_on_two_nodes_survive_the_leader_killed_without_a_reset() {
    let Some((c, mut job)) = nodes("s21", (233, 1), "pods_netns_leader") else {
        return;
    };
    let train = long();
    let first = two_replicas(&c, &mut job, &SERVE);
    for i in [0, 0, 1] {
        job.pod_on(&node(&c, i), &train);
    }
    job.wait_for_step(30, LIMIT);
    job.signal_serve(first, Signal::SIGKILL);
    let second = job.leader(&[first], LIMIT);
    let said = job.serve_stderr(second);
    assert!(
        said.contains(&format!("workers reach this coordinator at {}:", c.host(0))),
        "the new leader is not on node a's address:\n{said}"
    );
    let run = job.finish_pods(LIMIT);
    undisturbed_and_never_reset(&run, &train, 3);
    check_first_generation(&run, &["node-a:2", "node-b:1"]);
    assert!(!job.serve_stderr(second).contains("generation 2"));
}

/// Node b is cut from the network (its link taken down) while its pods live
/// on: their leases lapse in etcd, the leader counts them failed, and the
/// pods of node a reset from their last commit and finish on 2 workers.
#[test]
fn a_node_cut_from_the_network_is_detected_and_the_others_reset() {
    let Some((c, mut job)) = nodes("s22", (233, 2), "pods_netns_cut") else {
        return;
    };
    let train = long();
    let options = [
        "-np",
        "4",
        "--min-np",
        "2",
        "--max-np",
        "4",
        "--lease-ttl",
        "2",
        "--gloo-timeout-seconds",
        "10",
    ];
    let endpoints = job.etcd.endpoints();
    job.serve_in(Some(&c.coordinator_ns()), &endpoints, &options);
    for i in [0, 0, 1, 1] {
        job.pod_on(&node(&c, i), &train);
    }
    job.wait_for_step(20, LIMIT);
    c.set_link(1, false);
    let a = job.finish_pod(0, LIMIT);
    let b = job.finish_pod(1, LIMIT);
    let run = Finished {
        status: a.status,
        stdout: a.stdout + &b.stdout,
        stderr: a.stderr + &b.stderr + &job.serve_stderr(0),
    };
    run.expect_code(0);
    b.status.success().then_some(()).expect("pod 1 failed");
    check_done(&run, 2, train.expected_steps());
    for d in done_lines(&run.stdout) {
        assert!(d["resets"].as_u64() >= Some(1), "{d}\n{}", run.stderr);
    }
    // They went on from a commit, not from the start.
    let after: Vec<_> = steps(&run.stdout)
        .into_iter()
        .filter(|s| s.world_size == 2)
        .collect();
    assert!(
        after.first().is_some_and(|s| s.step > 10),
        "the 2 workers started over\n{}",
        run.stderr
    );
    eprintln!(
        "node b cut off; the coordinator said:\n{}",
        job.serve_stderr(0)
    );
    // The cut pods cannot hear the end: dropping the cluster kills them.
}
