//! `elasticrun --transport quic` and `--transport tls` on one machine: a
//! static job ends with the weights of the same job over TCP, bit for bit;
//! an elastic job over either survives a worker killed with `kill -9` and
//! ends with the weights of an undisturbed run. Ranks of one machine share
//! memory inside their TLS sessions unless `--no-shared-memory` keeps every
//! byte on TLS: both are checked. (The job across two network
//! namespaces is in `elastic_netns.rs`; the transports' own tests in
//! `collectives/tests/it/quic.rs` and `tls.rs`.)

use std::time::Duration;

use integration_tests::elastic::{
    Chaos, Job, Scratch, Train, check_done, final_world_sizes, generations,
};
use integration_tests::{launch, train};

const JOB: Duration = Duration::from_secs(60);

fn done_state(transport: &str, flags: &[&str]) -> (String, f64) {
    let t = train();
    let mut args = vec!["-np", "3", "--transport", transport];
    args.extend(flags);
    args.extend([t.to_str().unwrap(), "--epochs", "2"]);
    let run = launch(&args).finish(JOB);
    run.expect_code(0);
    assert!(
        !run.stderr.contains("connection refused"),
        "a peer was refused:\n{}",
        run.stderr
    );
    let done = run.done_event();
    assert_eq!(done["world_size"], 3, "{done}");
    (
        done["state"].as_str().unwrap().to_owned(),
        done["loss"].as_f64().unwrap(),
    )
}

#[test]
fn jobs_over_quic_and_tls_end_with_the_weights_of_the_same_job_over_tcp() {
    let (tcp, tcp_loss) = done_state("tcp", &[]);
    let runs: [(&str, &[&str]); 3] = [
        ("quic", &[]),
        ("tls", &[]),
        ("tls", &["--no-shared-memory"]),
    ];
    for (transport, flags) in runs {
        let (state, loss) = done_state(transport, flags);
        let how = format!("{transport} {flags:?}");
        assert_eq!(state, tcp, "the weights differ between tcp and {how}");
        assert_eq!(loss.to_bits(), tcp_loss.to_bits(), "{how}");
    }
}

const SHORT: Train = Train {
    epochs: 6,
    samples: 640,
    step_delay_ms: 20,
    commit_every: 4,
};

#[test]
fn a_worker_killed_over_quic_is_replaced_and_no_committed_step_is_lost() {
    killed_and_replaced("quic", &[]);
}

/// Over the TLS sessions themselves (no shared memory, which the TCP
/// data plane's chaos tests cover).
#[test]
fn a_worker_killed_over_tls_is_replaced_and_no_committed_step_is_lost() {
    killed_and_replaced("tls", &["--no-shared-memory"]);
}

/// An elastic job of 3 on `transport` loses a worker to `kill -9`; a new
/// generation replaces it and the job ends with the undisturbed weights.
fn killed_and_replaced(transport: &str, flags: &[&str]) {
    let mut chaos = Chaos::from_env();
    let scratch = Scratch::new(&format!("{transport}-kill"));
    scratch.set_hosts("localhost:3\n");
    let discovery = scratch.file_discovery();
    let mut args = vec![
        "--transport",
        transport,
        "--host-discovery-script",
        &discovery,
        "--min-np",
        "2",
        "--max-np",
        "3",
    ];
    args.extend(flags);
    let job = Job::start(&args, &SHORT);
    let first = job.wait_for_workers(3);
    let at = job.wait_for_step_at_least(15);
    let victim = 1 + chaos.below(2) as usize;
    eprintln!("killing rank {victim} at step {}", at.step);
    job.kill(first[victim].pid);
    let run = job.finish(JOB);
    run.expect_code(0);
    assert!(
        run.stderr.contains("was killed by signal 9 (SIGKILL)"),
        "{}",
        run.stderr
    );
    assert!(
        generations(&run.stderr).len() >= 2,
        "no new generation:\n{}",
        run.stderr
    );
    let sizes = final_world_sizes(&run.stdout);
    assert_eq!(sizes.len() as u64, SHORT.expected_steps(), "{}", run.stdout);
    assert!(sizes.iter().all(|&n| n == 3), "{sizes:?}");
    let state = check_done(&run, 3, SHORT.expected_steps());
    // The undisturbed reference runs over TCP: the same bits either way.
    assert_eq!(state, SHORT.undisturbed_state(3), "{}", run.stdout);
}
