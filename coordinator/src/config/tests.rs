use std::collections::HashMap;
use std::time::Duration;

use super::cli::Cli;
use super::file::parse;
use super::*;

fn cli(s: &str) -> Cli {
    Cli::parse_args(
        std::iter::once("elasticrun".to_owned()).chain(s.split_whitespace().map(str::to_owned)),
    )
    .unwrap()
}

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| m.get(k).cloned()
}

fn run(c: &str, e: &[(&str, &str)], f: &str) -> Result<JobConfig, ConfigError> {
    resolve(&cli(c), &env(e), &parse(f).unwrap())
}

#[test]
fn defaults() {
    let c = run("./train", &[], "").unwrap();
    assert_eq!(c.np, None);
    assert_eq!(c.hosts, HostSpec::Localhost);
    assert_eq!(c.start_timeout, Duration::from_secs(30));
    let t = &c.tuning;
    assert_eq!(
        t.fusion_threshold_bytes,
        Sourced::new(64 << 20, Source::Default)
    );
    assert_eq!(
        t.cycle_time,
        Sourced::new(Duration::from_millis(1), Source::Default)
    );
    assert_eq!(t.cache_capacity.value, 1024);
    assert!(!t.hierarchical_allreduce.value && !t.hierarchical_allgather.value);
    assert!(!t.fusion_threshold_bytes.is_explicit());
    assert_eq!(c.timeline, None);
    assert_eq!(
        c.stall_check,
        StallCheck::On {
            warning: Duration::from_secs(60),
            shutdown: None
        }
    );
    assert_eq!(c.log_level, LogLevel::Warning);
    assert!(c.log_timestamps && !c.output_timestamps);
    assert_eq!(c.command, ["./train"]);
}

#[test]
fn command_line_beats_environment_beats_file() {
    let file = "params:\n  cycle_time_ms: 7\n  fusion_threshold_mb: 8\n  cache_capacity: 5\n";
    let c = run(
        "--cycle-time-ms 3 ./t",
        &[
            ("ELASTICRUN_CYCLE_TIME_MS", "5"),
            ("ELASTICRUN_FUSION_THRESHOLD_MB", "16"),
        ],
        file,
    )
    .unwrap();
    assert_eq!(
        c.tuning.cycle_time,
        Sourced::new(Duration::from_millis(3), Source::CommandLine)
    );
    assert_eq!(
        c.tuning.fusion_threshold_bytes,
        Sourced::new(
            16 << 20,
            Source::Environment("ELASTICRUN_FUSION_THRESHOLD_MB")
        )
    );
    assert_eq!(c.tuning.cache_capacity, Sourced::new(5, Source::ConfigFile));
    assert!(c.tuning.cache_capacity.is_explicit());
}

