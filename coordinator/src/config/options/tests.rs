//! Tests of the option table ([`super`]) against the command line and the file.

use clap::CommandFactory;

use super::*;
use crate::config::cli::Cli;

/// What the table says about an option, whatever its type.
struct Names {
    flag: &'static str,
    yaml: &'static str,
    env: Vec<&'static str>,
}

fn table() -> Vec<Names> {
    ALL.iter()
        .map(|o| Names {
            flag: o.flag(),
            yaml: o.yaml().path,
            env: o.env_names(),
        })
        .collect()
}

/// Options of the command line that are not in the table: the config file
/// itself, what prints and exits, `--verbose` (a `--log-level`), horovodrun's
/// flags that elasticrun accepts as they are (`--gloo`) or refuses, and
/// horovodrun's hidden negations whose names are not `no-` pairs.
const NOT_IN_THE_TABLE: [&str; 15] = [
    "config-file",
    "help",
    "version",
    "check-build",
    "verbose",
    "gloo",
    "mpi",
    "jsrun",
    "mpi-args",
    "binding-args",
    "mpi-threads-disable",
    "no-mpi-threads-disable",
    "num-nccl-streams",
    "stall-check",
    "log-with-timestamp",
];

#[test]
fn every_flag_is_on_the_command_line() {
    let cmd = Cli::command();
    // Each argument's long name and its aliases.
    let names: Vec<Vec<&str>> = cmd
        .get_arguments()
        .filter_map(|a| {
            let mut n = vec![a.get_long()?];
            n.extend(a.get_all_aliases().unwrap_or_default());
            Some(n)
        })
        .collect();
    for o in table() {
        assert!(
            names.iter().any(|n| n.contains(&o.flag)),
            "--{} is not an option",
            o.flag
        );
    }
    // Every option but those above is in the table.
    let table: Vec<&str> = table().iter().map(|o| o.flag).collect();
    for n in names {
        let long = n[0];
        let in_table = n.iter().any(|l| table.contains(l));
        // `--no-x` beside `--x`, or `--x` beside `--no-x`.
        let negated = format!("no-{long}");
        let paired = long.strip_prefix("no-").is_some_and(|l| table.contains(&l))
            || table.contains(&negated.as_str());
        assert!(
            in_table || paired || NOT_IN_THE_TABLE.contains(&long),
            "--{long} is not in the option table"
        );
    }
}

#[test]
fn every_yaml_key_is_in_the_file() {
    for o in table() {
        let (section, key) = o.yaml.split_once('.').expect("section.key");
        let text = format!("{section}:\n  {key}: null\n");
        assert!(
            crate::config::file::parse(&text).is_ok(),
            "{} is not a key of the file",
            o.yaml
        );
        let typo = format!("{section}:\n  {key}_typo: null\n");
        assert!(crate::config::file::parse(&typo).is_err(), "{typo}");
    }
}

#[test]
fn environment_names_are_ours_or_horovods_and_each_sets_one_option() {
    let mut seen = Vec::new();
    for o in table() {
        let (ours, horovods) = o.env.split_first().expect("an environment name");
        assert_eq!(
            *ours,
            format!("ELASTICRUN_{}", o.flag.replace('-', "_").to_uppercase()),
            "--{}",
            o.flag
        );
        for name in horovods {
            assert!(name.starts_with("HOROVOD_"), "{name}");
        }
        for name in o.env {
            assert!(!seen.contains(&name), "{name} twice");
            seen.push(name);
        }
    }
}

/// The help states the table's defaults.
#[test]
fn the_help_states_the_defaults() {
    let cmd = Cli::command();
    let help = |flag: &str| {
        cmd.get_arguments()
            .find(|a| a.get_long() == Some(flag))
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default()
    };
    let stated = |flag: &str, default: String| {
        let h = help(flag);
        assert!(
            h.contains(&format!("[default: {default}]")),
            "--{flag}: {h}"
        );
    };
    for o in [
        &START_TIMEOUT,
        &COORDINATOR_TIMEOUT,
        &HEARTBEAT_TIMEOUT,
        &FUSION_THRESHOLD_MB,
        &CYCLE_TIME_MS,
        &AUTOTUNE_GAUSSIAN_PROCESS_NOISE,
        &ELASTIC_TIMEOUT,
        &REPLACEMENT_WAIT,
        &DISCOVERY_INTERVAL,
        &DISCOVERY_TIMEOUT,
        &STALL_CHECK_WARNING_TIME_SECONDS,
        &STALL_CHECK_SHUTDOWN_TIME_SECONDS,
        &GLOO_TIMEOUT_SECONDS,
    ] {
        stated(o.flag, o.default.to_string());
    }
    for o in [&CACHE_CAPACITY, &SLOTS_PER_HOST] {
        stated(o.flag, o.default.to_string());
    }
    for o in [
        &AUTOTUNE_WARMUP_SAMPLES,
        &AUTOTUNE_STEPS_PER_SAMPLE,
        &AUTOTUNE_BAYES_OPT_MAX_SAMPLES,
    ] {
        stated(o.flag, o.default.to_string());
    }
    for o in [
        &AUTOTUNE,
        &HIERARCHICAL_ALLREDUCE,
        &HIERARCHICAL_ALLGATHER,
        &TCP,
    ] {
        assert!(!o.default);
        stated(o.flag, "off".into());
    }
    stated(LOG_LEVEL.flag, LOG_LEVEL.default.to_string());
    stated(TRANSPORT.flag, TRANSPORT.default.name().into());
    // On by default, which the switch that turns it off says in its words.
    const { assert!(!NO_SHARED_MEMORY.default) };
    let h = help(NO_SHARED_MEMORY.flag);
    assert!(
        h.contains("(default: shared memory between ranks of one host, TCP between hosts)"),
        "--{}: {h}",
        NO_SHARED_MEMORY.flag
    );
    assert_eq!(crate::config::parse_size("512K"), Ok(SEGMENT_SIZE.default));
    stated(SEGMENT_SIZE.flag, "512K".into());
}

/// docs/configuration.md's table names every option's flag, variables and key.
#[test]
fn the_documentation_names_every_option() {
    let doc = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/configuration.md"
    ));
    for o in table() {
        let flag = match o.flag {
            "np" => "-np".to_owned(),
            f => format!("--{f}"),
        };
        let paired = format!("--[no-]{}", o.flag);
        assert!(
            doc.contains(&flag) || doc.contains(&paired),
            "{flag} is not in configuration.md"
        );
        assert!(
            doc.contains(o.yaml),
            "{} is not in configuration.md",
            o.yaml
        );
        for var in o.env {
            assert!(doc.contains(var), "{var} is not in configuration.md");
        }
    }
}
