//! Chaos on elastic jobs, on one machine: workers killed (one, rank 0, two
//! at once), slots added and removed through the discovery file, a flaky
//! discovery script, a host blacklisted, too few workers for too long, the
//! reset limit; more in [`more`]. Every test bounds its job and checks that
//! no `train` process outlives it.

mod more;
mod spares;

use std::time::Duration;

use integration_tests::elastic::{
    Chaos, Job, Scratch, Train, WorkerProc, check_done, check_no_rollback,
    check_reset_limit_reached, check_too_few_for_elastic_timeout, final_world_sizes, generations,
    steps,
};
use integration_tests::{Finished, wait_for};

/// Bound on a whole job.
const JOB: Duration = Duration::from_secs(60);

/// About 30 ms a step: 60 steps, two seconds or so undisturbed.
const SHORT: Train = Train {
    epochs: 6,
    samples: 640,
    step_delay_ms: 20,
    commit_every: 4,
};

/// 100 steps: room for workers to start and join before the end.
const LONGER: Train = Train {
    epochs: 10,
    ..SHORT
};

/// `--host-discovery-script DISCOVERY --replacement-wait 30 REST...`: these
/// tests wait for every replacement, as their checks compare with
/// undisturbed runs and count generations, and a replacement that takes more
/// than the default half second on a loaded machine would join in a
/// generation of its own. The default is tested in
/// `survivors_train_on_while_a_slow_replacement_starts_and_it_joins_later`.
fn elastic<'a>(discovery: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "--host-discovery-script",
        discovery,
        "--replacement-wait",
        "30",
    ];
    v.extend_from_slice(rest);
    v
}

/// Failure lines elasticrun wrote about its workers.
fn failure_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("elasticrun: worker") || l.starts_with("elasticrun: cannot"))
        .collect()
}

/// Checks the end of a run on `np` ranks that had `np` ranks at every step
/// it kept: the weights are those of an undisturbed run, bit for bit.
fn check_same_as_undisturbed(run: &Finished, np: u64, train: &Train) {
    let sizes = final_world_sizes(&run.stdout);
    assert_eq!(sizes.len() as u64, train.expected_steps(), "{}", run.stdout);
    assert!(sizes.iter().all(|&n| n == np), "{sizes:?}");
    let state = check_done(run, np, train.expected_steps());
    assert_eq!(state, train.undisturbed_state(np), "{}", run.stdout);
}

/// Runs `SHORT` on `localhost:NP` and kills the workers `victims` picks (it
/// gets the first workers, by slot, and waits for the right moment). The job
/// must go on from its last commit and end on NP ranks that hold the weights
/// of an undisturbed run. Returns the run and the first workers.
fn kill_mid_run(
    test: &str,
    np: u64,
    victims: impl FnOnce(&Job, &[WorkerProc]) -> Vec<i32>,
) -> (Finished, Vec<WorkerProc>) {
    let scratch = Scratch::new(test);
    scratch.set_hosts(&format!("localhost:{np}\n"));
    let discovery = scratch.file_discovery();
    let max_np = np.to_string();
    let job = Job::start(
        &elastic(&discovery, &["--min-np", "2", "--max-np", &max_np]),
        &SHORT,
    );
    let first = job.wait_for_workers(np as usize);
    let pids = victims(&job, &first);
    let killed_at = job.steps().last().map_or(0, |s| s.step);
    for &p in &pids {
        job.kill(p);
    }
    let run = job.finish(JOB);
    run.expect_code(0);
    let killed = run
        .stderr
        .lines()
        .filter(|l| l.contains("was killed by signal 9 (SIGKILL)"))
        .count();
    assert_eq!(killed, pids.len(), "{}", run.stderr);
    assert!(
        generations(&run.stderr).len() >= 2,
        "no new generation:\n{}",
        run.stderr
    );
    assert!(
        killed_at < SHORT.expected_steps(),
        "the kill came after the last step"
    );
    check_same_as_undisturbed(&run, np, &SHORT);
    check_recoveries(&run.stderr);
    (run, first)
}

