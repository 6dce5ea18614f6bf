//! Chaos on top of chaos: failures during a host update, a replacement that
//! dies at once or starts slowly, rank 0's host removed, slots flapping, a
//! blacklisted host coming back, elasticrun itself killed.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use integration_tests::elastic::final_world_sizes;

use super::*;

/// `train` on the hosts `hosts` with `--min-np 2 --max-np MAX`.
fn start(scratch: &Scratch, hosts: &str, max_np: &str, train: &Train) -> Job {
    scratch.set_hosts(hosts);
    let discovery = scratch.file_discovery();
    Job::start(
        &elastic(&discovery, &["--min-np", "2", "--max-np", max_np]),
        train,
    )
}

#[test]
fn a_member_killed_during_a_host_update_is_replaced_with_the_newcomers() {
    let scratch = Scratch::new("grow-kill");
    // Commits far apart: the kill most likely lands before the members reach
    // the commit at which they would move, and the update becomes a reset.
    let train = Train {
        commit_every: 20,
        ..LONGER
    };
    let job = start(&scratch, "localhost:2\n", "4", &train);
    let w = job.wait_for_workers(2);
    job.wait_for_step_at_least(21);
    scratch.set_hosts("localhost:4\n");
    job.wait_for_stderr("elasticrun: hosts changed", Duration::from_secs(10));
    job.kill(w[1].pid);
    let run = job.finish(JOB);
    run.expect_code(0);
    assert_eq!(failure_lines(&run.stderr).len(), 1, "{}", run.stderr);
    check_done(&run, 4, train.expected_steps());
}

#[test]
fn a_replacement_killed_at_once_is_replaced_again() {
    let scratch = Scratch::new("kill-replacement");
    let job = start(&scratch, "localhost:3\n", "3", &SHORT);
    let w = job.wait_for_workers(3);
    job.wait_for_step_at_least(15);
    job.kill(w[1].pid);
    let first: Vec<i32> = w.iter().map(|w| w.pid).collect();
    let replacement = wait_for("a replacement", JOB, || {
        job.workers().into_iter().find(|x| !first.contains(&x.pid))
    });
    job.kill(replacement.pid);
    let run = job.finish(JOB);
    run.expect_code(0);
    assert_eq!(failure_lines(&run.stderr).len(), 2, "{}", run.stderr);
    // Killed before it registered, the replacement is not waited for: a
    // generation of 2 trains until the next one comes.
    let sizes = final_world_sizes(&run.stdout);
    if sizes.contains(&2) {
        let short = generations(&run.stderr).iter().any(|g| g.1 == 2);
        assert!(short, "{sizes:?}\n{}", run.stderr);
        check_done(&run, 3, SHORT.expected_steps());
    } else {
        check_same_as_undisturbed(&run, 3, &SHORT);
    }
}

#[test]
fn removing_the_host_of_rank_0_hands_rank_0_on_without_rollback() {
    let scratch = Scratch::new("rank0-host");
    let job = start(&scratch, "localhost:2\n127.0.0.1:2\n", "4", &LONGER);
    let w = job.wait_for_workers(4);
    let at = job.wait_for_step_at_least(15);
    let on_localhost: Vec<i32> = w
        .iter()
        .filter(|w| w.host == "localhost")
        .map(|w| w.pid)
        .collect();
    assert!(on_localhost.contains(&at.pid), "rank 0 is on localhost");
    scratch.set_hosts("127.0.0.1:2\n");
    let after = job.wait_for_step("a step on 2 ranks", |s| s.world_size == 2);
    assert!(!on_localhost.contains(&after.pid), "{after:?}");
    let run = job.finish(JOB);
    run.expect_code(0);
    assert!(failure_lines(&run.stderr).is_empty(), "{}", run.stderr);
    check_no_rollback(&run.stdout);
    check_done(&run, 2, LONGER.expected_steps());
}

