//! The command line, with horovodrun's flag names. Every option is optional here
//! (so that "given on the command line" is known); defaults are applied by
//! [`super::resolve`], after the environment and the config file, and stated in
//! the help.

use std::path::PathBuf;

use clap::{ArgAction, Parser};

#[derive(Clone, Debug, Default, Parser, PartialEq)]
#[command(
    name = "elasticrun",
    version,
    about = "Run a training program as many cooperating processes, on one machine or over ssh",
    after_help = "Every option can also come from an ELASTICRUN_<OPTION> environment variable \
(e.g. ELASTICRUN_CYCLE_TIME_MS=2) or the YAML --config-file; Horovod's HOROVOD_* variables are \
accepted too. Precedence: command line > environment > config file > default.",
    override_usage = "elasticrun [OPTIONS] -np N [-H HOSTS | --hostfile FILE | --host-discovery-script FILE] COMMAND [ARGS]..."
)]
pub struct Cli {
    /// Number of worker processes [default: the total slots of the hosts].
    #[arg(
        long = "np",
        visible_alias = "num-proc",
        value_name = "N",
        help_heading = "Launching"
    )]
    pub np: Option<usize>,
    /// Hosts and slots, e.g. a:4,b:4 [default: localhost with -np slots].
    #[arg(
        short = 'H',
        long = "hosts",
        value_name = "HOST:SLOTS,...",
        help_heading = "Launching"
    )]
    pub hosts: Option<String>,
    /// File with one `host slots=N` or `host:N` line per host.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "hosts",
        help_heading = "Launching"
    )]
    pub hostfile: Option<PathBuf>,
    /// Seconds to wait for every worker to start and register [default: 30].
    #[arg(long, value_name = "SECONDS", help_heading = "Launching")]
    pub start_timeout: Option<f64>,
    /// Seconds a worker that lost its connection to the coordinator keeps trying to reconnect before it exits [default: 10].
    #[arg(long, value_name = "SECONDS", help_heading = "Launching")]
    pub coordinator_timeout: Option<f64>,
    /// Interface whose address the coordinator listens on; workers reach it, and each other, from the address they reach it through [default: any].
    #[arg(long, value_name = "IFACE", help_heading = "Launching")]
    pub network_interface: Option<String>,
    /// YAML file of options (horovodrun's layout).
    #[arg(long, value_name = "FILE", help_heading = "Launching")]
    pub config_file: Option<PathBuf>,

    /// SSH port of the remote hosts [default: ssh's own].
    #[arg(
        short = 'p',
        long = "ssh-port",
        value_name = "PORT",
        help_heading = "SSH"
    )]
    pub ssh_port: Option<u16>,
    /// SSH private key for the remote hosts [default: ssh's own].
    #[arg(
        short = 'i',
        long = "ssh-identity-file",
        value_name = "FILE",
        help_heading = "SSH"
    )]
    pub ssh_identity_file: Option<PathBuf>,

    /// Fusion buffer size in MiB; 0 disables fusion [default: 64].
    #[arg(long, value_name = "MB", help_heading = "Tuneable parameters")]
    pub fusion_threshold_mb: Option<f64>,
    /// Milliseconds between negotiation cycles [default: 1].
    #[arg(long, value_name = "MS", help_heading = "Tuneable parameters")]
    pub cycle_time_ms: Option<f64>,
    /// Tensor names kept in the response cache [default: 1024].
    #[arg(long, value_name = "N", help_heading = "Tuneable parameters")]
    pub cache_capacity: Option<usize>,
    /// Turn the response cache off (same as --cache-capacity 0).
    #[arg(long, action = ArgAction::SetTrue, help_heading = "Tuneable parameters")]
    pub disable_cache: bool,
    /// Reduce within each host first, then across hosts [default: off].
    #[arg(
        long,
        overrides_with = "no_hierarchical_allreduce",
        help_heading = "Tuneable parameters"
    )]
    pub hierarchical_allreduce: bool,
    /// Plain ring allreduce across all ranks.
    #[arg(
        long,
        overrides_with = "hierarchical_allreduce",
        help_heading = "Tuneable parameters"
    )]
    pub no_hierarchical_allreduce: bool,
    /// Gather within each host first, then across hosts [default: off].
    #[arg(
        long,
        overrides_with = "no_hierarchical_allgather",
        help_heading = "Tuneable parameters"
    )]
    pub hierarchical_allgather: bool,
    /// Plain ring allgather across all ranks.
    #[arg(
        long,
        overrides_with = "hierarchical_allgather",
        help_heading = "Tuneable parameters"
    )]
    pub no_hierarchical_allgather: bool,
    /// Bytes per message in the segmented ring, chain and alltoall collectives: bytes or with a K, M or G suffix (binary), from 4K to 1G [default: 512K].
    #[arg(
        long,
        value_name = "SIZE",
        value_parser = super::parse_size,
        help_heading = "Tuneable parameters"
    )]
    pub segment_size: Option<u64>,

    /// Search for the best tuneable parameters while training; the ones given here, in the environment or the config file stay fixed [default: off].
    #[arg(long, help_heading = "Autotune")]
    pub autotune: bool,
    /// Write a comma-separated log of the autotune samples to FILE [default: none].
    #[arg(long, value_name = "FILE", help_heading = "Autotune")]
    pub autotune_log_file: Option<PathBuf>,
    /// Samples discarded before tuning begins [default: 3].
    #[arg(long, value_name = "N", help_heading = "Autotune")]
    pub autotune_warmup_samples: Option<u32>,
    /// Steps (approximately) recorded in one sample; at least 1 [default: 10].
    #[arg(long, value_name = "N", help_heading = "Autotune")]
    pub autotune_steps_per_sample: Option<u32>,
    /// Most samples each Bayesian optimization collects; at least 1 [default: 20].
    #[arg(long, value_name = "N", help_heading = "Autotune")]
    pub autotune_bayes_opt_max_samples: Option<u32>,
    /// Regularization for the noise in the samples (the Gaussian process's alpha), 0 or more [default: 0.8].
    #[arg(long, value_name = "X", help_heading = "Autotune")]
    pub autotune_gaussian_process_noise: Option<f64>,

    /// Script printing the hosts available now, one `host` or `host:slots` per line (run through the shell, so it may carry arguments); makes the job elastic [default: none].
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["hosts", "hostfile"],
        help_heading = "Elastic"
    )]
    pub host_discovery_script: Option<PathBuf>,
    /// Fewest processes training continues with; with fewer it waits for hosts [default: -np].
    #[arg(
        long = "min-np",
        visible_alias = "min-num-proc",
        value_name = "N",
        help_heading = "Elastic"
    )]
    pub min_np: Option<usize>,
    /// Most processes; further slots stay unused [default: no limit].
    #[arg(
        long = "max-np",
        visible_alias = "max-num-proc",
        value_name = "N",
        help_heading = "Elastic"
    )]
    pub max_np: Option<usize>,
    /// Slots of a discovered host printed without a count [default: 1].
    #[arg(long, value_name = "N", help_heading = "Elastic")]
    pub slots_per_host: Option<usize>,
    /// Seconds to wait for at least --min-np processes, at the start and after hosts are lost [default: 600].
    #[arg(long, value_name = "SECONDS", help_heading = "Elastic")]
    pub elastic_timeout: Option<f64>,
    /// Times the workers may be reset (workers lost, hosts added or removed) before the job ends; with 0 the first reset ends it [default: unlimited].
    #[arg(long, value_name = "N", help_heading = "Elastic")]
    pub reset_limit: Option<u32>,
    /// Seconds a failing host stays blacklisted: MIN, doubling with each blacklisting up to MAX [default: none, blacklisted hosts stay out].
    #[arg(
        long,
        num_args = 2,
        value_names = ["MIN", "MAX"],
        action = ArgAction::Set,
        help_heading = "Elastic"
    )]
    pub blacklist_cooldown_range: Option<Vec<f64>>,
    /// Seconds between runs of the discovery script [default: 1].
    #[arg(long, value_name = "SECONDS", help_heading = "Elastic")]
    pub discovery_interval: Option<f64>,
    /// Seconds a discovery run may take; a slower run is killed and counts as failed [default: 10].
    #[arg(long, value_name = "SECONDS", help_heading = "Elastic")]
    pub discovery_timeout: Option<f64>,

    /// Write a Chrome-trace timeline of every tensor to FILE [default: none].
    #[arg(long, value_name = "FILE", help_heading = "Timeline")]
    pub timeline_filename: Option<PathBuf>,
    /// Mark negotiation cycles on the timeline.
    #[arg(long, help_heading = "Timeline")]
    pub timeline_mark_cycles: bool,

    /// Turn the stall inspector off.
    #[arg(long, help_heading = "Stall check")]
    pub no_stall_check: bool,
    /// Seconds a tensor may wait on other ranks before a warning [default: 60].
    #[arg(long, value_name = "SECONDS", help_heading = "Stall check")]
    pub stall_check_warning_time_seconds: Option<f64>,
    /// Seconds a tensor may wait before the job is ended; 0 = never [default: 0].
    #[arg(long, value_name = "SECONDS", help_heading = "Stall check")]
    pub stall_check_shutdown_time_seconds: Option<f64>,

    /// Write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub output_filename: Option<PathBuf>,
    /// Prefix every forwarded line with the time it was received.
    #[arg(long, help_heading = "Output")]
    pub prefix_output_with_timestamp: bool,

    /// trace, debug, info, warning, error [default: warning].
    #[arg(long, value_name = "LEVEL", help_heading = "Logging")]
    pub log_level: Option<String>,
    /// Leave timestamps out of elasticrun's own log lines.
    #[arg(long, help_heading = "Logging")]
    pub log_without_timestamp: bool,

    /// The training program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

