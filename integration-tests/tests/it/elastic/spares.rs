//! Hot spares (`--hot-spares`): workers started and registered beyond those
//! that train take a killed member's place with no process to start, and a
//! killed spare is started again without disturbing training.

use super::*;

/// The slot of elasticrun's line `worker on localhost slot N waits as a hot
/// spare (--hot-spares)`.
fn spare_slot(line: &str) -> u32 {
    line.split_once(" slot ")
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no slot in {line:?}"))
}

/// Two train on `localhost:3`, the third waits as a spare.
fn options(discovery: &str, replacement_wait: &'static str) -> Vec<String> {
    [
        "--host-discovery-script",
        discovery,
        "--replacement-wait",
        replacement_wait,
        "-np",
        "2",
        "--min-np",
        "2",
        "--max-np",
        "2",
        "--hot-spares",
        "1",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[test]
fn a_hot_spare_takes_a_killed_members_place_without_waiting_for_a_new_process() {
    let scratch = Scratch::new("hot-spare-takes-over");
    scratch.set_hosts("localhost:3\n");
    let discovery = scratch.file_discovery();
    // Workers started once the gate exists are held there: the process
    // started in place of the one killed cannot register.
    let gate = scratch.dir.join("gate");
    let script = format!(
        "if [ -e '{}' ]; then sleep 3600; fi; exec \"$@\"",
        gate.display()
    );
    // The survivors would wait 10 minutes for a replacement: a generation
    // that forms at once formed with the spare.
    let options = options(&discovery, "600");
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let job = Job::start_wrapped(&options, &["sh", "-c", &script, "sh"], &LONGER);
    let w = job.wait_for_workers(3);
    let spare = spare_slot(&job.wait_for_stderr("waits as a hot spare", JOB));
    job.wait_for_step_at_least(10);
    std::fs::write(&gate, "").unwrap();
    let victim = w.iter().find(|p| p.slot != spare).expect("a member");
    job.kill(victim.pid);
    job.wait_for_stderr("elasticrun: generation 2", Duration::from_secs(20));
    let run = job.finish(JOB);
    run.expect_code(0);
    let sizes: Vec<u64> = generations(&run.stderr).iter().map(|g| g.1).collect();
    assert_eq!(sizes, [2, 2], "{}", run.stderr);
    // The held replacement never registered: the only spare was the first.
    assert_eq!(
        run.stderr.matches("waits as a hot spare").count(),
        1,
        "{}",
        run.stderr
    );
    check_done(&run, 2, LONGER.expected_steps());
    check_recoveries(&run.stderr);
}

#[test]
fn a_killed_hot_spare_is_started_again_and_training_goes_on_undisturbed() {
    let scratch = Scratch::new("hot-spare-killed");
    scratch.set_hosts("localhost:3\n");
    let discovery = scratch.file_discovery();
    let options = options(&discovery, "30");
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    // Long enough for the new spare to register before the end.
    let train = Train {
        epochs: 20,
        ..LONGER
    };
    let job = Job::start(&options, &train);
    let w = job.wait_for_workers(3);
    let spare = spare_slot(&job.wait_for_stderr("waits as a hot spare", JOB));
    job.wait_for_step_at_least(10);
    let victim = w.iter().find(|p| p.slot == spare).expect("the spare");
    job.kill(victim.pid);
    wait_for("a second hot spare", JOB, || {
        let said = job.stderr_so_far();
        (said.matches("waits as a hot spare").count() == 2).then_some(())
    });
    let run = job.finish(JOB);
    run.expect_code(0);
    assert_eq!(generations(&run.stderr), [(1, 2)], "{}", run.stderr);
    check_no_rollback(&run.stdout);
    check_same_as_undisturbed(&run, 2, &train);
}
