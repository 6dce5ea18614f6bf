//! Launching over ssh, against a real OpenSSH server on a loopback address
//! (127.0.0.2 and up are "other hosts" to elasticrun).

use std::collections::BTreeSet;
use std::time::Duration;

use integration_tests::sshd::TestSshd;
use integration_tests::{
    Running, assert_all_gone, descendants, env_of, launch, train, wait_for, workers,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const JOB: Duration = Duration::from_secs(90);

fn run_on(sshd: &TestSshd, hosts: &[&str], train_args: &[&str]) -> Running {
    let mut args: Vec<String> = hosts.iter().map(|s| (*s).to_owned()).collect();
    args.extend(sshd.ssh_args());
    args.push(train().display().to_string());
    args.extend(train_args.iter().map(|s| (*s).to_owned()));
    launch(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A credential in elasticrun's environment, as a cloud job has.
const CANARY: (&str, &str) = ("CLOUD_SECRET_ACCESS_KEY", "canary-9f1c2e77d0");

/// Every process on this machine whose command line contains `needle`.
fn command_lines_containing(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

#[test]
fn training_over_ssh_matches_a_local_run() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.2"]) else {
        return;
    };
    let hostfile = std::env::temp_dir().join(format!("elasticrun-hostfile-{}", std::process::id()));
    std::fs::write(
        &hostfile,
        format!("# two slots over ssh\n{} slots=2\n", sshd.host),
    )
    .unwrap();
    let remote = run_on(
        &sshd,
        &["--hostfile", hostfile.to_str().unwrap()],
        &["--epochs", "2"],
    )
    .finish(JOB);
    let local = launch(&["-np", "2", train().to_str().unwrap(), "--epochs", "2"]).finish(JOB);
    std::fs::remove_file(&hostfile).unwrap();
    remote.expect_code(0);
    local.expect_code(0);
    let (r, l) = (remote.done_event(), local.done_event());
    assert_eq!(r["world_size"], 2, "{r}");
    assert_eq!(r["steps"], l["steps"]);
    assert!(
        (r["accuracy"].as_f64().unwrap() - l["accuracy"].as_f64().unwrap()).abs() <= 0.005,
        "{r} vs {l}"
    );
}

/// `--transport quic` and `tls` over ssh: the secret reaches the remote
/// workers on ssh's standard input, each derives the job's authority from
/// it, and the job (TLS control connections, a QUIC or TLS mesh under mutual
/// TLS) ends with the weights of the same job run locally over TCP.
#[test]
fn quic_and_tls_jobs_over_ssh_end_with_the_weights_of_a_local_tcp_job() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.2"]) else {
        return;
    };
    let hosts = format!("{}:2", sshd.host);
    let local = launch(&["-np", "2", train().to_str().unwrap(), "--epochs", "2"]).finish(JOB);
    local.expect_code(0);
    let l = local.done_event();
    for transport in ["quic", "tls"] {
        let remote = run_on(
            &sshd,
            &["-H", &hosts, "--transport", transport],
            &["--epochs", "2"],
        )
        .finish(JOB);
        remote.expect_code(0);
        let r = remote.done_event();
        assert_eq!(r["world_size"], 2, "{transport}: {r}");
        assert_eq!(r["state"], l["state"], "{transport}: {r} vs {l}");
    }
}

#[test]
fn local_and_remote_slots_form_one_job_and_secrets_stay_off_command_lines() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.3"]) else {
        return;
    };
    let hosts = format!("localhost:1,{}:1", sshd.host);
    let mut cmd = std::process::Command::new(integration_tests::elasticrun());
    cmd.args(["-H", &hosts])
        .args(sshd.ssh_args())
        .arg(train())
        .args(["--epochs", "2", "--step-delay-ms", "30"])
        .env(CANARY.0, CANARY.1);
    let job = integration_tests::start(cmd);
    let remote = workers(sshd.pid(), 1, Duration::from_secs(30));
    let secret = env_of(remote[0], "ELASTICRUN_SECRET").expect("the remote worker got the secret");
    assert_eq!(secret.len(), 64);
    assert_eq!(
        env_of(remote[0], CANARY.0).as_deref(),
        Some(CANARY.1),
        "the environment did not reach the remote worker"
    );
    for value in [secret.as_str(), CANARY.1] {
        let leaks = command_lines_containing(value);
        assert!(leaks.is_empty(), "{value} is on a command line: {leaks:?}");
    }
    let run = job.finish(JOB);
    run.expect_code(0);
    assert_eq!(run.done_event()["world_size"], 2);
}