/// elasticrun said how each recovery went: the new generation runs again
/// from a commit after the step the kill interrupted, and the count of steps
/// rolled back is the difference.
fn check_recoveries(stderr: &str) {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("elasticrun: generation ") && l.contains(" running "))
        .collect();
    assert!(!lines.is_empty(), "no recovery line:\n{stderr}");
    for line in lines {
        let (_, rollback) = line
            .split_once(" after the failure; ")
            .unwrap_or_else(|| panic!("{line}"));
        let steps = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| panic!("{line}")) };
        if let Some(at) = rollback.strip_prefix("nothing rolled back (step ") {
            assert!(steps(at.trim_end_matches(')')) > 0, "{line}");
            continue;
        }
        let (count, span) = rollback
            .split_once(" rolled back (step ")
            .unwrap_or_else(|| panic!("{line}"));
        let (reached, resumed) = span
            .trim_end_matches(')')
            .split_once(" -> ")
            .unwrap_or_else(|| panic!("{line}"));
        let (reached, resumed) = (steps(reached), steps(resumed));
        assert!(resumed > 0 && reached > resumed, "{line}");
        let n = reached - resumed;
        let want = if n == 1 {
            "1 step".to_owned()
        } else {
            format!("{n} steps")
        };
        assert_eq!(count, want, "{line}");
    }
}

#[test]
fn a_killed_worker_is_replaced_and_no_committed_step_is_lost() {
    let mut chaos = Chaos::from_env();
    kill_mid_run("kill-one", 3, |job, w| {
        let at = job.wait_for_step_at_least(15);
        assert_eq!(at.pid, w[0].pid, "rank 0 runs on slot 0 at first");
        let victim = 1 + chaos.below(2) as usize;
        eprintln!("killing rank {victim} at step {}", at.step);
        vec![w[victim].pid]
    });
}

#[test]
fn killing_rank_0_moves_rank_0_to_a_survivor() {
    let (run, first) = kill_mid_run("kill-rank0", 3, |job, _| {
        vec![job.wait_for_step_at_least(15).pid]
    });
    // Rank 0 goes to the survivor of the highest rank (rank 1 keeps its
    // rank; the replacement takes rank 2).
    let last = steps(&run.stdout).last().copied().unwrap();
    assert_eq!(last.pid, first[2].pid, "{}", run.stdout);
}

#[test]
fn two_workers_killed_at_once_are_both_replaced() {
    let mut chaos = Chaos::from_env();
    kill_mid_run("kill-two", 4, |job, w| {
        let at = job.wait_for_step_at_least(15);
        let first = chaos.below(4) as usize;
        let second = (first + 1 + chaos.below(3) as usize) % 4;
        eprintln!("killing ranks {first} and {second} at step {}", at.step);
        vec![w[first].pid, w[second].pid]
    });
}

#[test]
fn slots_added_mid_run_join_at_a_commit_without_rollback() {
    let scratch = Scratch::new("grow");
    scratch.set_hosts("localhost:2\n");
    let discovery = scratch.file_discovery();
    let job = Job::start(
        &elastic(&discovery, &["--min-np", "2", "--max-np", "4"]),
        &LONGER,
    );
    job.wait_for_workers(2);
    let before = job.wait_for_step_at_least(10);
    assert_eq!(before.world_size, 2);
    scratch.set_hosts("localhost:4\n");
    let after = job.wait_for_step("a step on 4 ranks", |s| s.world_size == 4);
    assert_eq!(after.pid, before.pid, "rank 0 stays rank 0");
    let run = job.finish(JOB);
    run.expect_code(0);
    assert!(failure_lines(&run.stderr).is_empty(), "{}", run.stderr);
    check_no_rollback(&run.stdout);
    check_done(&run, 4, LONGER.expected_steps());
}