#[test]
fn flapping_slots_lose_no_step() {
    let mut chaos = Chaos::from_env();
    let scratch = Scratch::new("flapping");
    let (runs, hosts) = (scratch.dir.join("runs"), scratch.dir.join("hosts.txt"));
    // The file script, counting its runs.
    let script = format!("echo run >> {}; cat {}", runs.display(), hosts.display());
    let script = scratch.write("counting.sh", &script);
    let discovery = format!("/bin/sh {}", script.display());
    scratch.set_hosts("localhost:2\n");
    let train = Train {
        epochs: 25,
        ..SHORT
    };
    let job = Job::start(
        &elastic(&discovery, &["--min-np", "2", "--max-np", "4"]),
        &train,
    );
    job.wait_for_workers(2);
    job.wait_for_step_at_least(10);
    // Changes that last from less than a discovery interval (never seen,
    // or seen while the last generation still forms) to a few: the sleeps
    // are the chaos, not waits for something to happen.
    for i in 0..8 {
        scratch.set_hosts(["localhost:4\n", "localhost:2\n"][i % 2]);
        std::thread::sleep(Duration::from_millis(50 + chaos.below(350)));
    }
    let count = || std::fs::read_to_string(&runs).map_or(0, |t| t.lines().count());
    let last_seen = count();
    wait_for("discovery to see the last change", JOB, || {
        (count() >= last_seen + 2).then_some(())
    });
    wait_for("a generation of 2 with no change pending", JOB, || {
        let err = job.stderr_so_far();
        let last = err.rfind("elasticrun: generation ")?;
        let settled = !err[last..].contains("hosts changed");
        (settled && generations(&err).last()?.1 == 2).then_some(())
    });
    let run = job.finish(JOB);
    run.expect_code(0);
    assert!(failure_lines(&run.stderr).is_empty(), "{}", run.stderr);
    assert!(generations(&run.stderr).len() >= 3, "{}", run.stderr);
    check_no_rollback(&run.stdout);
    check_done(&run, 2, train.expected_steps());
}

#[test]
fn a_blacklisted_host_comes_back_after_its_cooldown() {
    let scratch = Scratch::new("cooldown");
    let train = Train {
        epochs: 20,
        ..SHORT
    };
    let options = ["--blacklist-cooldown-range", "1", "10"];
    let blacklisted = "elasticrun: host 127.0.0.1 is blacklisted for 1 s";
    let job = kill_until_blacklisted(&scratch, &options, &train, blacklisted);
    let back = "elasticrun: host 127.0.0.1 is back from the blacklist";
    job.wait_for_stderr(back, Duration::from_secs(10));
    let run = job.finish(JOB);
    run.expect_code(0);
    let last = "elasticrun: generation 5: 3 workers (localhost:2, 127.0.0.1:1)";
    assert!(run.stderr.contains(last), "{}", run.stderr);
    check_done(&run, 3, train.expected_steps());
}

#[test]
fn elasticrun_killed_with_a_worker_leaves_no_process() {
    let scratch = Scratch::new("coordinator-killed");
    let job = start(&scratch, "localhost:3\n", "3", &SHORT);
    let w = job.wait_for_workers(3);
    job.wait_for_step_at_least(15);
    // The survivors lose a peer and the coordinator at once.
    job.kill(w[1].pid);
    kill(Pid::from_raw(job.pid()), Signal::SIGKILL).unwrap();
    let run = job.finish(JOB);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&run.status),
        Some(9)
    );
}

