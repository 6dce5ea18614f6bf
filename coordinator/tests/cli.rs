//! The `elasticrun` command line as users meet it: help, version, bad input.
//! (Having an integration test also makes `cargo test` build the binary that
//! integration-tests/ drives.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn elasticrun(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_elasticrun"))
        .args(args)
        .output()
        .expect("run elasticrun")
}

#[test]
fn help_groups_the_flags_as_horovodrun_and_states_defaults() {
    let out = elasticrun(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let mut at = 0;
    for heading in [
        "Launching:",
        "SSH:",
        "Tuneable parameters:",
        "Timeline:",
        "Stall check:",
        "Output:",
        "Logging:",
    ] {
        let found = help[at..]
            .find(heading)
            .unwrap_or_else(|| panic!("{heading} missing or out of order in\n{help}"));
        at += found;
    }
    for flag in [
        "-np",
        "--hostfile",
        "--start-timeout",
        "--network-interface",
        "--ssh-port",
        "--ssh-identity-file",
        "--fusion-threshold-mb",
        "--cycle-time-ms",
        "--segment-size",
        "--output-filename",
        "--prefix-output-with-timestamp",
        "--log-without-timestamp",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
    assert!(
        help.contains("[default: 30]") && help.contains("[default: 64]"),
        "defaults missing:\n{help}"
    );
}

#[test]
fn bad_input_is_a_clear_usage_error() {
    for (args, says) in [
        (&["-np", "two", "train"][..], "two"),
        (&["-np", "2"][..], "COMMAND"),
        (&["--cycle-time-ms", "-1", "-np", "1", "train"][..], "cycle"),
        (
            &["--segment-size", "lots", "-np", "1", "train"][..],
            "--segment-size",
        ),
        (
            &["--segment-size", "1K", "-np", "1", "train"][..],
            "--segment-size: 1024 bytes",
        ),
        (
            &["--config-file", "/nonexistent.yaml", "-np", "1", "train"][..],
            "/nonexistent.yaml",
        ),
    ] {
        let out = elasticrun(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn hosts_beyond_their_slots_are_refused_before_anything_starts() {
    let out = elasticrun(&["-np", "3", "-H", "localhost:2", "true"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains('3') && err.contains('2'), "{err}");
}

/// Misspelled, unknown and refused options, and what is missing, as users
/// read them: exit code 2, one message, nothing started (the program would
/// print on stdout).
#[test]
fn usage_errors_exit_2_and_start_nothing() {
    let echo = "/bin/echo";
    for (args, says) in [
        (
            &["-np", "2", "--verbos", echo][..],
            "a similar argument exists: '--verbose'",
        ),
        (
            &["--num-procs", "2", echo],
            "a similar argument exists: '--num-proc'",
        ),
        (&["-np", "2", "--zzz", echo], "unexpected argument '--zzz'"),
        (
            &["--mpi", "-np", "2", echo],
            "elasticrun: --mpi: elasticrun does not run MPI",
        ),
        (&["--jsrun", "-np", "2", echo], "elasticrun: --jsrun: "),
        (
            &["--num-nccl-streams", "2", "-np", "2", echo],
            "elasticrun: --num-nccl-streams: ",
        ),
        (&[echo], "elasticrun: -np is needed when no hosts are given"),
        (
            &[
                "--max-restarts",
                "1",
                "--hot-spares",
                "1",
                "--min-np",
                "1",
                "--host-discovery-script",
                echo,
                echo,
            ],
            "elasticrun: --max-restarts: a job run by restarts starts every worker anew, so it keeps no hot spares",
        ),
        (
            &["--hostfile", "/nonexistent/hosts", echo],
            "/nonexistent/hosts",
        ),
        (
            &["--thread-affinity", "x", "-np", "2", echo],
            "--thread-affinity",
        ),
        (
            &["--gloo-timeout-seconds", "0", "-np", "2", echo],
            "--gloo-timeout-seconds",
        ),
        (
            &["--network-interfaces", "a,b", "-np", "2", echo],
            "--network-interface",
        ),
        (
            &["-np", "0", echo],
            "elasticrun: -np: at least one process is needed",
        ),
        // A slot count no host has, and files that never end: errors, not
        // an allocation or a read of gigabytes.
        (
            &["-H", "localhost:99999999999", echo],
            "more than the 4096 slots a host may offer",
        ),
        (
            &["--hostfile", "/dev/zero", "-np", "1", echo],
            "cannot read hostfile /dev/zero: larger than the 16777216 bytes allowed",
        ),
        (
            &["--config-file", "/dev/zero", "-np", "1", echo],
            "cannot read /dev/zero: larger than the 16777216 bytes allowed",
        ),
    ] {
        let out = elasticrun(args);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} started something");
    }
}

#[test]
fn help_version_and_check_build_exit_0() {
    let out = elasticrun(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("  -np, --num-proc <N>"), "{help}");
    assert!(help.contains("[-np N]"), "{help}");
    for v in ["-v", "--version"] {
        let out = elasticrun(&[v]);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.starts_with("elasticrun "), "{text}");
    }
    let out = elasticrun(&["-cb"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("[X] TCP") && text.contains("[X] TLS over TCP") && text.contains("[ ] MPI"),
        "{text}"
    );
}

/// Bad values from each layer, as users read them (the messages are a
/// contract: scripts and docs quote them).
#[test]
fn bad_values_are_named_with_where_they_came_from() {
    let dir = std::env::temp_dir().join(format!("elasticrun-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.yaml");
    std::fs::write(&file, "elastic:\n  reset_limit: 1\n").unwrap();
    let file = file.to_str().unwrap();
    for (args, env, says) in [
        (
            &["-np", "1", "train"][..],
            &[("ELASTICRUN_CYCLE_TIME_MS", "fast")][..],
            "elasticrun: ELASTICRUN_CYCLE_TIME_MS=\"fast\": expected a number\n",
        ),
        (
            &["--log-level", "LOUD", "-np", "1", "train"][..],
            &[][..],
            "elasticrun: --log-level: \"LOUD\" is not one of trace, debug, info, warning, error\n",
        ),
        (
            &["--min-np", "2", "-np", "2", "train"][..],
            &[][..],
            "elasticrun: --min-np: only elastic jobs use it, and it needs \
             --host-discovery-script (it was given on the command line)\n",
        ),
        (
            &["--config-file", file, "-np", "1", "train"][..],
            &[][..],
            "elasticrun: --reset-limit: only elastic jobs use it, and it needs \
             --host-discovery-script (it was given in the config file)\n",
        ),
        (
            &["--autotune-warmup-samples", "1", "-np", "1", "train"][..],
            &[("HOROVOD_AUTOTUNE", "0")][..],
            "elasticrun: --autotune-warmup-samples: only autotuning uses it, and it needs \
             --autotune (it was given on the command line, and autotuning was turned off \
             by HOROVOD_AUTOTUNE)\n",
        ),
        (
            &["--segment-size", "2G", "-np", "1", "train"][..],
            &[][..],
            "elasticrun: --segment-size: 2147483648 bytes is outside the segment sizes \
             accepted, 4K (4096) to 1G (1073741824) (it was given on the command line)\n",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_elasticrun"))
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("run elasticrun");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8(out.stderr).unwrap(), says, "{args:?}");
    }
    let out = elasticrun(&["--segment-size", "lots", "-np", "1", "train"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(
            "\"lots\" is not a size (invalid digit found in string): expected bytes, \
             optionally with a K, M or G suffix (e.g. 524288, 512K, 4M)"
        ),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Program arguments pass through as bytes: one that is not UTF-8 reaches
/// the worker unchanged (it once stopped the launcher with a panic), and
/// an option's value that is not UTF-8 is a usage error, not a panic.
#[test]
fn arguments_that_are_not_utf8_pass_through_as_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9 \xff'\"$x");
    let dir = std::env::temp_dir().join(format!("elasticrun-bytes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("arg");
    let out = Command::new(env!("CARGO_BIN_EXE_elasticrun"))
        .args(["-np", "1", "sh", "-c", "printf %s \"$1\" > \"$2\"", "sh"])
        .arg(odd)
        .arg(&file)
        .output()
        .expect("run elasticrun");
    let got = std::fs::read(&file);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(got.unwrap(), odd.as_bytes());
    let out = Command::new(env!("CARGO_BIN_EXE_elasticrun"))
        .arg("--hosts")
        .arg(odd)
        .arg("./train")
        .output()
        .expect("run elasticrun");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_elasticrun"))
        .args(["serve", "--job"])
        .arg(odd)
        .output()
        .expect("run elasticrun");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("is not UTF-8"), "{said}");
}
