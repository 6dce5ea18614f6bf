use std::collections::HashMap;
use std::path::PathBuf;
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
    assert_eq!(t.segment_bytes, Sourced::new(512 << 10, Source::Default));
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
fn segment_size_from_each_layer() {
    for (arg, bytes) in [
        ("524288", 512 << 10),
        ("512K", 512 << 10),
        ("4M", 4 << 20),
        ("4m", 4 << 20),
        ("1GiB", 1 << 30),
        ("4K", 4 << 10),
    ] {
        let c = run(&format!("--segment-size {arg} ./t"), &[], "").unwrap();
        assert_eq!(
            c.tuning.segment_bytes,
            Sourced::new(bytes, Source::CommandLine),
            "{arg}"
        );
    }
    let c = run("./t", &[("ELASTICRUN_SEGMENT_SIZE", " 2M ")], "").unwrap();
    assert_eq!(
        c.tuning.segment_bytes,
        Sourced::new(2 << 20, Source::Environment("ELASTICRUN_SEGMENT_SIZE"))
    );
    // The key and the unit the autotuner writes.
    let c = run("./t", &[], "params:\n  segment_bytes: 1048576\n").unwrap();
    assert_eq!(
        c.tuning.segment_bytes,
        Sourced::new(1 << 20, Source::ConfigFile)
    );
    // Empty is unset.
    let c = run("./t", &[("ELASTICRUN_SEGMENT_SIZE", "")], "").unwrap();
    assert_eq!(c.tuning.segment_bytes.source, Source::Default);
}

#[test]
fn segment_size_command_line_beats_environment_beats_file() {
    let file = "params:\n  segment_bytes: 65536\n";
    let vars = [("ELASTICRUN_SEGMENT_SIZE", "256K")];
    let c = run("--segment-size 8M ./t", &vars, file).unwrap();
    assert_eq!(
        c.tuning.segment_bytes,
        Sourced::new(8 << 20, Source::CommandLine)
    );
    let c = run("./t", &vars, file).unwrap();
    assert_eq!(
        c.tuning.segment_bytes,
        Sourced::new(256 << 10, Source::Environment("ELASTICRUN_SEGMENT_SIZE"))
    );
    let c = run("./t", &[], file).unwrap();
    assert_eq!(
        c.tuning.segment_bytes,
        Sourced::new(64 << 10, Source::ConfigFile)
    );
}

#[test]
fn bad_segment_sizes_name_their_source() {
    for arg in ["4095", "2K", "1073741825", "2G"] {
        let (option, why) = invalid_option(run(&format!("--segment-size {arg} ./t"), &[], ""));
        assert_eq!(option, "segment-size", "{arg}");
        assert!(why.contains("4K") && why.contains("1G"), "{why}");
        assert!(why.contains("on the command line"), "{why}");
    }
    let e = run("--segment-size 1K ./t", &[], "").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--segment-size: 1024 bytes is outside the segment sizes accepted, \
         4K (4096) to 1G (1073741824) (it was given on the command line)"
    );
    for bad in [
        "1K",
        "3G",
        "0",
        "lots",
        "512X",
        "-4K",
        "K",
        "99999999999999999999G",
    ] {
        let r = run("./t", &[("ELASTICRUN_SEGMENT_SIZE", bad)], "");
        assert!(
            matches!(r, Err(ConfigError::Env { ref var, ref value, .. })
                if var == "ELASTICRUN_SEGMENT_SIZE" && value == bad),
            "{bad:?}: {r:?}"
        );
    }
    let e = run("./t", &[("ELASTICRUN_SEGMENT_SIZE", "lots")], "").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("ELASTICRUN_SEGMENT_SIZE=\"lots\": \"lots\" is not a size"),
        "{e}"
    );
    let (option, why) = invalid_option(run("./t", &[], "params:\n  segment_bytes: 1024\n"));
    assert_eq!(option, "segment-size");
    assert!(why.contains("in the config file"), "{why}");
    // The file's value is a plain integer of bytes; anything else is the file's error.
    assert!(parse("params:\n  segment_bytes: 512K\n").is_err());
    assert!(parse("params:\n  segment_bytes: -1\n").is_err());
    // A bad value in a layer that loses is never looked at.
    let c = run(
        "--segment-size 64K ./t",
        &[],
        "params:\n  segment_bytes: 1\n",
    )
    .unwrap();
    assert_eq!(c.tuning.segment_bytes.value, 64 << 10);
}