#[test]
fn slots_removed_mid_run_leave_cleanly() {
    let scratch = Scratch::new("shrink");
    scratch.set_hosts("localhost:4\n");
    let discovery = scratch.file_discovery();
    let job = Job::start(
        &elastic(&discovery, &["--min-np", "2", "--max-np", "4"]),
        &LONGER,
    );
    let w = job.wait_for_workers(4);
    let before = job.wait_for_step_at_least(10);
    assert_eq!(before.world_size, 4);
    scratch.set_hosts("localhost:2\n");
    job.wait_for_step("a step on 2 ranks", |s| s.world_size == 2);
    let left: Vec<i32> = w[2..].iter().map(|w| w.pid).collect();
    wait_for("the removed workers to exit", JOB, || {
        job.workers()
            .iter()
            .all(|w| !left.contains(&w.pid))
            .then_some(())
    });
    let run = job.finish(JOB);
    run.expect_code(0);
    assert!(failure_lines(&run.stderr).is_empty(), "{}", run.stderr);
    // Leaving is news, not an error: the worker says so on its stdout,
    // elasticrun in a line of its own.
    for id in [2, 3] {
        let leaving = format!("[{id}]<stdout>:train: localhost slot {id} has no place");
        assert!(
            run.stdout.contains(&leaving),
            "worker {id} did not leave cleanly:\n{}",
            run.stdout
        );
        assert!(
            !run.stderr.contains(&format!("[{id}]<stderr>:train:")),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains("ERROR"), "{}", run.stderr);
        let told = format!(
            "elasticrun: left the job as told: worker {id} on localhost slot {id} (no place in the new generation)"
        );
        assert!(run.stderr.lines().any(|l| l == told), "{}", run.stderr);
    }
    check_no_rollback(&run.stdout);
    check_done(&run, 2, LONGER.expected_steps());
}

#[test]
fn a_flaky_discovery_script_keeps_the_last_good_host_set() {
    let scratch = Scratch::new("flaky");
    let count = scratch.dir.join("count");
    let script = scratch.write(
        "flaky.sh",
        &format!(
            // The count is replaced whole (a rename): elasticrun stops a run
            // still going when the job ends, which must not leave it empty.
            "n=$(cat {c} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {c}.new; mv {c}.new {c}\n\
             if [ $((n % 2)) = 0 ]; then echo 'flaky on purpose' >&2; exit 1; fi\n\
             echo localhost:3\n",
            c = count.display()
        ),
    );
    let discovery = format!("/bin/sh {}", script.display());
    let job = Job::start(
        &elastic(&discovery, &["--min-np", "2", "--max-np", "3"]),
        &SHORT,
    );
    let w = job.wait_for_workers(3);
    job.wait_for_stderr("flaky on purpose", Duration::from_secs(10));
    // A failure while discovery flaps: the replacement goes on the last
    // good host set.
    job.wait_for_step_at_least(15);
    job.kill(w[1].pid);
    let run = job.finish(JOB);
    run.expect_code(0);
    let line = "elasticrun: host discovery: it failed (exit status: 1): flaky on purpose; \
                keeping the last good host set";
    assert!(run.stderr.contains(line), "{}", run.stderr);
    let runs: u64 = std::fs::read_to_string(&count)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(runs >= 4, "the script ran {runs} times");
    check_same_as_undisturbed(&run, 3, &SHORT);
}

