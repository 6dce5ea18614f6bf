//! Elastic jobs inside a real Slurm allocation, with no discovery script:
//! `--min-np`/`--max-np` make the allocation's nodes the hosts (less those
//! Slurm holds unusable), and every worker, replacements included, is a
//! step started with `srun`.

use std::time::Duration;

use integration_tests::elastic::{Train, check_done, final_world_sizes, generations, steps};
use integration_tests::needs::Need;
use integration_tests::netns::Cluster;
use integration_tests::slurm::Slurm;
use integration_tests::{env_of, start, wait_for};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const JOB: Duration = Duration::from_secs(120);

/// 100 steps of about 30 ms: room to kill a worker mid-run and see its
/// replacement train.
const SHORT: Train = Train {
    epochs: 10,
    samples: 640,
    step_delay_ms: 20,
    commit_every: 4,
};

/// The `train` processes of `slurm`'s job `job` on this machine, with
/// their step ids: found through `/proc`, as they are slurmstepd's children
/// and not elasticrun's (another test's Slurm numbers its jobs from 1 too).
fn trains_of(slurm: &Slurm, job: Option<&str>) -> Vec<(i32, String)> {
    let conf = slurm.conf().to_str().expect("a UTF-8 path");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "train")
        })
        .filter(|&p| job.is_none() || env_of(p, "SLURM_JOB_ID").as_deref() == job)
        .filter(|&p| env_of(p, "SLURM_CONF").as_deref() == Some(conf))
        .filter_map(|p| Some((p, env_of(p, "SLURM_STEP_ID")?)))
        .collect()
}

#[test]
fn a_worker_killed_in_an_elastic_allocation_is_replaced_by_a_new_step() {
    let Some(slurm) = Slurm::start("elastic-kill") else {
        return;
    };
    let mut c = slurm.command("salloc");
    // Three tasks on a node of fewer cores: --overcommit.
    c.args(["-N1", "-n3", "--overcommit", "--quiet"])
        .arg(integration_tests::elasticrun())
        .args([
            "--min-np",
            "2",
            "--max-np",
            "3",
            "--replacement-wait",
            "30",
            "--discovery-interval",
            "0.2",
        ])
        .args(SHORT.args());
    let run = start(c);
    let job = wait_for("the Slurm job", Duration::from_secs(30), || slurm.job_id());
    let first = wait_for(
        "three workers, each a step",
        Duration::from_secs(60),
        || {
            let w = trains_of(&slurm, Some(&job));
            (w.len() == 3).then_some(w)
        },
    );
    wait_for("step 15", Duration::from_secs(60), || {
        steps(&run.stdout_so_far())
            .iter()
            .find(|s| s.step >= 15)
            .map(|_| ())
    });
    let victim = first[1].0;
    kill(Pid::from_raw(victim), Signal::SIGKILL).expect("kill a worker");
    let (pid, step) = wait_for(
        "the replacement, a new step",
        Duration::from_secs(60),
        || {
            trains_of(&slurm, Some(&job))
                .into_iter()
                .find(|(_, s)| first.iter().all(|(_, f)| f != s))
        },
    );
    eprintln!(
        "worker {victim} (step {}) replaced by {pid} (step {step})",
        first[1].1
    );
    let run = run.finish(JOB);
    if run.status.code() != Some(0) {
        eprintln!("slurm's logs:\n{}", slurm.logs());
    }
    run.expect_code(0);
    assert!(
        generations(&run.stderr).len() >= 2,
        "no new generation:\n{}",
        run.stderr
    );
    // The job ran on three ranks at every step it kept: an undisturbed
    // run's weights.
    let sizes = final_world_sizes(&run.stdout);
    assert!(sizes.iter().all(|&n| n == 3), "{sizes:?}\n{}", run.stderr);
    let state = check_done(&run, 3, SHORT.expected_steps());
    assert_eq!(state, SHORT.undisturbed_state(3), "{}", run.stderr);
    assert!(
        trains_of(&slurm, Some(&job)).is_empty(),
        "workers outlived the job: {:?}",
        trains_of(&slurm, Some(&job))
    );
}

/// 200 steps of about 45 ms: a job that outlasts a node's failure.
const LONGER: Train = Train {
    epochs: 20,
    samples: 640,
    step_delay_ms: 30,
    commit_every: 4,
};

/// The hosts of `elasticrun: generation G: N workers (h1:2, h2:2)` lines.
fn generation_hosts(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with("elasticrun: generation ") && l.contains(" workers ("))
        .filter_map(|l| {
            Some(
                l.split_once(" workers (")?
                    .1
                    .trim_end_matches(')')
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_node_set_down_is_left_out_and_a_spare_node_takes_its_place() {
    let Some(cluster) = Need::NetworkNamespaces.or_skip(Cluster::create_bare("s31", (234, 1), 3))
    else {
        return;
    };
    let Some(slurm) = Slurm::start_on("nodes", &cluster) else {
        return;
    };
    assert_eq!(slurm.nodes(), ["n1", "n2", "n3"]);
    let mut c = slurm.command("salloc");
    // Two tasks a node on three nodes; --max-np 4 leaves one node spare.
    // --no-kill: a node's failure does not end the allocation.
    c.args(["-N3", "-n6", "--overcommit", "--no-kill", "--quiet"])
        .arg(integration_tests::elasticrun())
        .args([
            "--min-np",
            "2",
            "--max-np",
            "4",
            "--network-interface",
            "eth0",
            "--replacement-wait",
            "30",
            "--discovery-interval",
            "0.2",
        ])
        .args(LONGER.args());
    let run = start(c);
    wait_for("step 20 on four ranks", Duration::from_secs(60), || {
        steps(&run.stdout_so_far())
            .iter()
            .find(|s| s.step >= 20 && s.world_size == 4)
            .map(|_| ())
    });
    let first = generation_hosts(&run.stderr_so_far());
    assert_eq!(first, ["n1:2, n2:2"], "{}", run.stderr_so_far());
    let out = slurm
        .command("scontrol")
        .args([
            "update",
            "nodename=n2",
            "state=down",
            "reason=elasticrun-test",
        ])
        .output()
        .expect("scontrol");
    assert!(out.status.success(), "{out:?}");
    let run = run.finish(JOB);
    if run.status.code() != Some(0) {
        eprintln!("slurm's logs:\n{}", slurm.logs());
    }
    run.expect_code(0);
    eprintln!("{}", run.stderr);
    let all = generation_hosts(&run.stderr);
    let last = all.last().expect("a generation");
    assert!(
        last.contains("n3:2") && !last.contains("n2"),
        "{all:?}\n{}",
        run.stderr
    );
    let sizes = final_world_sizes(&run.stdout);
    assert!(sizes.iter().all(|&n| n == 4), "{sizes:?}\n{}", run.stderr);
    wait_for(
        "no worker left on any node",
        Duration::from_secs(30),
        || trains_of(&slurm, None).is_empty().then_some(()),
    );
    let state = check_done(&run, 4, LONGER.expected_steps());
    assert_eq!(state, LONGER.undisturbed_state(4), "{}", run.stderr);
}