#[test]
fn sizes_take_binary_suffixes() {
    for (s, v) in [
        ("0", 0),
        ("524288", 524_288),
        ("512K", 524_288),
        ("512k", 524_288),
        ("512KiB", 524_288),
        ("512 K", 524_288),
        ("4M", 4 << 20),
        ("4mib", 4 << 20),
        ("1G", 1 << 30),
        ("16384G", 1 << 44),
        ("4MB", 4 << 20),
        ("1.5M", 3 << 19),
    ] {
        assert_eq!(parse_size(s), Ok(v), "{s}");
    }
    for s in [
        "",
        "K",
        "12Q",
        "-1",
        "0x1000",
        "18446744073709551616",
        "17179869184G",
    ] {
        assert!(parse_size(s).is_err(), "{s:?}");
    }
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

fn elastic(c: &JobConfig) -> &ElasticConfig {
    c.elastic.as_ref().expect("an elastic job")
}

fn invalid_option(r: Result<JobConfig, ConfigError>) -> (&'static str, String) {
    match r {
        Err(ConfigError::Invalid { option, why }) => (option, why.to_string()),
        other => panic!("expected ConfigError::Invalid, got {other:?}"),
    }
}

#[test]
fn no_discovery_script_no_elastic_job() {
    assert_eq!(run("-np 2 ./t", &[], "").unwrap().elastic, None);
    // Horovod's name only counts in elastic jobs, as in horovodrun.
    let c = run("-np 2 ./t", &[("HOROVOD_ELASTIC_TIMEOUT", "30")], "").unwrap();
    assert_eq!(c.elastic, None);
}

#[test]
fn elastic_defaults() {
    let c = run("--host-discovery-script ./d.sh -np 4 ./t", &[], "").unwrap();
    assert_eq!(
        c.elastic,
        Some(ElasticConfig {
            discovery_script: Some("./d.sh".into()),
            min_np: 4,
            max_np: None,
            initial_np: 4,
            slots_per_host: 1,
            elastic_timeout: Duration::from_secs(600),
            replacement_wait: Duration::from_millis(500),
            reset_limit: None,
            blacklist_cooldown: None,
            discovery_interval: Duration::from_secs(1),
            discovery_timeout: Duration::from_secs(10),
        })
    );
    assert_eq!(c.hosts, HostSpec::Localhost);
    assert_eq!(c.np, Some(4));
    // --min-np alone is the initial target too.
    let c = run("--host-discovery-script d --min-np 3 ./t", &[], "").unwrap();
    assert_eq!((elastic(&c).min_np, elastic(&c).initial_np), (3, 3));
    assert_eq!(c.np, Some(3));
}

#[test]
fn every_elastic_option_from_the_command_line() {
    let c = run(
        "--host-discovery-script d -np 4 --min-np 2 --max-np 8 --slots-per-host 4 \
         --elastic-timeout 30 --replacement-wait 0 --reset-limit 5 \
         --blacklist-cooldown-range 10 100.5 \
         --discovery-interval 0.25 --discovery-timeout 3 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(
        elastic(&c),
        &ElasticConfig {
            discovery_script: Some("d".into()),
            min_np: 2,
            max_np: Some(8),
            initial_np: 4,
            slots_per_host: 4,
            elastic_timeout: Duration::from_secs(30),
            replacement_wait: Duration::ZERO,
            reset_limit: Some(5),
            blacklist_cooldown: Some((Duration::from_secs(10), Duration::from_millis(100_500))),
            discovery_interval: Duration::from_millis(250),
            discovery_timeout: Duration::from_secs(3),
        }
    );
    // -np may exceed any slot count: the hosts are not known yet.
    let c = run(
        "--host-discovery-script d -np 64 --slots-per-host 1 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(elastic(&c).initial_np, 64);
}

#[test]
fn elastic_options_command_line_beats_environment_beats_file() {
    let file = "elastic:\n  host_discovery_script: file.sh\n  min_np: 1\n  max_np: 16\n  \
                slots_per_host: 2\n  elastic_timeout: 100\n  replacement_wait: 3\n  reset_limit: 7\n  \
                blacklist_cooldown_range: [5, 50]\n  discovery_interval: 2\n  \
                discovery_timeout: 20\n";
    let env_vars = [
        ("ELASTICRUN_HOST_DISCOVERY_SCRIPT", "env.sh"),
        ("ELASTICRUN_MAX_NP", "12"),
        ("ELASTICRUN_SLOTS_PER_HOST", "3"),
        ("ELASTICRUN_ELASTIC_TIMEOUT", "200"),
        ("HOROVOD_ELASTIC_TIMEOUT", "300"),
        ("ELASTICRUN_BLACKLIST_COOLDOWN_RANGE", "6, 60"),
        ("ELASTICRUN_REPLACEMENT_WAIT", "1.5"),
    ];
    let c = run("-np 4 --max-np 10 ./t", &env_vars, file).unwrap();
    let e = elastic(&c);
    assert_eq!(e.discovery_script, Some(PathBuf::from("env.sh")));
    assert_eq!(e.max_np, Some(10), "command line");
    assert_eq!(e.slots_per_host, 3, "environment");
    assert_eq!(
        e.elastic_timeout,
        Duration::from_secs(200),
        "ours before Horovod's"
    );
    assert_eq!(
        e.blacklist_cooldown,
        Some((Duration::from_secs(6), Duration::from_secs(60)))
    );
    assert_eq!((e.min_np, e.initial_np), (1, 4), "file, then -np");
    assert_eq!(e.reset_limit, Some(7));
    assert_eq!(e.discovery_interval, Duration::from_secs(2));
    assert_eq!(e.discovery_timeout, Duration::from_secs(20));
    assert_eq!(
        e.replacement_wait,
        Duration::from_millis(1500),
        "environment"
    );

    let c = run(
        "--host-discovery-script cli.sh -np 2 ./t",
        &[
            ("HOROVOD_ELASTIC_TIMEOUT", "300"),
            ("ELASTICRUN_BLACKLIST_COOLDOWN_RANGE", "7 70"),
            ("ELASTICRUN_RESET_LIMIT", "0"),
        ],
        file,
    )
    .unwrap();
    let e = elastic(&c);
    assert_eq!(e.discovery_script, Some(PathBuf::from("cli.sh")));
    assert_eq!(e.elastic_timeout, Duration::from_secs(300));
    assert_eq!(
        e.blacklist_cooldown,
        Some((Duration::from_secs(7), Duration::from_secs(70)))
    );
    assert_eq!(e.reset_limit, Some(0));
    assert_eq!(e.max_np, Some(16));
    assert_eq!(e.replacement_wait, Duration::from_secs(3), "file");
}

#[test]
fn a_discovery_script_and_hosts_in_one_layer_conflict() {
    let (option, why) = invalid_option(run(
        "-np 2 ./t",
        &[
            ("ELASTICRUN_HOSTS", "a:2"),
            ("ELASTICRUN_HOST_DISCOVERY_SCRIPT", "d"),
        ],
        "",
    ));
    assert_eq!(option, "host-discovery-script");
    assert!(why.contains("the environment"), "{why}");
    let (option, why) = invalid_option(run(
        "-np 2 ./t",
        &[],
        "launch:\n  hostfile: h\nelastic:\n  host_discovery_script: d\n",
    ));
    assert_eq!(option, "host-discovery-script");
    assert!(why.contains("the config file"), "{why}");
    // The command line's own conflict is clap's (see cli.rs); a Cli built by hand
    // is refused here too.
    let mut c = cli("-np 2 -H a:2 ./t");
    c.host_discovery_script = Some("d".into());
    let r = resolve(&c, &env(&[]), &parse("").unwrap());
    assert_eq!(invalid_option(r).0, "host-discovery-script");
}

#[test]
fn the_highest_layer_picks_between_hosts_and_discovery() {
    let c = run(
        "-np 2 ./t",
        &[("ELASTICRUN_HOST_DISCOVERY_SCRIPT", "d")],
        "launch:\n  hosts: a:2\n",
    )
    .unwrap();
    assert_eq!(elastic(&c).discovery_script, Some(PathBuf::from("d")));
    assert_eq!(c.hosts, HostSpec::Localhost);
    let c = run(
        "-np 2 --hostfile h ./t",
        &[("ELASTICRUN_HOST_DISCOVERY_SCRIPT", "d")],
        "",
    )
    .unwrap();
    assert_eq!((c.hosts, c.elastic), (HostSpec::File("h".into()), None));
}

#[test]
fn an_elastic_job_needs_np_or_min_np() {
    let (option, why) = invalid_option(run("--host-discovery-script d ./t", &[], ""));
    assert_eq!(option, "min-np");
    assert!(why.contains("-np or --min-np"), "{why}");
    let r = run("--host-discovery-script d --max-np 4 ./t", &[], "");
    assert_eq!(invalid_option(r).0, "min-np");
    let e = run("--host-discovery-script d --min-np 0 ./t", &[], "").unwrap_err();
    assert_eq!(e.to_string(), "--min-np: at least one process is needed");
}

#[test]
fn np_counts_must_be_ordered() {
    let e = run(
        "--host-discovery-script d --min-np 4 --max-np 2 ./t",
        &[],
        "",
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "--max-np: 2 is below --min-np 4");
    let e = run("--host-discovery-script d -np 8 --max-np 4 ./t", &[], "").unwrap_err();
    assert_eq!(e.to_string(), "--max-np: 4 is below -np 8");
    let e = run("--host-discovery-script d -np 2 --min-np 3 ./t", &[], "").unwrap_err();
    assert!(
        e.to_string().starts_with("--min-np: 3 is above -np 2"),
        "{e}"
    );
    let r = run("--host-discovery-script d -np 2 --max-np 0 ./t", &[], "");
    assert_eq!(invalid_option(r).0, "max-np");
    let r = run(
        "--host-discovery-script d -np 2 --slots-per-host 0 ./t",
        &[],
        "",
    );
    assert_eq!(invalid_option(r).0, "slots-per-host");
    let e = run(
        "--host-discovery-script d -np 2 --slots-per-host 99999999999 ./t",
        &[],
        "",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--slots-per-host: 99999999999 slots is more than the 4096 a host may offer"
    );
    // Equal bounds are fine.
    let c = run(
        "--host-discovery-script d -np 3 --min-np 3 --max-np 3 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(elastic(&c).max_np, Some(3));
}

#[test]
fn bad_cooldown_ranges_are_refused() {
    let e = run(
        "--host-discovery-script d -np 1 --blacklist-cooldown-range 100 10 ./t",
        &[],
        "",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--blacklist-cooldown-range: MIN 100 is above MAX 10"
    );
    let r = run(
        "--host-discovery-script d -np 1 --blacklist-cooldown-range 0 10 ./t",
        &[],
        "",
    );
    assert_eq!(invalid_option(r).0, "blacklist-cooldown-range");
    for bad in ["10", "1,2,3", "a,b", "-1,5", ""] {
        let r = run(
            "--host-discovery-script d -np 1 ./t",
            &[("ELASTICRUN_BLACKLIST_COOLDOWN_RANGE", bad)],
            "",
        );
        if bad.is_empty() {
            assert_eq!(elastic(&r.unwrap()).blacklist_cooldown, None);
        } else {
            assert!(
                matches!(r, Err(ConfigError::Env { ref var, .. })
                    if var == "ELASTICRUN_BLACKLIST_COOLDOWN_RANGE"),
                "{bad:?}: {r:?}"
            );
        }
    }
    let r = run(
        "-np 1 ./t",
        &[],
        "elastic:\n  host_discovery_script: d\n  blacklist_cooldown_range: [9, 8]\n",
    );
    assert_eq!(invalid_option(r).0, "blacklist-cooldown-range");
}

#[test]
fn elastic_durations_must_be_positive_and_fit() {
    for (flag, option) in [
        ("--elastic-timeout", "elastic-timeout"),
        ("--discovery-interval", "discovery-interval"),
        ("--discovery-timeout", "discovery-timeout"),
    ] {
        for v in ["0", "1e300", "inf", "NaN"] {
            let r = run(
                &format!("--host-discovery-script d -np 1 {flag} {v} ./t"),
                &[],
                "",
            );
            assert_eq!(invalid_option(r).0, option, "{flag} {v}");
        }
    }
    let e = run(
        "--host-discovery-script d -np 1 ./t",
        &[("HOROVOD_ELASTIC_TIMEOUT", "soon")],
        "",
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("HOROVOD_ELASTIC_TIMEOUT="), "{e}");
}

#[test]
fn elastic_options_without_a_script_are_refused() {
    for args in [
        "--min-np 2",
        "--max-np 4",
        "--slots-per-host 2",
        "--elastic-timeout 60",
        "--reset-limit 3",
        "--blacklist-cooldown-range 1 2",
        "--discovery-interval 2",
        "--discovery-timeout 2",
    ] {
        let (option, why) = invalid_option(run(&format!("-np 2 {args} ./t"), &[], ""));
        assert_eq!(format!("--{option}"), args.split(' ').next().unwrap());
        assert!(why.contains("--host-discovery-script"), "{why}");
        assert!(why.contains("on the command line"), "{why}");
    }
    let e = run("-np 2 ./t", &[("ELASTICRUN_MIN_NP", "1")], "").unwrap_err();
    assert!(e.to_string().contains("by ELASTICRUN_MIN_NP"), "{e}");
    let e = run("-np 2 -H a:2 ./t", &[], "elastic:\n  reset_limit: 1\n").unwrap_err();
    assert!(
        e.to_string().starts_with("--reset-limit: ") && e.to_string().contains("config file"),
        "{e}"
    );
}

fn autotune(c: &JobConfig) -> &AutotuneConfig {
    c.autotune.as_ref().expect("autotuning on")
}

const AUTOTUNE_DEFAULTS: AutotuneConfig = AutotuneConfig {
    log_file: None,
    warmup_samples: 3,
    steps_per_sample: 10,
    max_samples: 20,
    gaussian_process_noise: 0.8,
};

#[test]
fn autotune_defaults() {
    assert_eq!(run("./t", &[], "").unwrap().autotune, None);
    let c = run("--autotune ./t", &[], "").unwrap();
    assert_eq!(c.autotune, Some(AUTOTUNE_DEFAULTS));
    // Turned on from each layer.
    for (e, f) in [
        (&[("ELASTICRUN_AUTOTUNE", "1")][..], ""),
        (&[("HOROVOD_AUTOTUNE", "true")][..], ""),
        (&[][..], "autotune:\n  enabled: true\n"),
    ] {
        assert_eq!(run("./t", e, f).unwrap().autotune, Some(AUTOTUNE_DEFAULTS));
    }
    // Off in a higher layer beats on in a lower one; --autotune beats them all.
    let on_in_file = "autotune:\n  enabled: true\n";
    assert_eq!(
        run("./t", &[("ELASTICRUN_AUTOTUNE", "off")], on_in_file)
            .unwrap()
            .autotune,
        None
    );
    assert_eq!(
        run(
            "./t",
            &[("ELASTICRUN_AUTOTUNE", "0"), ("HOROVOD_AUTOTUNE", "1")],
            ""
        )
        .unwrap()
        .autotune,
        None,
        "ours before Horovod's"
    );
    let c = run(
        "--autotune ./t",
        &[("ELASTICRUN_AUTOTUNE", "0")],
        "autotune:\n  enabled: false\n",
    )
    .unwrap();
    assert_eq!(c.autotune, Some(AUTOTUNE_DEFAULTS));
}

#[test]
fn every_autotune_option_from_the_command_line() {
    let c = run(
        "--autotune --autotune-log-file at.csv --autotune-warmup-samples 0 \
         --autotune-steps-per-sample 20 --autotune-bayes-opt-max-samples 50 \
         --autotune-gaussian-process-noise 0 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(
        autotune(&c),
        &AutotuneConfig {
            log_file: Some("at.csv".into()),
            warmup_samples: 0,
            steps_per_sample: 20,
            max_samples: 50,
            gaussian_process_noise: 0.0,
        }
    );
}

#[test]
fn autotune_options_command_line_beats_environment_beats_file() {
    let file = "autotune:\n  enabled: true\n  log_file: file.csv\n  warmup_samples: 5\n  \
                steps_per_sample: 6\n  bayes_opt_max_samples: 7\n  \
                gaussian_process_noise: 0.5\n";
    assert_eq!(
        autotune(&run("./t", &[], file).unwrap()),
        &AutotuneConfig {
            log_file: Some("file.csv".into()),
            warmup_samples: 5,
            steps_per_sample: 6,
            max_samples: 7,
            gaussian_process_noise: 0.5,
        }
    );
    let c = run(
        "--autotune-warmup-samples 1 ./t",
        &[
            ("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", "2"),
            ("ELASTICRUN_AUTOTUNE_STEPS_PER_SAMPLE", "12"),
            ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "13"),
            ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "30"),
            ("ELASTICRUN_AUTOTUNE_LOG_FILE", "env.csv"),
        ],
        file,
    )
    .unwrap();
    assert_eq!(
        autotune(&c),
        &AutotuneConfig {
            log_file: Some("env.csv".into()),
            warmup_samples: 1,
            steps_per_sample: 12,
            max_samples: 30,
            gaussian_process_noise: 0.5,
        }
    );
}

#[test]
fn horovod_autotune_names_are_aliases() {
    let c = run(
        "./t",
        &[
            ("HOROVOD_AUTOTUNE", "1"),
            ("HOROVOD_AUTOTUNE_LOG", "/tmp/autotune.csv"),
            ("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "4"),
            ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "25"),
            ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "40"),
            ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.25"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(
        autotune(&c),
        &AutotuneConfig {
            log_file: Some("/tmp/autotune.csv".into()),
            warmup_samples: 4,
            steps_per_sample: 25,
            max_samples: 40,
            gaussian_process_noise: 0.25,
        }
    );
    // Our own names win over Horovod's.
    let c = run(
        "--autotune ./t",
        &[
            ("HOROVOD_AUTOTUNE_LOG", "h.csv"),
            ("ELASTICRUN_AUTOTUNE_LOG_FILE", "e.csv"),
            ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.1"),
            ("ELASTICRUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.2"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(autotune(&c).log_file, Some(PathBuf::from("e.csv")));
    assert_eq!(autotune(&c).gaussian_process_noise, 0.2);
}

#[test]
fn autotune_options_without_autotune_are_refused() {
    for args in [
        "--autotune-log-file a.csv",
        "--autotune-warmup-samples 1",
        "--autotune-steps-per-sample 1",
        "--autotune-bayes-opt-max-samples 1",
        "--autotune-gaussian-process-noise 0.5",
    ] {
        let (option, why) = invalid_option(run(&format!("{args} ./t"), &[], ""));
        assert_eq!(format!("--{option}"), args.split(' ').next().unwrap());
        assert!(why.contains("--autotune"), "{why}");
        assert!(why.contains("on the command line"), "{why}");
    }
    let e = run("./t", &[("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", "1")], "").unwrap_err();
    assert!(
        e.to_string().starts_with("--autotune-warmup-samples: ")
            && e.to_string()
                .contains("by ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES"),
        "{e}"
    );
    let e = run("./t", &[], "autotune:\n  log_file: a.csv\n").unwrap_err();
    assert!(
        e.to_string().starts_with("--autotune-log-file: ") && e.to_string().contains("config file"),
        "{e}"
    );
    // Turned off explicitly: the message says where.
    let e = run(
        "--autotune-steps-per-sample 5 ./t",
        &[("ELASTICRUN_AUTOTUNE", "0")],
        "",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("turned off by ELASTICRUN_AUTOTUNE"),
        "{e}"
    );
    // Horovod's names only count when autotuning is on, as in Horovod: a stray
    // export is ignored, not an error.
    let c = run(
        "./t",
        &[
            ("HOROVOD_AUTOTUNE_LOG", "a.csv"),
            ("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "oops"),
            ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "0"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(c.autotune, None);
}

#[test]
fn bad_autotune_values_are_refused() {
    for (args, option) in [
        ("--autotune-steps-per-sample 0", "autotune-steps-per-sample"),
        (
            "--autotune-bayes-opt-max-samples 0",
            "autotune-bayes-opt-max-samples",
        ),
        (
            "--autotune-gaussian-process-noise=-0.1",
            "autotune-gaussian-process-noise",
        ),
        (
            "--autotune-gaussian-process-noise inf",
            "autotune-gaussian-process-noise",
        ),
        (
            "--autotune-gaussian-process-noise NaN",
            "autotune-gaussian-process-noise",
        ),
    ] {
        let r = run(&format!("--autotune {args} ./t"), &[], "");
        assert_eq!(invalid_option(r).0, option, "{args}");
    }
    let e = run("--autotune --autotune-steps-per-sample 0 ./t", &[], "").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--autotune-steps-per-sample: at least 1 is needed"
    );
    let r = run(
        "./t",
        &[],
        "autotune:\n  enabled: true\n  gaussian_process_noise: -1\n",
    );
    assert_eq!(invalid_option(r).0, "autotune-gaussian-process-noise");
    for (var, bad) in [
        ("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", "-1"),
        ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "many"),
        ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "-0.5"),
        ("ELASTICRUN_AUTOTUNE_STEPS_PER_SAMPLE", "4294967296"),
    ] {
        let r = run("--autotune ./t", &[(var, bad)], "");
        assert!(
            matches!(r, Err(ConfigError::Env { var: ref v, .. }) if v == var),
            "{var}={bad}: {r:?}"
        );
    }
    let e = run("./t", &[("HOROVOD_AUTOTUNE", "2")], "").unwrap_err();
    assert!(e.to_string().starts_with("HOROVOD_AUTOTUNE=\"2\": "), "{e}");
    let e = run("./t", &[("ELASTICRUN_AUTOTUNE", "maybe")], "").unwrap_err();
    assert!(
        e.to_string().starts_with("ELASTICRUN_AUTOTUNE=\"maybe\": "),
        "{e}"
    );
    // Empty values are unset.
    let c = run(
        "--autotune ./t",
        &[("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", " ")],
        "",
    )
    .unwrap();
    assert_eq!(autotune(&c).warmup_samples, 3);
}

#[test]
fn user_set_knobs_are_held_fixed() {
    assert!(run("./t", &[], "").unwrap().tuning.user_set().is_empty());
    let c = run(
        "--autotune --disable-cache ./t",
        &[("HOROVOD_CYCLE_TIME", "2")],
        "params:\n  hierarchical_allgather: false\n",
    )
    .unwrap();
    assert_eq!(
        c.tuning.user_set(),
        [Knob::CycleTime, Knob::Cache, Knob::HierarchicalAllgather]
    );
    let c = run(
        "--fusion-threshold-mb 0 --no-hierarchical-allreduce ./t",
        &[("ELASTICRUN_CACHE_CAPACITY", "10")],
        "params:\n  cycle_time_ms: 3\n  hierarchical_allgather: true\n",
    )
    .unwrap();
    assert_eq!(
        c.tuning.user_set(),
        [
            Knob::FusionThreshold,
            Knob::CycleTime,
            Knob::Cache,
            Knob::HierarchicalAllreduce,
            Knob::HierarchicalAllgather
        ]
    );
    // A file value beaten by nothing is still the user's.
    let c = run("./t", &[], "params:\n  cache_capacity: 1024\n").unwrap();
    assert_eq!(c.tuning.user_set(), [Knob::Cache]);
}

#[test]
fn a_set_segment_size_is_held_fixed_and_handed_to_the_workers() {
    for (args, vars, file) in [
        ("--segment-size 512K ./t", &[][..], ""),
        ("./t", &[("ELASTICRUN_SEGMENT_SIZE", "512K")][..], ""),
        ("./t", &[][..], "params:\n  segment_bytes: 524288\n"),
    ] {
        let c = run(args, vars, file).unwrap();
        assert_eq!(
            c.tuning.user_set(),
            [Knob::SegmentSize],
            "{args} {vars:?} {file}"
        );
    }
    let c = run(
        "--autotune --segment-size 2M --cache-capacity 8 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(c.tuning.user_set(), [Knob::Cache, Knob::SegmentSize]);
    let k = crate::job::knobs(&c);
    assert_eq!(k.tuning.segment_bytes, 2 << 20);
    assert_eq!(
        k.autotune.expect("autotuning on").fixed,
        [Knob::Cache, Knob::SegmentSize]
    );
    // The default is the workers' own default, and not held fixed.
    let c = run("--autotune ./t", &[], "").unwrap();
    let k = crate::job::knobs(&c);
    assert_eq!(
        k.tuning.segment_bytes,
        control::Tuning::default().segment_bytes
    );
    assert!(k.autotune.expect("autotuning on").fixed.is_empty());
}

#[test]
fn every_knob_the_user_sets_reaches_the_workers_fixed() {
    // One way to set each knob; a knob added without one fails here.
    let ways = [
        ("--fusion-threshold-mb 8", Knob::FusionThreshold),
        ("--cycle-time-ms 2", Knob::CycleTime),
        ("--cache-capacity 8", Knob::Cache),
        ("--disable-cache", Knob::Cache),
        ("--hierarchical-allreduce", Knob::HierarchicalAllreduce),
        ("--no-hierarchical-allgather", Knob::HierarchicalAllgather),
        ("--segment-size 1M", Knob::SegmentSize),
    ];
    for knob in Knob::ALL {
        assert!(
            ways.iter().any(|(_, k)| *k == knob),
            "{knob:?} cannot be set"
        );
    }
    for (args, knob) in ways {
        let c = run(&format!("--autotune {args} ./t"), &[], "").unwrap();
        let k = crate::job::knobs(&c);
        assert_eq!(k.autotune.expect("autotuning on").fixed, [knob], "{args}");
    }
    let all: Vec<&str> = ways.iter().map(|(a, _)| *a).collect();
    let c = run(&format!("--autotune {} ./t", all.join(" ")), &[], "").unwrap();
    let k = crate::job::knobs(&c);
    assert_eq!(k.autotune.expect("autotuning on").fixed, Knob::ALL);
}

/// A huge bad value is named by its start and length, not echoed whole.
#[test]
fn a_huge_bad_value_is_quoted_cut() {
    let huge = "x".repeat(50 << 20);
    let e = run("-np 1 ./t", &[("ELASTICRUN_CYCLE_TIME_MS", &huge)], "").unwrap_err();
    let said = e.to_string();
    assert!(said.len() < 300, "{} bytes said", said.len());
    assert!(said.contains("(52428800 bytes)"), "{said}");
    let e = run(&format!("-H a:{} ./t", "9".repeat(10_000)), &[], "").unwrap_err();
    assert!(e.to_string().len() < 300, "{e}");
}