#[test]
fn survivors_train_on_while_a_slow_replacement_starts_and_it_joins_later() {
    let scratch = Scratch::new("slow-replacement");
    scratch.set_hosts("localhost:3\n");
    let discovery = scratch.file_discovery();
    // Once `gate` exists, a newly started worker waits for `go` before it
    // runs `train`: a replacement that takes as long to start as the test
    // wants (a Python worker importing PyTorch takes seconds).
    let (gate, go) = (scratch.dir.join("gate"), scratch.dir.join("go"));
    let script = format!(
        "if [ -e '{}' ]; then while [ ! -e '{}' ]; do sleep 0.02; done; fi; exec \"$@\"",
        gate.display(),
        go.display()
    );
    // Long enough that the released replacement joins before the end even
    // on a loaded machine.
    let train = Train {
        epochs: 20,
        ..LONGER
    };
    // The default --replacement-wait (`elastic()` sets its own).
    let options = [
        "--host-discovery-script",
        &discovery,
        "--min-np",
        "2",
        "--max-np",
        "3",
    ];
    let job = Job::start_wrapped(&options, &["sh", "-c", &script, "sh"], &train);
    let w = job.wait_for_workers(3);
    job.wait_for_step_at_least(10);
    std::fs::write(&gate, "").unwrap();
    job.kill(w[2].pid);
    // The two survivors go on (after --replacement-wait, 0.5 s by default)
    // while the replacement is held at the gate.
    let on_two = job.wait_for_step("a step on 2 ranks", |s| s.world_size == 2);
    std::fs::write(&go, "").unwrap();
    // Released, it registers and joins at the next commit.
    job.wait_for_step("a step on 3 ranks after it", |s| {
        s.world_size == 3 && s.step > on_two.step
    });
    let run = job.finish(JOB);
    run.expect_code(0);
    assert_eq!(failure_lines(&run.stderr).len(), 1, "{}", run.stderr);
    let sizes: Vec<u64> = generations(&run.stderr).iter().map(|g| g.1).collect();
    assert_eq!(sizes, [3, 2, 3], "{}", run.stderr);
    check_done(&run, 3, train.expected_steps());
}

#[test]
fn workers_of_a_host_with_several_slots_get_one_math_thread() {
    let scratch = Scratch::new("omp-threads");
    scratch.set_hosts("localhost:2\n");
    let discovery = scratch.file_discovery();
    let options = elastic(&discovery, &["--min-np", "2", "--max-np", "2"]);
    let script = r#"echo "omp=${OMP_NUM_THREADS-unset}"; exec "$@""#;
    let job = Job::start_wrapped(&options, &["sh", "-c", script, "sh"], &SHORT);
    let run = job.finish(JOB);
    run.expect_code(0);
    // A value this test was started with reaches the workers as it is.
    let want = std::env::var("OMP_NUM_THREADS").unwrap_or_else(|_| "1".into());
    let seen: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once("<stdout>:omp=").map(|(_, v)| v))
        .collect();
    assert_eq!(seen, [want.as_str(); 2], "{}", run.stdout);
}

/// A worker that cannot be started at all (here: its program does not
/// exist) in an elastic job: elasticrun says so once and tries the slot
/// again later and later, so it hears SIGTERM at once. (It used to start,
/// fail and say so in a loop that never slept: 181,911 lines in 25 s under
/// a process limit, and no signal heard.)
#[test]
fn a_worker_that_cannot_be_started_is_tried_again_later_and_sigterm_is_heard() {
    let scratch = Scratch::new("cannot-start");
    scratch.set_hosts("localhost:1\n");
    let discovery = scratch.file_discovery();
    let program = scratch.dir.join("no-such-program");
    let program = program.to_string_lossy();
    let job = integration_tests::launch(&[
        "--host-discovery-script",
        &discovery,
        "--min-np",
        "1",
        &program,
    ]);
    wait_for("the failed start said", JOB, || {
        job.stderr_so_far()
            .contains("cannot start a worker on localhost slot 0")
            .then_some(())
    });
    kill(Pid::from_raw(job.pid()), Signal::SIGTERM).expect("SIGTERM elasticrun");
    let run = job.finish(Duration::from_secs(10));
    run.expect_code(143);
    let said = run
        .stderr
        .lines()
        .filter(|l| l.contains("cannot start a worker"))
        .count();
    assert_eq!(said, 1, "{}", run.stderr);
}