/// Starts `train` on `localhost:2` and `127.0.0.1:1` (this machine under
/// another name: a host of its own for the membership) with `options`, and
/// kills the worker on 127.0.0.1 in each of the first three generations,
/// once it has trained a little; the third failure within 60 s blacklists
/// the host. Returns the job, once elasticrun has said `blacklisted`.
fn kill_until_blacklisted(
    scratch: &Scratch,
    options: &[&str],
    train: &Train,
    blacklisted: &str,
) -> Job {
    scratch.set_hosts("localhost:2\n127.0.0.1:1\n");
    let discovery = scratch.file_discovery();
    let mut all = vec!["--min-np", "2", "--max-np", "3"];
    all.extend_from_slice(options);
    let job = Job::start(&elastic(&discovery, &all), train);
    let mut killed = Vec::new();
    for generation in 1..=3 {
        let header = format!("elasticrun: generation {generation}: 3 workers");
        job.wait_for_stderr(&header, JOB);
        let victim = wait_for("a worker on 127.0.0.1", JOB, || {
            job.workers()
                .into_iter()
                .find(|w| w.host == "127.0.0.1" && !killed.contains(&w.pid))
        });
        let now = job.steps().last().map_or(0, |s| s.step);
        job.wait_for_step_at_least(now + 3);
        let so_far = job.stderr_so_far();
        assert!(!so_far.contains(blacklisted), "too early:\n{so_far}");
        job.kill(victim.pid);
        killed.push(victim.pid);
    }
    job.wait_for_stderr(blacklisted, Duration::from_secs(10));
    job
}

#[test]
fn a_host_whose_workers_keep_dying_is_blacklisted_and_the_job_goes_on() {
    let scratch = Scratch::new("blacklist");
    let train = Train {
        epochs: 20,
        ..SHORT
    };
    let blacklisted = "elasticrun: host 127.0.0.1 is blacklisted for the rest of the job";
    let job = kill_until_blacklisted(&scratch, &[], &train, blacklisted);
    let on_two = job.wait_for_step("a step on 2 ranks", |s| s.world_size == 2);
    assert!(on_two.step < train.expected_steps(), "blacklisted too late");
    let run = job.finish(JOB);
    run.expect_code(0);
    assert_eq!(generations(&run.stderr).len(), 4, "{}", run.stderr);
    let last = "elasticrun: generation 4: 2 workers (localhost:2)";
    assert!(run.stderr.contains(last), "{}", run.stderr);
    check_done(&run, 2, train.expected_steps());
}

#[test]
fn too_few_workers_for_longer_than_the_elastic_timeout_end_the_job() {
    let scratch = Scratch::new("too-few");
    scratch.set_hosts("localhost:2\n");
    let discovery = scratch.file_discovery();
    let train = Train {
        epochs: 100,
        ..SHORT
    };
    let job = Job::start(
        &elastic(
            &discovery,
            &["--min-np", "2", "--max-np", "2", "--elastic-timeout", "2"],
        ),
        &train,
    );
    let w = job.wait_for_workers(2);
    job.wait_for_step_at_least(5);
    scratch.set_hosts("localhost:1\n");
    job.wait_for_stderr("elasticrun: hosts changed", Duration::from_secs(10));
    job.kill(w[1].pid);
    // A bound against a hang, far above the 2 s timeout; when the timeout
    // fires is the membership core's to test, on its virtual clock.
    let run = job.finish(Duration::from_secs(30));
    run.expect_code(1);
    check_too_few_for_elastic_timeout(&run.stderr, 2, "2");
    assert!(
        steps(&run.stdout).last().unwrap().step < train.expected_steps(),
        "the job trained to the end"
    );
}

#[test]
fn the_reset_limit_ends_the_job() {
    let scratch = Scratch::new("reset-limit");
    scratch.set_hosts("localhost:3\n");
    let discovery = scratch.file_discovery();
    let train = Train {
        epochs: 20,
        ..SHORT
    };
    let job = Job::start(
        &elastic(
            &discovery,
            &["--min-np", "2", "--max-np", "3", "--reset-limit", "1"],
        ),
        &train,
    );
    let w = job.wait_for_workers(3);
    job.wait_for_step_at_least(5);
    job.kill(w[1].pid);
    job.wait_for_stderr("elasticrun: generation 2: 3 workers", JOB);
    let now = job.steps().last().unwrap().step;
    job.wait_for_step_at_least(now + 3);
    job.kill(w[2].pid);
    let run = job.finish(Duration::from_secs(15));
    run.expect_code(1);
    check_reset_limit_reached(&run.stderr, 1);
    assert_eq!(generations(&run.stderr).len(), 2, "{}", run.stderr);
}
