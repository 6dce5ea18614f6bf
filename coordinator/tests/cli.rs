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
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains('3') && err.contains('2'), "{err}");
}
