//! Jobs inside a real Slurm allocation (munge, slurmctld and slurmd started
//! on this machine): `elasticrun` takes the allocation's hosts and slots
//! without `-H` and starts every worker as a step of the job with `srun`;
//! training ends on a local job's weights; `scancel` stops everything.

use std::time::Duration;

use integration_tests::elastic::{Train, check_done};
use integration_tests::slurm::Slurm;
use integration_tests::{Finished, elasticrun, start, wait_for};

const JOB: Duration = Duration::from_secs(90);

/// `salloc -N1 -n2 elasticrun ARGS...` against `slurm`.
fn salloc(slurm: &Slurm, args: &[&str]) -> integration_tests::Running {
    let mut c = slurm.command("salloc");
    c.args(["-N1", "-n2", "--quiet"])
        .arg(elasticrun())
        .args(args);
    start(c)
}

fn finished(slurm: &Slurm, run: integration_tests::Running) -> Finished {
    let run = run.finish(JOB);
    if run.status.code() != Some(0) {
        eprintln!("slurm's logs:\n{}", slurm.logs());
    }
    run
}

#[test]
fn a_job_inside_an_allocation_takes_its_hosts_and_starts_each_worker_as_a_step() {
    let Some(slurm) = Slurm::start("steps") else {
        return;
    };
    let run = salloc(
        &slurm,
        &[
            "sh",
            "-c",
            r#"echo "rank $RANK of $WORLD_SIZE job $SLURM_JOB_ID step $SLURM_STEP_ID on $(hostname -s)""#,
        ],
    );
    let run = finished(&slurm, run);
    run.expect_code(0);
    let node = integration_tests::slurm::node_name();
    let mut steps = Vec::new();
    for rank in 0..2 {
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("[{rank}]<stdout>:rank {rank} of 2 job ")))
            .unwrap_or_else(|| panic!("no line of rank {rank}:\n{}\n{}", run.stdout, run.stderr));
        let words: Vec<&str> = line.split_whitespace().collect();
        // rank R of 2 job J step S on NODE
        assert!(!words[5].is_empty(), "{line}");
        steps.push(words[7].to_owned());
        assert_eq!(words[9], node, "{line}");
    }
    assert!(steps.iter().all(|s| s.parse::<u32>().is_ok()), "{steps:?}");
    assert_ne!(steps[0], steps[1], "each worker is a step of its own");
}

#[test]
fn training_inside_an_allocation_ends_on_a_local_jobs_weights() {
    let Some(slurm) = Slurm::start("train") else {
        return;
    };
    let train = Train {
        epochs: 1,
        samples: 512,
        step_delay_ms: 0,
        commit_every: 4,
    };
    let local = train.undisturbed_state(2);
    let args = train.args();
    let run = salloc(&slurm, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let run = finished(&slurm, run);
    run.expect_code(0);
    let inside = check_done(&run, 2, train.expected_steps());
    assert_eq!(
        inside, local,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
}

#[test]
fn scancel_stops_the_job_and_leaves_no_worker() {
    let Some(slurm) = Slurm::start("scancel") else {
        return;
    };
    let run = salloc(
        &slurm,
        &["sh", "-c", r#"echo "worker $RANK $$"; exec sleep 300"#],
    );
    let pids: Vec<i32> = wait_for("both workers", Duration::from_secs(60), || {
        let out = run.stdout_so_far();
        let pids: Vec<i32> = out
            .lines()
            .filter_map(|l| {
                l.split_once(":worker ")?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            })
            .collect();
        (pids.len() == 2).then_some(pids)
    });
    let job = slurm.job_id().expect("a job in squeue");
    let out = slurm
        .command("scancel")
        .arg(&job)
        .output()
        .expect("scancel");
    assert!(out.status.success(), "{out:?}");
    let run = run.finish(JOB);
    assert_ne!(run.status.code(), Some(0), "{}", run.stderr);
    wait_for("no worker left", Duration::from_secs(30), || {
        pids.iter()
            .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
            .then_some(())
    });
}

#[test]
fn the_allocation_discovery_script_gives_its_nodes_and_leaves_a_drained_one_out() {
    let Some(slurm) = Slurm::start("discovery") else {
        return;
    };
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../discovery-scripts/slurm-allocation.sh");
    let mut c = slurm.command("salloc");
    c.args(["-N1", "-n2", "--quiet", "sh", "-c"]).arg(
        r#"echo "before: $("$1" | tr '\n' ' ')"
scontrol update nodename="$(hostname -s)" state=drain reason=elasticrun-test
echo "drained: $("$1" | tr '\n' ' ')""#,
    );
    c.arg("sh").arg(&script);
    let run = finished(&slurm, start(c));
    run.expect_code(0);
    let node = integration_tests::slurm::node_name();
    assert!(
        run.stdout.contains(&format!("before: {node}:2 \n")),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(
        run.stdout.contains("drained: \n"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
}

/// Counts SIGUSR1s and ends after the second.
const TWO_WARNINGS: &str = r#"trap 'n=$((n+1)); echo "rank $RANK got USR1"' USR1
n=0; echo "rank $RANK ready"
while [ "$n" -lt 2 ]; do sleep 0.05; done
echo "rank $RANK done""#;

#[test]
fn the_warning_signal_reaches_the_workers_from_slurm_and_through_elasticrun() {
    let Some(slurm) = Slurm::start("signal") else {
        return;
    };
    let run = salloc(&slurm, &["sh", "-c", TWO_WARNINGS]);
    let count = |run: &integration_tests::Running, what: &str| {
        run.stdout_so_far()
            .lines()
            .filter(|l| l.ends_with(what))
            .count()
    };
    wait_for("both workers ready", Duration::from_secs(60), || {
        (count(&run, " ready") == 2).then_some(())
    });
    // sbatch --signal=USR1@T: Slurm signals every step's processes; the
    // step's script must survive it and leave it to the program.
    let job = slurm.job_id().expect("a job in squeue");
    let out = slurm
        .command("scancel")
        .args(["--signal=USR1", &job])
        .output()
        .expect("scancel");
    assert!(out.status.success(), "{out:?}");
    wait_for(
        "both workers warned by Slurm",
        Duration::from_secs(30),
        || (count(&run, " got USR1") == 2).then_some(()),
    );
    // sbatch --signal=B:USR1@T: only elasticrun is signalled; it passes the
    // signal on through srun.
    let elasticrun = integration_tests::descendants(run.pid())
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "elasticrun")
        })
        .expect("elasticrun under salloc");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(elasticrun),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .expect("signal elasticrun");
    let run = finished(&slurm, run);
    run.expect_code(0);
    assert_eq!(count_lines(&run.stdout, " got USR1"), 4, "{}", run.stdout);
    assert_eq!(count_lines(&run.stdout, " done"), 2, "{}", run.stdout);
    assert!(
        run.stderr.contains("SIGUSR1 passed on to 2 workers"),
        "{}",
        run.stderr
    );
}

fn count_lines(text: &str, end: &str) -> usize {
    text.lines().filter(|l| l.ends_with(end)).count()
}