/// `train` on two slots of `sshd`'s host for far longer than any test, once
/// it trains: rank 0 has logged a step, so both ranks have registered and
/// taken part in a collective. Hands back the job, the remote workers by
/// rank, and every process below elasticrun and the sshd.
fn remote_job(sshd: &TestSshd) -> (Running, Vec<i32>, BTreeSet<i32>) {
    let hosts = format!("{}:2", sshd.host);
    let mut job = run_on(
        sshd,
        &["-H", &hosts],
        &["--epochs", "1000", "--step-delay-ms", "20", "--log-steps"],
    );
    let pids = workers(sshd.pid(), 2, Duration::from_secs(30));
    job.wait_for_stdout_line("rank 0's first step", Duration::from_secs(30), |l| {
        l.contains("\"event\":\"step\"")
    });
    let all: BTreeSet<i32> = descendants(sshd.pid())
        .into_iter()
        .chain(descendants(job.pid()))
        .collect();
    (job, pids, all)
}

#[test]
fn a_killed_remote_worker_fails_the_job_and_nothing_is_left() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.4"]) else {
        return;
    };
    let (job, pids, all) = remote_job(&sshd);
    kill(Pid::from_raw(pids[1]), Signal::SIGKILL).unwrap();
    let run = job.finish(Duration::from_secs(30));
    run.expect_code(1);
    let want = format!("rank 1 on {} was killed by signal 9 (SIGKILL)", sshd.host);
    assert!(run.stderr.contains(&want), "{}", run.stderr);
    assert_all_gone(&all, Duration::from_secs(10));
}

#[test]
fn sigterm_stops_remote_workers() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.5"]) else {
        return;
    };
    let (job, _, all) = remote_job(&sshd);
    kill(Pid::from_raw(job.pid()), Signal::SIGTERM).unwrap();
    let run = job.finish(Duration::from_secs(30));
    run.expect_code(143);
    assert_all_gone(&all, Duration::from_secs(10));
}

/// A remote program that never joins (it does not link the worker runtime)
/// is supervised past the start timeout, and stopped on its host when the
/// job is stopped.
#[test]
fn remote_programs_that_never_join_are_stopped_on_their_host() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.7"]) else {
        return;
    };
    let hosts = format!("{}:2", sshd.host);
    let mut args = vec!["-H".to_owned(), hosts, "--start-timeout".into(), "1".into()];
    args.extend(sshd.ssh_args());
    args.extend(["sleep".to_owned(), "60".to_owned()]);
    let job = launch(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let pids: BTreeSet<i32> = workers(sshd.pid(), 2, Duration::from_secs(30))
        .into_iter()
        .collect();
    let all: BTreeSet<i32> = descendants(sshd.pid()).into_iter().chain(pids).collect();
    wait_for(
        "elasticrun to take the program for one without the runtime",
        Duration::from_secs(30),
        || {
            job.stderr_so_far()
                .contains("no worker registered within 1s")
                .then_some(())
        },
    );
    kill(Pid::from_raw(job.pid()), Signal::SIGTERM).unwrap();
    let run = job.finish(Duration::from_secs(30));
    run.expect_code(143);
    assert_all_gone(&all, Duration::from_secs(10));
}

