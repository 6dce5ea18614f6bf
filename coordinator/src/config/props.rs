//! Property tests of what a user's files and environment hand `elasticrun`:
//! the YAML `--config-file` (parsed, then resolved with the other layers),
//! the environment variables of every option, and the command line. Inputs
//! are any text, text of the characters the format uses, and valid texts
//! mutated by [`testkit`]; each must give a configuration or a typed error,
//! never a panic.

use std::collections::HashMap;

use testkit::proptest::collection::vec;
use testkit::proptest::prelude::*;
use testkit::proptest::sample::select;

use super::cli::Cli;
use super::file::{ConfigFile, parse};
use super::options as opt;
use super::resolve;

/// `elasticrun ARGS`.
fn cli(args: &[&str]) -> Cli {
    let argv = std::iter::once("elasticrun").chain(args.iter().copied());
    Cli::parse_args(argv.map(str::to_owned)).expect("a valid command line")
}

/// The file of the module's documentation, every key set.
const FULL_FILE: &str = "launch: { np: 4, hosts: \"a:2,b:2\", ssh_port: 2222, \
    ssh_identity_file: ~/.ssh/id, start_timeout: 60, coordinator_timeout: 5, heartbeat_timeout: 6, \
    network_interface: eth0, output_filename: logs, prefix_output_with_timestamp: true }
params: { fusion_threshold_mb: 32, cycle_time_ms: 2.5, cache_capacity: 2048, \
    disable_cache: false, hierarchical_allreduce: false, hierarchical_allgather: false, \
    segment_bytes: 524288 }
autotune: { enabled: true, log_file: autotune.csv, warmup_samples: 3, \
    steps_per_sample: 10, bayes_opt_max_samples: 20, gaussian_process_noise: 0.8 }
timeline: { filename: timeline.json, mark_cycles: true }
stall_check: { enabled: true, warning_time_seconds: 60, shutdown_time_seconds: 0 }
logging: { level: info, hide_timestamp: false }
library_options: { gloo_timeout_seconds: 60, thread_affinity: [0, 2], tcp: true }
";

/// An elastic job's file, in block style.
const ELASTIC_FILE: &str = "elastic:
  host_discovery_script: ./discover.sh
  min_np: 2
  max_np: 8
  slots_per_host: 4
  elastic_timeout: 600
  replacement_wait: 2.5
  reset_limit: 10
  blacklist_cooldown_range: [60, 300]
  discovery_interval: 1
  discovery_timeout: 10
params:
  cycle_time_ms: 0.5
  fusion_threshold_mb: 0
";

#[test]
fn config_files_resolve_or_fail_typed() {
    let corpus = vec![FULL_FILE.to_owned(), ELASTIC_FILE.to_owned()];
    let alphabet = "abelnpst_:{}[],-.#\"' \n0123456789e";
    let command_line = cli(&["-np", "2", "./t"]);
    let no_env = |_: &str| None;
    testkit::check("config files", testkit::text(corpus, alphabet), |text| {
        if let Ok(file) = parse(&text) {
            let _ = resolve(&command_line, &no_env, &file);
        }
        Ok(())
    });
}

/// Every environment variable an option reads.
fn env_names() -> Vec<&'static str> {
    opt::ALL.iter().flat_map(|o| o.env_names()).collect()
}

/// Values at the edges of numbers, sizes, flags and lists, and any text.
fn value() -> impl Strategy<Value = String> {
    let edges = [
        "0",
        "1",
        "-1",
        "1e300",
        "-1e300",
        "1e-300",
        "NaN",
        "inf",
        "-0",
        "4294967296",
        "18446744073709551616",
        "0.0001",
        "1,2",
        "5 1",
        "a:2,b:2",
        "512K",
        "1T",
        "99999999999G",
        "yes",
        "debug",
        "0,1024",
        "",
        " ",
    ];
    prop_oneof![
        3 => select(edges.to_vec()).prop_map(str::to_owned),
        2 => "[0-9.eE+-]{0,24}",
        1 => any::<String>(),
    ]
}

#[test]
fn environment_values_resolve_or_fail_typed() {
    let names = env_names();
    let file = ConfigFile::default();
    let elastic = cli(&["--host-discovery-script", "./d.sh", "./t"]);
    let fixed = cli(&["-np", "2", "./t"]);
    testkit::check(
        "environment",
        (vec((select(names), value()), 1..5), any::<bool>()),
        |(vars, is_elastic)| {
            let env: HashMap<&str, String> = vars.into_iter().collect();
            let lookup = |k: &str| env.get(k).cloned();
            let command_line = if is_elastic { &elastic } else { &fixed };
            let _ = resolve(command_line, &lookup, &file);
            Ok(())
        },
    );
}

/// Words of command lines: every option, horovodrun's single-dash ones,
/// values, and words that are neither.
fn word() -> impl Strategy<Value = String> {
    use clap::CommandFactory;
    let mut flags: Vec<String> = Cli::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    for single in [
        "-np",
        "-H",
        "-p",
        "-i",
        "-hostfile",
        "-cb",
        "-prefix-timestamp",
        "--",
    ] {
        flags.push(single.to_owned());
    }
    flags.retain(|f| f != "--help");
    prop_oneof![
        2 => select(flags),
        2 => value(),
        1 => select(vec!["./t".to_owned(), "localhost:2".to_owned(), "-x".to_owned()]),
    ]
}

#[test]
fn command_lines_resolve_or_fail_typed() {
    let file = ConfigFile::default();
    testkit::check("command lines", vec(word(), 0..8), |words| {
        let argv = std::iter::once("elasticrun".to_owned()).chain(words);
        if let Ok(cli) = Cli::parse_args(argv) {
            let _ = resolve(&cli, &|_| None, &file);
        }
        Ok(())
    });
}