impl Cli {
    /// Parses `args` (program name first), accepting horovodrun's `-np N` as well.
    pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(rewrite_np(args.into_iter().collect()))
    }
}

/// Turns horovodrun's single-dash `-np` into `--np`, but only among elasticrun's
/// own options: nothing from the training command onwards is touched.
fn rewrite_np(mut args: Vec<String>) -> Vec<String> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    // How many values follow `flag` (`--blacklist-cooldown-range` takes two).
    let values_after = |flag: &str| {
        cmd.get_arguments()
            .find(|a| {
                a.get_long().is_some_and(|l| flag == format!("--{l}"))
                    || a.get_short().is_some_and(|s| flag == format!("-{s}"))
                    || a.get_all_aliases()
                        .is_some_and(|al| al.iter().any(|l| flag == format!("--{l}")))
            })
            .filter(|a| a.get_action().takes_values())
            .map_or(0, |a| a.get_num_args().map_or(1, |n| n.min_values()))
    };
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-np" {
            args[i] = "--np".into();
            i += 2;
        } else if a == "--" || !a.starts_with('-') {
            break;
        } else if a.contains('=') {
            i += 1;
        } else {
            i += 1 + values_after(a);
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Cli, clap::Error> {
        Cli::parse_args(
            std::iter::once("elasticrun".to_owned()).chain(s.split_whitespace().map(str::to_owned)),
        )
    }

    #[test]
    fn horovodrun_style_command_line() {
        let c = parse("-np 4 -H a:2,b:2 -p 2222 --fusion-threshold-mb 32 python train.py --lr 0.1")
            .unwrap();
        assert_eq!(c.np, Some(4));
        assert_eq!(c.hosts.as_deref(), Some("a:2,b:2"));
        assert_eq!(c.ssh_port, Some(2222));
        assert_eq!(c.fusion_threshold_mb, Some(32.0));
        assert_eq!(c.command, ["python", "train.py", "--lr", "0.1"]);
    }

    #[test]
    fn the_programs_own_np_is_left_alone() {
        let c = parse("--np 2 ./train -np 7").unwrap();
        assert_eq!(c.np, Some(2));
        assert_eq!(c.command, ["./train", "-np", "7"]);
        let c = parse("-H localhost:2 ./train -np 7").unwrap();
        assert_eq!(c.np, None);
        assert_eq!(c.command, ["./train", "-np", "7"]);
    }

    #[test]
    fn last_of_a_flag_pair_wins() {
        let c = parse("--hierarchical-allreduce --no-hierarchical-allreduce ./t").unwrap();
        assert!(!c.hierarchical_allreduce && c.no_hierarchical_allreduce);
        let c = parse("--no-hierarchical-allgather --hierarchical-allgather ./t").unwrap();
        assert!(c.hierarchical_allgather && !c.no_hierarchical_allgather);
    }

    #[test]
    fn segment_size_takes_a_size() {
        assert_eq!(parse("./t").unwrap().segment_size, None);
        let c = parse("--segment-size 512K -np 2 ./t --segment-size 1").unwrap();
        assert_eq!(c.segment_size, Some(512 << 10));
        assert_eq!(c.np, Some(2));
        assert_eq!(c.command, ["./t", "--segment-size", "1"]);
        assert_eq!(
            parse("--segment-size=4M ./t").unwrap().segment_size,
            Some(4 << 20)
        );
        // The range is checked with the other layers' values (see resolve).
        assert_eq!(parse("--segment-size 1 ./t").unwrap().segment_size, Some(1));
        for bad in ["lots", "12Q", "-1"] {
            let e = parse(&format!("--segment-size {bad} ./t")).unwrap_err();
            assert!(e.to_string().contains("--segment-size"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_command_is_required_and_bad_values_are_refused() {
        assert!(parse("-np 2").is_err());
        assert!(parse("-np two ./t").is_err());
        assert!(
            parse("-H a:1 --hostfile h ./t").is_err(),
            "hosts and hostfile conflict"
        );
        assert!(parse("-p 70000 ./t").is_err());
    }

    #[test]
    fn help_groups_the_options() {
        use clap::CommandFactory;
        let help = Cli::command().render_help().to_string();
        for heading in [
            "Launching:",
            "SSH:",
            "Tuneable parameters:",
            "Autotune:",
            "Elastic:",
            "Timeline:",
            "Stall check:",
            "Output:",
            "Logging:",
        ] {
            assert!(help.contains(heading), "{heading} missing from\n{help}");
        }
        assert!(help.contains("[default: 64]"), "defaults are stated");
        let tuneable =
            &help[help.find("Tuneable parameters:").unwrap()..help.find("Autotune:").unwrap()];
        for stated in ["--segment-size <SIZE>", "[default: 512K]", "4K to 1G"] {
            assert!(
                tuneable.contains(stated),
                "{stated} not under Tuneable parameters:\n{help}"
            );
        }
        for stated in [
            "--host-discovery-script <FILE>",
            "--min-np <N>",
            "--max-np <N>",
            "min-num-proc",
            "max-num-proc",
            "--blacklist-cooldown-range <MIN> <MAX>",
            "[default: 600]",
            "[default: 10]",
        ] {
            assert!(help.contains(stated), "{stated} missing from\n{help}");
        }
        let elastic = &help[help.find("Elastic:").unwrap()..help.find("Timeline:").unwrap()];
        for flag in [
            "--host-discovery-script",
            "--min-np",
            "--max-np",
            "--slots-per-host",
            "--elastic-timeout",
            "--reset-limit",
            "--blacklist-cooldown-range",
            "--discovery-interval",
            "--discovery-timeout",
        ] {
            assert!(elastic.contains(flag), "{flag} not under Elastic:\n{help}");
        }
        // After the tuneable parameters, as in horovodrun.
        let autotune = &help[help.find("Autotune:").unwrap()..help.find("Elastic:").unwrap()];
        assert!(help.find("Tuneable parameters:") < help.find("Autotune:"));
        for stated in [
            "--autotune\n",
            "--autotune-log-file <FILE>",
            "--autotune-warmup-samples <N>",
            "--autotune-steps-per-sample <N>",
            "--autotune-bayes-opt-max-samples <N>",
            "--autotune-gaussian-process-noise <X>",
            "[default: 3]",
            "[default: 10]",
            "[default: 20]",
            "[default: 0.8]",
        ] {
            assert!(
                autotune.contains(stated),
                "{stated} not under Autotune:\n{help}"
            );
        }
    }

    #[test]
    fn autotune_options_as_horovodrun_spells_them() {
        let c = parse(
            "--autotune --autotune-log-file at.csv --autotune-warmup-samples 5 \
             --autotune-steps-per-sample 20 --autotune-bayes-opt-max-samples 50 \
             --autotune-gaussian-process-noise 0.9 -np 2 ./t --autotune",
        )
        .unwrap();
        assert!(c.autotune);
        assert_eq!(c.autotune_log_file, Some(PathBuf::from("at.csv")));
        assert_eq!(c.autotune_warmup_samples, Some(5));
        assert_eq!(c.autotune_steps_per_sample, Some(20));
        assert_eq!(c.autotune_bayes_opt_max_samples, Some(50));
        assert_eq!(c.autotune_gaussian_process_noise, Some(0.9));
        assert_eq!(c.np, Some(2), "-np after the autotune options is ours");
        assert_eq!(c.command, ["./t", "--autotune"]);
        assert!(parse("--autotune-warmup-samples many ./t").is_err());
        assert!(parse("--autotune-steps-per-sample 1.5 ./t").is_err());
    }

    #[test]
    fn elastic_options_as_horovodrun_spells_them() {
        let c = parse(
            "--host-discovery-script ./d.sh --min-num-proc 2 --max-num-proc 8 -np 4 \
             --blacklist-cooldown-range 10 100 --reset-limit 3 ./t -np 9",
        )
        .unwrap();
        assert_eq!(c.host_discovery_script, Some(PathBuf::from("./d.sh")));
        assert_eq!((c.min_np, c.max_np, c.np), (Some(2), Some(8), Some(4)));
        assert_eq!(c.blacklist_cooldown_range, Some(vec![10.0, 100.0]));
        assert_eq!(c.reset_limit, Some(3));
        assert_eq!(c.command, ["./t", "-np", "9"]);
        // `-np` after the two values of the range is still ours.
        let c = parse("--blacklist-cooldown-range 1 2 -np 3 ./t").unwrap();
        assert_eq!(c.np, Some(3));
        assert_eq!(c.command, ["./t"]);
    }

    #[test]
    fn a_discovery_script_conflicts_with_hosts() {
        for args in [
            "--host-discovery-script d -H a:1 ./t",
            "--hostfile h --host-discovery-script d ./t",
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{args}");
            assert!(e.to_string().contains("--host-discovery-script"), "{e}");
        }
        // The range takes exactly two numbers.
        assert!(parse("--blacklist-cooldown-range 5 ./t").is_err());
        assert!(parse("--blacklist-cooldown-range 5 x ./t").is_err());
    }
}