#[test]
fn an_unreachable_host_is_reported_with_ssh_error() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.6"]) else {
        return;
    };
    let hosts = format!("{}:1", sshd.host);
    let port = sshd.port.to_string();
    drop(sshd);
    let run = launch(&["-H", &hosts, "-p", &port, "--start-timeout", "20", "true"]).finish(JOB);
    run.expect_code(1);
    // ssh fails before or after it took its standard input: either way its
    // exit status is told.
    assert!(
        run.stderr.contains("rank 0 on 127.0.0.6")
            && (run.stderr.contains("ssh exit code 255")
                || run.stderr.contains("ssh exited with status 255")),
        "{}",
        run.stderr
    );
}

/// An ssh that fails at once, before it reads its standard input (a host
/// that refuses the connection or the key), is reported with its exit status
/// and what it said, not as the broken pipe elasticrun's write then meets.
/// A stand-in `ssh` first on PATH says why and exits 255 without reading;
/// an environment larger than a pipe holds makes elasticrun's write meet
/// the closed pipe every time.
#[test]
fn an_ssh_that_fails_at_once_is_reported_with_its_status_and_message() {
    let scratch = integration_tests::elastic::Scratch::new("ssh-fails-at-once");
    let ssh = scratch.write(
        "ssh",
        "#!/bin/sh\necho 'ssh: connect to host 127.0.0.2 port 22: Connection refused' >&2\nexit 255\n",
    );
    std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        scratch.dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let big = "x".repeat(60 << 10);
    let mut cmd = std::process::Command::new(integration_tests::elasticrun());
    cmd.args(["-H", "127.0.0.2:1", "true"])
        .env("PATH", path)
        .env("TEST_FILLER_1", &big)
        .env("TEST_FILLER_2", &big);
    let run = integration_tests::start(cmd).finish(JOB);
    run.expect_code(1);
    let line = "elasticrun: cannot start rank 0 on 127.0.0.2 (ssh): ssh exited with status 255: \
                ssh: connect to host 127.0.0.2 port 22: Connection refused; stopping every worker";
    assert!(run.stderr.lines().any(|l| l == line), "{}", run.stderr);
    assert!(!run.stderr.contains("Broken pipe"), "{}", run.stderr);
}

/// `--max-restarts` over ssh: a local and a remote worker of a program that
/// does not use the runtime and checkpoints (`restarts::CHECKPOINTING`);
/// the remote one kills itself, every worker (the remote one through ssh
/// again) is started anew with `TORCHELASTIC_RESTART_COUNT=1`, resumes from
/// its checkpoint, and nothing is left running.
#[test]
fn restarts_over_ssh_start_the_remote_worker_again_from_its_checkpoint() {
    let Some(sshd) = TestSshd::start_or_skip(&["127.0.0.8"]) else {
        return;
    };
    let scratch = integration_tests::elastic::Scratch::new("ssh-restarts");
    let dir = scratch.dir.to_str().expect("a UTF-8 temporary directory");
    let hosts = format!("localhost:1,{}:1", sshd.host);
    let mut args = vec!["-H", &hosts, "--max-restarts", "2"];
    let ssh = sshd.ssh_args();
    args.extend(ssh.iter().map(String::as_str));
    args.extend(["sh", "-c", super::restarts::CHECKPOINTING, "sh", dir]);
    let run = launch(&args).finish(JOB);
    run.expect_code(0);
    assert!(
        run.stderr
            .contains("restarting every worker: restart 1 of 2 (TORCHELASTIC_RESTART_COUNT=1)"),
        "{}",
        run.stderr
    );
    // Each rank's last start: the restart, from its checkpoint (the remote
    // one's at 5; the local one may have finished before the failure).
    for rank in [0, 1] {
        let done = format!("[{rank}]<stdout>:rank {rank} done at 10");
        let line = (run.stdout.lines())
            .rfind(|l| l.starts_with(&done))
            .unwrap_or_else(|| panic!("no {done}:\n{}", run.stdout));
        assert!(line.ends_with("restart 1 of 2"), "{line}");
        if rank == 1 {
            assert!(line.contains("from 5"), "the remote worker resumed: {line}");
        }
    }
    assert_all_gone(&descendants(sshd.pid()), Duration::from_secs(10));
}
