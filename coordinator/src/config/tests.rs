use std::collections::HashMap;
use std::time::Duration;

use super::cli::Cli;
use super::file::parse;
use super::*;

pub(super) fn cli(s: &str) -> Cli {
    Cli::parse_args(
        std::iter::once("elasticrun".to_owned()).chain(s.split_whitespace().map(str::to_owned)),
    )
    .unwrap()
}

pub(super) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| m.get(k).cloned()
}

pub(super) fn run(c: &str, e: &[(&str, &str)], f: &str) -> Result<JobConfig, ConfigError> {
    resolve(&cli(c), &env(e), &parse(f).unwrap())
}

pub(super) fn elastic(c: &JobConfig) -> &ElasticConfig {
    c.elastic.as_ref().expect("an elastic job")
}

pub(super) fn invalid_option(r: Result<JobConfig, ConfigError>) -> (&'static str, String) {
    match r {
        Err(ConfigError::Invalid { option, why }) => (option, why.to_string()),
        other => panic!("expected ConfigError::Invalid, got {other:?}"),
    }
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
    // Sizes out of range are refused naming the variable, as on the command
    // line.
    for bad in ["1K", "3G", "0"] {
        let (option, why) = invalid_option(run("./t", &[("ELASTICRUN_SEGMENT_SIZE", bad)], ""));
        assert_eq!(option, "segment-size", "{bad}");
        assert!(why.contains("by ELASTICRUN_SEGMENT_SIZE"), "{bad}: {why}");
    }
    for bad in ["lots", "512X", "-4K", "K", "99999999999999999999G"] {
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
        "ELASTICRUN_CYCLE_TIME_MS=\"fast\": expected a number"
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
    let e = run("./t", &[("ELASTICRUN_START_TIMEOUT", "soon")], "").unwrap_err();
    assert!(
        matches!(e, ConfigError::Env { ref var, .. } if var == "ELASTICRUN_START_TIMEOUT"),
        "{e}"
    );
    // A number out of range is refused as on the command line.
    let e = run("./t", &[("ELASTICRUN_START_TIMEOUT", "-1")], "").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--start-timeout: -1 is not a positive number"
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
