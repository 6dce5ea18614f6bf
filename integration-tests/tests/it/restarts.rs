//! `--max-restarts`, torchrun's restarts for programs that do not use the
//! runtime: after a worker fails, every worker is started again with
//! `TORCHELASTIC_RESTART_COUNT` one higher, and a program that checkpoints
//! resumes from its checkpoint; past the limit the job fails naming the
//! last failure.

use std::time::Duration;

use integration_tests::elastic::Scratch;
use integration_tests::launch;

const JOB: Duration = Duration::from_secs(60);

/// Counts to 10, checkpointing every count to `$1/ckpt.$RANK` and starting
/// from the checkpoint; rank 1's first start kills itself (SIGKILL) at 5.
pub(crate) const CHECKPOINTING: &str = r#"
ckpt="$1/ckpt.$RANK"; start=0
[ -f "$ckpt" ] && start=$(cat "$ckpt")
i=$start
while [ "$i" -lt 10 ]; do
  i=$((i + 1)); echo "$i" > "$ckpt"
  if [ "$i" -eq 5 ] && [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then kill -9 $$; fi
done
echo "rank $RANK done at $i from $start restart $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS"
"#;

#[test]
fn a_killed_worker_restarts_every_worker_and_the_program_resumes_from_its_checkpoint() {
    let scratch = Scratch::new("restarts");
    let dir = scratch.dir.to_str().expect("a UTF-8 temporary directory");
    let run = launch(&[
        "-np",
        "2",
        "--max-restarts",
        "2",
        "sh",
        "-c",
        CHECKPOINTING,
        "sh",
        dir,
    ])
    .finish(JOB);
    run.expect_code(0);
    assert!(
        run.stderr.contains("was killed by signal 9"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("restarting every worker: restart 1 of 2 (TORCHELASTIC_RESTART_COUNT=1)"),
        "{}",
        run.stderr
    );
    // How long the restart took, from the failure seen to the last worker
    // started again.
    let took = run
        .stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("elasticrun: restart 1 of 2: every worker started again ")?
                .strip_suffix(" ms after the failure")?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no restart time:\n{}", run.stderr));
    assert!(took < 60_000, "{took} ms");
    assert!(
        run.stdout
            .contains("[1]<stdout>:rank 1 done at 10 from 5 restart 1 of 2"),
        "{}",
        run.stdout
    );
    assert!(!run.stderr.contains("restart 2 of 2"), "{}", run.stderr);
}

#[test]
fn past_the_limit_the_job_fails_naming_the_last_failure() {
    let run = launch(&[
        "-np",
        "2",
        "--max-restarts",
        "2",
        "sh",
        "-c",
        r#"echo "start $TORCHELASTIC_RESTART_COUNT"; [ "$RANK" = 1 ] && exit 3; sleep 30"#,
    ])
    .finish(JOB);
    run.expect_code(1);
    for start in 0..3 {
        assert!(
            run.stdout.contains(&format!("[1]<stdout>:start {start}")),
            "{}",
            run.stdout
        );
    }
    assert!(run.stderr.contains("restart 2 of 2"), "{}", run.stderr);
    assert!(run.stderr.contains("exited with code 3"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the job failed after 2 restarts (--max-restarts 2); giving up"),
        "{}",
        run.stderr
    );
}

/// Prints its world once started, then waits for `$1/done` (or a kill):
/// a program of its own that knows nothing of elasticrun.
const WORLD: &str = r#"
echo "start world $WORLD_SIZE rank $RANK local $LOCAL_RANK restart $TORCHELASTIC_RESTART_COUNT"
while [ ! -f "$1/done" ]; do sleep 0.05; done
echo "rank $RANK of $WORLD_SIZE done"
"#;

/// The lines of `out` that say a worker started in a world of `n`.
fn starts(out: &str, n: usize) -> usize {
    out.lines()
        .filter(|l| l.contains(&format!(":start world {n} rank")))
        .count()
}

#[test]
fn an_elastic_job_run_by_restarts_grows_and_shrinks_with_discovery_and_counts_only_failures() {
    let scratch = integration_tests::elastic::Scratch::new("rescale");
    let dir = scratch.dir.to_str().expect("a UTF-8 temporary directory");
    scratch.set_hosts("localhost:2\n");
    let discovery = scratch.file_discovery();
    let run = launch(&[
        "--min-np",
        "2",
        "--max-np",
        "4",
        "--host-discovery-script",
        &discovery,
        "--discovery-interval",
        "0.2",
        "--max-restarts",
        "1",
        "sh",
        "-c",
        WORLD,
        "sh",
        dir,
    ]);
    let limit = Duration::from_secs(30);
    let wait = |what: &str, f: &dyn Fn(&str) -> bool| {
        integration_tests::wait_for(what, limit, || {
            let out = run.stdout_so_far();
            f(&out).then_some(())
        })
    };
    wait("2 workers in a world of 2", &|o| starts(o, 2) == 2);
    // Two more slots: every worker stops, four start, renumbered.
    scratch.set_hosts("localhost:4\n");
    wait("4 workers in a world of 4", &|o| starts(o, 4) == 4);
    // Slots beyond --max-np change nothing; two fewer shrink it back.
    scratch.set_hosts("localhost:2\n");
    wait("a world of 2 again", &|o| starts(o, 2) == 4);
    let out = run.stdout_so_far();
    for rank in 0..4 {
        assert!(
            out.contains(&format!("start world 4 rank {rank} local {rank} restart 0")),
            "{out}"
        );
    }
    // A failure counts as a restart (the one allowed).
    let victim = integration_tests::wait_for("a worker's pid", limit, || {
        integration_tests::descendants(run.pid())
            .into_iter()
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/environ"))
                    .is_ok_and(|e| e.split('\0').any(|v| v == "RANK=1"))
            })
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill a worker");
    wait("the group started again after the failure", &|o| {
        o.lines()
            .filter(|l| l.contains("start world 2") && l.ends_with("restart 1"))
            .count()
            == 2
    });
    scratch.write("done", "");
    let run = run.finish(JOB);
    run.expect_code(0);
    for needle in [
        "starting 2 workers (localhost:2)",
        "hosts changed: 4 workers now (localhost:4); stopping every worker to start again at the new size",
        "hosts changed: 2 workers now (localhost:2)",
        "was killed by signal 9",
        "restarting every worker: restart 1 of 1 (TORCHELASTIC_RESTART_COUNT=1)",
    ] {
        assert!(
            run.stderr.contains(needle),
            "no `{needle}`:\n{}",
            run.stderr
        );
    }
    assert_eq!(run.stdout.matches(" done").count(), 2, "{}", run.stdout);
}