#[test]
fn horovod_names_are_aliases_in_their_own_units() {
    let c = run(
        "./t",
        &[
            ("HOROVOD_FUSION_THRESHOLD", "33554432"),
            ("HOROVOD_CYCLE_TIME", "2.5"),
            ("HOROVOD_CACHE_CAPACITY", "0"),
            ("HOROVOD_HIERARCHICAL_ALLREDUCE", "1"),
            ("HOROVOD_TIMELINE", "/tmp/tl.json"),
            ("HOROVOD_STALL_CHECK_TIME_SECONDS", "5"),
            ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "20"),
            ("HOROVOD_LOG_LEVEL", "DEBUG"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(c.tuning.fusion_threshold_bytes.value, 32 << 20);
    assert_eq!(c.tuning.cycle_time.value, Duration::from_micros(2500));
    assert_eq!(c.tuning.cache_capacity.value, 0);
    assert!(c.tuning.hierarchical_allreduce.value);
    assert_eq!(
        c.timeline.unwrap().file,
        std::path::PathBuf::from("/tmp/tl.json")
    );
    assert_eq!(
        c.stall_check,
        StallCheck::On {
            warning: Duration::from_secs(5),
            shutdown: Some(Duration::from_secs(20))
        }
    );
    assert_eq!(c.log_level, LogLevel::Debug);
    // Our own name wins over Horovod's.
    let c = run(
        "./t",
        &[
            ("HOROVOD_CYCLE_TIME", "9"),
            ("ELASTICRUN_CYCLE_TIME_MS", "4"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(c.tuning.cycle_time.value, Duration::from_millis(4));
}

#[test]
fn flag_pairs_and_switches_from_each_layer() {
    let file = "params:\n  hierarchical_allreduce: true\nstall_check:\n  enabled: false\n";
    let c = run("./t", &[], file).unwrap();
    assert_eq!(
        c.tuning.hierarchical_allreduce,
        Sourced::new(true, Source::ConfigFile)
    );
    assert_eq!(c.stall_check, StallCheck::Off);
    let c = run(
        "--no-hierarchical-allreduce ./t",
        &[("ELASTICRUN_NO_STALL_CHECK", "false")],
        file,
    )
    .unwrap();
    assert_eq!(
        c.tuning.hierarchical_allreduce,
        Sourced::new(false, Source::CommandLine)
    );
    assert!(matches!(c.stall_check, StallCheck::On { .. }));
    let c = run("--disable-cache --cache-capacity 99 ./t", &[], "").unwrap();
    assert_eq!(
        c.tuning.cache_capacity,
        Sourced::new(0, Source::CommandLine)
    );
}

#[test]
fn hosts_come_from_the_highest_layer_that_names_any() {
    let c = run(
        "./t",
        &[("ELASTICRUN_HOSTS", "a:2,b:2")],
        "launch:\n  hostfile: h.txt\n",
    )
    .unwrap();
    assert_eq!(
        c.hosts,
        HostSpec::List(vec![
            HostSlots {
                host: "a".into(),
                slots: 2
            },
            HostSlots {
                host: "b".into(),
                slots: 2
            }
        ])
    );
    let c = run("--hostfile cli.txt ./t", &[("ELASTICRUN_HOSTS", "a:2")], "").unwrap();
    assert_eq!(c.hosts, HostSpec::File("cli.txt".into()));
    assert!(matches!(
        run("-H a:0 ./t", &[], ""),
        Err(ConfigError::Hosts(_))
    ));
    let both = run(
        "./t",
        &[("ELASTICRUN_HOSTS", "a"), ("ELASTICRUN_HOSTFILE", "f")],
        "",
    );
    assert!(
        matches!(
            both,
            Err(ConfigError::Invalid {
                option: "hosts",
                ..
            })
        ),
        "{both:?}"
    );
}

#[test]
fn bad_values_name_their_source() {
    let e = run("./t", &[("ELASTICRUN_CYCLE_TIME_MS", "fast")], "").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ELASTICRUN_CYCLE_TIME_MS=\"fast\": expected a non-negative number"
    );
    let e = run("./t", &[("HOROVOD_HIERARCHICAL_ALLREDUCE", "maybe")], "").unwrap_err();
    assert!(
        e.to_string().starts_with("HOROVOD_HIERARCHICAL_ALLREDUCE="),
        "{e}"
    );
    let e = run("--cycle-time-ms 0 ./t", &[], "").unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Invalid {
                option: "cycle-time-ms",
                ..
            }
        ),
        "{e}"
    );
    let e = run("--log-level loud ./t", &[], "").unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Invalid {
                option: "log-level",
                ..
            }
        ),
        "{e}"
    );
    assert!(run("--np 0 ./t", &[], "").is_err());
    let e = run("./t", &[("ELASTICRUN_START_TIMEOUT", "-1")], "").unwrap_err();
    assert!(
        matches!(e, ConfigError::Env { ref var, .. } if var == "ELASTICRUN_START_TIMEOUT"),
        "{e}"
    );
    let e = run("--start-timeout 0 ./t", &[], "").unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Invalid {
                option: "start-timeout",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn empty_environment_values_are_unset() {
    let c = run("./t", &[("ELASTICRUN_CYCLE_TIME_MS", "  ")], "").unwrap();
    assert_eq!(c.tuning.cycle_time.source, Source::Default);
}

#[test]
fn launch_options_from_the_file() {
    let file = "launch:\n  np: 3\n  ssh_port: 2200\n  output_filename: out\n  prefix_output_with_timestamp: true\n\
                logging:\n  hide_timestamp: true\n";
    let c = run("./t", &[], file).unwrap();
    assert_eq!((c.np, c.ssh_port), (Some(3), Some(2200)));
    assert_eq!(c.output_dir, Some("out".into()));
    assert!(c.output_timestamps && !c.log_timestamps);
}
