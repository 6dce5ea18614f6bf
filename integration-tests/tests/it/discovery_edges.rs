//! A discovery script that misbehaves, with a real `elasticrun`: what it
//! starts never outlives elasticrun, however elasticrun ends, an empty host
//! list is told at once, and so is a job offered too few slots to start.

use std::time::Duration;

use integration_tests::elastic::Scratch;
use integration_tests::{Running, alive, launch, train, wait_for};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(30);

fn elastic_job(s: &Scratch, script: &str) -> Running {
    elastic_job_of(s, script, "1")
}

fn elastic_job_of(s: &Scratch, script: &str, min_np: &str) -> Running {
    let script = s.write("discover.sh", &format!("#!/bin/sh\n{script}\n"));
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    launch(&[
        "--min-np",
        min_np,
        "--host-discovery-script",
        script.to_str().unwrap(),
        "--discovery-timeout",
        "600",
        train().to_str().unwrap(),
    ])
}

#[test]
fn a_discovery_run_in_flight_dies_with_elasticrun() {
    for signal in [Signal::SIGKILL, Signal::SIGTERM, Signal::SIGINT] {
        let s = Scratch::new(&format!("discovery-in-flight-{signal}"));
        let pids = s.dir.join("pids");
        let mut job = elastic_job(
            &s,
            &format!(
                "sleep 1000 & echo $! > {p}.tmp; mv {p}.tmp {p}; wait",
                p = pids.display()
            ),
        );
        let child: i32 = wait_for("the discovery script's child", LIMIT, || {
            std::fs::read_to_string(&pids).ok()?.trim().parse().ok()
        });
        kill(Pid::from_raw(job.pid()), signal).unwrap();
        let _ = job.child.wait();
        wait_for(
            &format!("the script's child {child} to end after {signal}"),
            LIMIT,
            || (!alive(child)).then_some(()),
        );
    }
}

#[test]
fn an_empty_host_list_is_told_at_once() {
    let s = Scratch::new("discovery-empty");
    let job = elastic_job(&s, "exit 0");
    wait_for("the empty host list to be told", LIMIT, || {
        job.stderr_so_far()
            .contains("host discovery: the script lists no hosts; the job waits for hosts")
            .then_some(())
    });
    let _ = kill(Pid::from_raw(job.pid()), Signal::SIGKILL);
    let told = job.finish(LIMIT).stderr;
    assert_eq!(told.matches("lists no hosts").count(), 1, "{told}");
}

#[test]
fn a_job_offered_fewer_slots_than_min_np_says_at_once_what_it_waits_for() {
    let s = Scratch::new("discovery-too-few");
    let job = elastic_job_of(&s, "echo localhost", "2");
    let want = "elasticrun: the job cannot start: waiting for 2 slots (--min-np 2); \
                discovery offers 1 (localhost:1); giving up in 600 s, at ";
    let line = wait_for("the job to say what it waits for", LIMIT, || {
        job.stderr_so_far()
            .lines()
            .find(|l| l.starts_with(want))
            .map(str::to_owned)
    });
    let at = &line[want.len()..];
    assert!(at.len() == 20 && at.ends_with('Z'), "{line}");
    let _ = kill(Pid::from_raw(job.pid()), Signal::SIGTERM);
    let run = job.finish(LIMIT);
    run.expect_code(143);
}
