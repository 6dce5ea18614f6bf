//! Batch jobs (`sbatch`) against a real Slurm: `elasticrun` in a batch
//! script trains to a local job's weights, and the requeue recipe of
//! docs/slurm.md (the warning signal to the batch shell, passed on by
//! elasticrun to the workers, which checkpoint and stop; the script then
//! requeues the job, which resumes from the checkpoint) runs as written.

use std::path::Path;
use std::time::Duration;

use integration_tests::elastic::{Scratch, Train, check_done};
use integration_tests::slurm::Slurm;
use integration_tests::{Finished, wait_for};

const JOB: Duration = Duration::from_secs(90);

/// `sbatch --wait ARGS... SCRIPT` against `slurm`, its output in `dir`:
/// the batch job's exit status and what it printed.
fn sbatch(slurm: &Slurm, dir: &Path, args: &[&str], script: &str) -> Finished {
    let file = dir.join("job.sh");
    std::fs::write(&file, script).expect("write the batch script");
    let (out, err) = (dir.join("out"), dir.join("err"));
    let mut c = slurm.command("sbatch");
    c.args(["--wait", "--quiet"])
        .arg(format!("--output={}", out.display()))
        .arg(format!("--error={}", err.display()))
        .arg(format!("--chdir={}", dir.display()))
        .args(args)
        .arg(&file);
    let run = integration_tests::start(c).finish(JOB);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let done = Finished {
        status: run.status,
        stdout: read(&out),
        stderr: read(&err),
    };
    if done.status.code() != Some(0) {
        eprintln!(
            "sbatch: {}\nstdout:\n{}\nstderr:\n{}\nslurm's logs:\n{}",
            run.stderr,
            done.stdout,
            done.stderr,
            slurm.logs()
        );
    }
    done
}

#[test]
fn a_batch_job_trains_to_a_local_jobs_weights() {
    let Some(slurm) = Slurm::start("sbatch") else {
        return;
    };
    let scratch = Scratch::new("sbatch");
    let train = Train {
        epochs: 1,
        samples: 512,
        step_delay_ms: 0,
        commit_every: 4,
    };
    let local = train.undisturbed_state(2);
    let args: Vec<String> = train.args().iter().map(|a| format!("'{a}'")).collect();
    let script = format!(
        "#!/bin/sh\nexec '{}' {}\n",
        integration_tests::elasticrun().display(),
        args.join(" ")
    );
    let run = sbatch(&slurm, &scratch.dir, &["-N1", "-n2"], &script);
    run.expect_code(0);
    assert_eq!(check_done(&run, 2, train.expected_steps()), local);
}

/// A program that counts to 40, a count every 50 ms, checkpointing every
/// count to `ckpt.$RANK` and starting from the checkpoint; on SIGUSR1 it
/// stops at once (its checkpoint saved) with exit 0.
const COUNTER: &str = r#"ckpt="ckpt.$RANK"; i=0
[ -f "$ckpt" ] && i=$(cat "$ckpt")
from=$i; warned=0
trap 'warned=1' USR1
echo "rank $RANK from $from restart ${SLURM_RESTART_COUNT:-0}"
while [ "$i" -lt 40 ] && [ "$warned" = 0 ]; do
  sleep 0.05; i=$((i + 1)); echo "$i" > "$ckpt"
done
echo "rank $RANK stopped at $i""#;

/// docs/slurm.md's requeue recipe, with the counter as the program.
fn requeue_script(program: &Path) -> String {
    format!(
        r#"#!/bin/bash
warned=0
trap 'warned=1; kill -USR1 "$pid"' USR1
'{elasticrun}' sh '{program}' &
pid=$!
wait "$pid"; rc=$?
while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
if [ "$warned" = 1 ]; then scontrol requeue "$SLURM_JOB_ID"; fi
exit "$rc"
"#,
        elasticrun = integration_tests::elasticrun().display(),
        program = program.display(),
    )
}

#[test]
fn the_requeue_recipe_resumes_from_the_checkpoint_after_the_warning() {
    let Some(slurm) = Slurm::start("requeue") else {
        return;
    };
    let scratch = Scratch::new("requeue");
    let program = scratch.write("counter.sh", COUNTER);
    let script = requeue_script(&program);
    let dir = scratch.dir.clone();
    let job = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            sbatch(
                &slurm,
                &dir,
                &["-N1", "-n2", "--requeue", "--open-mode=append"],
                &script,
            )
        });
        // Both ranks counting: the batch shell gets the warning (what
        // `--signal=B:USR1@T` sends it at T before the end).
        wait_for("both ranks counting", JOB, || {
            let ok = (0..2).all(|r| {
                std::fs::read_to_string(dir.join(format!("ckpt.{r}")))
                    .is_ok_and(|c| c.trim().parse::<u32>().is_ok_and(|n| n >= 5))
            });
            ok.then_some(())
        });
        let out = slurm
            .command("scancel")
            .args(["--batch", "--signal=USR1", "--name=job.sh"])
            .output()
            .expect("scancel");
        assert!(out.status.success(), "{out:?}");
        // Slurm holds a requeued job for its credential lifetime (120 s
        // by default); let it start at once.
        let id = wait_for("the job requeued", JOB, || {
            let q = slurm
                .command("squeue")
                .args(["-h", "-o", "%i %T %r"])
                .output()
                .ok()?;
            let text = String::from_utf8_lossy(&q.stdout).into_owned();
            let (id, rest) = text.trim().split_once(' ')?;
            (rest.starts_with("PENDING") && rest.contains("BeginTime")).then(|| id.to_owned())
        });
        let out = slurm
            .command("scontrol")
            .args(["update", &format!("jobid={id}"), "starttime=now"])
            .output()
            .expect("scontrol");
        assert!(out.status.success(), "{out:?}");
        waiting.join().expect("sbatch")
    });
    job.expect_code(0);
    for rank in 0..2 {
        let first = format!("[{rank}]<stdout>:rank {rank} from 0 restart 0");
        assert!(
            job.stdout.contains(&first),
            "{}\n{}",
            job.stdout,
            job.stderr
        );
        // The second run (SLURM_RESTART_COUNT 1) starts where the first stopped.
        let stopped: u32 = job
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("[{rank}]<stdout>:rank {rank} stopped at ")))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("rank {rank} never stopped:\n{}", job.stdout));
        assert!(stopped < 40, "the warning came too late: {}", job.stdout);
        let resumed = format!("[{rank}]<stdout>:rank {rank} from {stopped} restart 1");
        assert!(
            job.stdout.contains(&resumed),
            "{}\n{}",
            job.stdout,
            job.stderr
        );
        let end = format!("[{rank}]<stdout>:rank {rank} stopped at 40");
        assert!(job.stdout.contains(&end), "{}", job.stdout);
    }
}
