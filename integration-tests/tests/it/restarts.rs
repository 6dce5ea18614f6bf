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
const CHECKPOINTING: &str = r#"
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
