//! `elasticrun COMMAND` in etcd mode, as a node of a Kubeflow Trainer job
//! runs it: torchrun's `PET_*` variables say how many nodes and workers a
//! node, each node's `elasticrun` starts its workers (they join through a
//! real etcd by themselves) and, on nodes 0 and 1, a coordinator replica.

use std::time::Duration;

use integration_tests::elastic::{Train, check_done, generations};
use integration_tests::etcd::Etcd;
use integration_tests::pods::{Node, PodJob};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(90);

/// What Trainer's torch plugin gives node `rank` of `nodes`, two workers
/// each.
fn trainer_env(nodes: usize, rank: usize) -> Vec<(&'static str, String)> {
    vec![
        ("PET_NNODES", nodes.to_string()),
        ("PET_NPROC_PER_NODE", "2".into()),
        ("PET_NODE_RANK", rank.to_string()),
        ("PET_MASTER_ADDR", "127.0.0.1".into()),
        // A replica's control plane: each node is a pod with an address
        // of its own in a cluster, here they share one.
        (
            "PET_MASTER_PORT",
            integration_tests::ports::unused().to_string(),
        ),
    ]
}

fn node(rank: usize) -> Node {
    Node::local(&format!("node-{rank}"))
}

#[test]
fn trainer_nodes_run_the_job_from_torchruns_variables() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("trainer_nodes", etcd);
    let train = Train {
        epochs: 3,
        samples: 640,
        step_delay_ms: 0,
        commit_every: 5,
    };
    for rank in 0..2 {
        job.node_pod(&node(rank), &train, &trainer_env(2, rank));
    }
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    // 2 nodes x 2 workers, as if started by one launcher.
    assert!(
        run.stderr.contains("generation 1: 4 workers ("),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("node-0:2") && run.stderr.contains("node-1:2"),
        "{}",
        run.stderr
    );
    let state = check_done(&run, 4, train.expected_steps());
    assert_eq!(state, train.undisturbed_state(4), "{}", run.stderr);
    // Both nodes ran a replica.
    let said = |s: &str| run.stderr.matches(s).count();
    assert_eq!(
        said("etcd mode on this node: 2 worker(s), and a coordinator replica"),
        2
    );
    // One led (another may take over if etcd saw the first's lease lapse
    // on a loaded machine; the job goes on either way).
    assert!(said("elasticrun: leading job") >= 1, "{}", run.stderr);
}

/// A node of rank 2 or more runs no replica; a killed worker ends its pod
/// (the others leave), which the cluster starts again: it rejoins, and the
/// job ends on every rank with the weights of the other ranks.
#[test]
fn a_nodes_killed_worker_ends_its_pod_and_the_restarted_pod_rejoins() {
    let Some(etcd) = Etcd::start() else { return };
    let mut job = PodJob::new("trainer_node_killed", etcd);
    let train = Train {
        epochs: 6,
        samples: 1280,
        step_delay_ms: 30,
        commit_every: 5,
    };
    let envs: Vec<_> = (0..3).map(|r| trainer_env(3, r)).collect();
    for (rank, env) in envs.iter().enumerate() {
        job.node_pod(&node(rank), &train, env);
    }
    job.wait_for_step(10, LIMIT);
    // A worker of node 2: a child of its elasticrun.
    let pid = job.pod_pid(2);
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let worker: i32 = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("node 2's elasticrun has no child"));
    kill(Pid::from_raw(worker), Signal::SIGKILL).unwrap();
    let ended = job.finish_pod(2, LIMIT);
    assert_eq!(ended.status.code(), Some(137), "{}", ended.stderr);
    assert!(
        ended
            .stderr
            .contains("etcd mode on this node: 2 worker(s)\n")
            && ended
                .stderr
                .contains("of this pod ended with exit code 137"),
        "{}",
        ended.stderr
    );
    // The cluster starts the pod again.
    job.node_pod(&node(2), &train, &envs[2]);
    let run = job.finish_pods(LIMIT);
    run.expect_code(0);
    let state = check_done(&run, 6, train.expected_steps());
    assert!(generations(&run.stderr).len() >= 2, "{}", run.stderr);
    // The job trains only with all six (PET_NNODES=3 is its least too) and
    // goes on from its last commit: the weights of an undisturbed run.
    assert_eq!(state, train.undisturbed_state(6), "{}", run.stderr);
}

/// On one machine torchrun's variables are `-np`'s default
/// (`PET_NPROC_PER_NODE` workers of one node), with no etcd; more than one
/// node without etcd mode is refused saying what to set.
#[test]
fn on_one_machine_torchruns_variables_size_the_job() {
    let train = Train {
        epochs: 1,
        samples: 320,
        step_delay_ms: 0,
        commit_every: 5,
    };
    let run_with = |nodes: &str| {
        let mut cmd = std::process::Command::new(integration_tests::elasticrun());
        cmd.args(train.args())
            .env("PET_NNODES", nodes)
            .env("PET_NPROC_PER_NODE", "3")
            .env("PET_NODE_RANK", "0");
        integration_tests::start(cmd).finish(LIMIT)
    };
    let run = run_with("1");
    run.expect_code(0);
    check_done(&run, 3, train.expected_steps());
    let refused = run_with("2");
    assert_eq!(refused.status.code(), Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("PET_NNODES asks for 2 nodes")
            && refused.stderr.contains("ELASTICRUN_ETCD"),
        "{}",
        refused.stderr
    );
}
