//! Tests of the command line ([`super`]).

use clap::error::ErrorKind;

use super::*;

fn parse_words(words: &[&str]) -> Result<Cli, CliError> {
    Cli::parse_args(
        std::iter::once("elasticrun")
            .chain(words.iter().copied())
            .map(str::to_owned),
    )
}

fn parse(s: &str) -> Result<Cli, CliError> {
    parse_words(&s.split_whitespace().collect::<Vec<_>>())
}

/// clap's own error for `s`, which must have been refused by clap.
fn clap_error(s: &str) -> clap::Error {
    match parse(s) {
        Err(CliError::Clap(e)) => e,
        other => panic!("{s}: expected clap's refusal, got {other:?}"),
    }
}

#[test]
fn horovodrun_style_command_line() {
    let c = parse("-np 4 -H a:2,b:2 -p 2222 --fusion-threshold-mb 32 python train.py --lr 0.1")
        .unwrap();
    assert_eq!(c.options.get("np"), Some("4"));
    assert_eq!(c.options.get("hosts"), Some("a:2,b:2"));
    assert_eq!(c.options.get("ssh-port"), Some("2222"));
    assert_eq!(c.options.get("fusion-threshold-mb"), Some("32"));
    assert_eq!(c.command, ["python", "train.py", "--lr", "0.1"]);
}

#[test]
fn the_programs_own_np_is_left_alone() {
    let c = parse("--np 2 ./train -np 7").unwrap();
    assert_eq!(c.options.get("np"), Some("2"));
    assert_eq!(c.command, ["./train", "-np", "7"]);
    let c = parse("-H localhost:2 ./train -np 7").unwrap();
    assert_eq!(c.options.get("np"), None);
    assert_eq!(c.command, ["./train", "-np", "7"]);
}

#[test]
fn last_of_a_flag_pair_wins() {
    let c = parse("--hierarchical-allreduce --no-hierarchical-allreduce ./t").unwrap();
    assert_eq!(c.options.get("hierarchical-allreduce"), Some("false"));
    let c = parse("--no-hierarchical-allgather --hierarchical-allgather ./t").unwrap();
    assert_eq!(c.options.get("hierarchical-allgather"), Some("true"));
}

#[test]
fn segment_size_takes_a_size() {
    assert_eq!(parse("./t").unwrap().options.get("segment-size"), None);
    let c = parse("--segment-size 512K -np 2 ./t --segment-size 1").unwrap();
    assert_eq!(c.options.get("segment-size"), Some("512K"));
    assert_eq!(c.options.get("np"), Some("2"));
    assert_eq!(c.command, ["./t", "--segment-size", "1"]);
    let c = parse("--segment-size=4M ./t").unwrap();
    assert_eq!(c.options.get("segment-size"), Some("4M"));
    // The range is checked with the other layers' values (see resolve).
    let c = parse("--segment-size 1 ./t").unwrap();
    assert_eq!(c.options.get("segment-size"), Some("1"));
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
    let help = Cli::help_text();
    for heading in [
        "Launching:",
        "SSH:",
        "Tuneable parameters:",
        "Autotune:",
        "Elastic:",
        "Timeline:",
        "Stall check:",
        "Controller and library:",
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
    for (flag, value) in [
        ("autotune", "true"),
        ("autotune-log-file", "at.csv"),
        ("autotune-warmup-samples", "5"),
        ("autotune-steps-per-sample", "20"),
        ("autotune-bayes-opt-max-samples", "50"),
        ("autotune-gaussian-process-noise", "0.9"),
    ] {
        assert_eq!(c.options.get(flag), Some(value), "--{flag}");
    }
    assert_eq!(
        c.options.get("np"),
        Some("2"),
        "-np after the autotune options is ours"
    );
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
    for (flag, value) in [
        ("host-discovery-script", "./d.sh"),
        ("min-np", "2"),
        ("max-np", "8"),
        ("np", "4"),
        ("blacklist-cooldown-range", "10,100"),
        ("reset-limit", "3"),
    ] {
        assert_eq!(c.options.get(flag), Some(value), "--{flag}");
    }
    assert_eq!(c.command, ["./t", "-np", "9"]);
    // `-np` after the two values of the range is still ours.
    let c = parse("--blacklist-cooldown-range 1 2 -np 3 ./t").unwrap();
    assert_eq!(c.options.get("np"), Some("3"));
    assert_eq!(c.command, ["./t"]);
}

#[test]
fn a_discovery_script_conflicts_with_hosts() {
    for args in [
        "--host-discovery-script d -H a:1 ./t",
        "--hostfile h --host-discovery-script d ./t",
    ] {
        let e = clap_error(args);
        assert_eq!(e.kind(), ErrorKind::ArgumentConflict, "{args}");
        assert!(e.to_string().contains("--host-discovery-script"), "{e}");
    }
    // The range takes exactly two numbers.
    assert!(parse("--blacklist-cooldown-range 5 ./t").is_err());
    // Its values are read as one text of the option's grammar, MIN,MAX.
    let c = parse("--blacklist-cooldown-range 5 x ./t").unwrap();
    let no_env = |_: &str| None;
    let e = super::super::resolve(&c, &no_env, &Default::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--blacklist-cooldown-range: expected a number"
    );
}

#[test]
fn an_unknown_option_is_refused_with_the_one_it_resembles() {
    // Taken as the training command before.
    for (args, unknown, meant) in [
        ("-np 2 --verbos train", "--verbos", "--verbose"),
        ("--num-procs 2 ./t", "--num-procs", "--num-proc"),
        (
            "--fusion-treshold-mb 8 -np 2 ./t",
            "--fusion-treshold-mb",
            "--fusion-threshold-mb",
        ),
        ("-np 2 --hots a:2 ./t", "--hots", "--hosts"),
    ] {
        let e = clap_error(args);
        assert_eq!(e.kind(), ErrorKind::UnknownArgument, "{args}");
        let text = e.to_string();
        assert!(
            text.contains(unknown) && text.contains(meant),
            "{args}: {text}"
        );
        assert_eq!(e.exit_code(), 2, "{args}");
    }
    // Without a resemblance it is still refused, not run.
    let e = clap_error("-np 2 --zzz ./t");
    assert_eq!(e.kind(), ErrorKind::UnknownArgument);
    assert!(
        e.to_string().contains("-- --zzz"),
        "says how to pass it on: {e}"
    );
    assert_eq!(clap_error("-n 2 ./t").kind(), ErrorKind::UnknownArgument);
}

#[test]
fn everything_from_the_command_on_is_the_programs() {
    let c = parse("-np 2 ./train --epochs 5 --verbose -np 3 -- --gloo").unwrap();
    assert_eq!(c.options.get("np"), Some("2"));
    assert!(!c.verbose && !c.gloo);
    assert_eq!(
        c.command,
        [
            "./train",
            "--epochs",
            "5",
            "--verbose",
            "-np",
            "3",
            "--",
            "--gloo"
        ]
    );
    // `--` is needed only before a command that starts with a dash.
    let c = parse("-np 2 -- --odd-program -x").unwrap();
    assert_eq!(c.command, ["--odd-program", "-x"]);
    let c = parse("-np 2 -- ./t").unwrap();
    assert_eq!(c.command, ["./t"]);
    // A command is needed.
    assert_eq!(
        clap_error("-np 2").kind(),
        ErrorKind::MissingRequiredArgument
    );
}

#[test]
fn horovodrun_spellings_are_accepted() {
    // Horovod's README.
    let c = parse("--gloo -np 2 python train.py").unwrap();
    assert!(c.gloo);
    assert_eq!(c.options.get("np"), Some("2"));
    assert_eq!(c.command, ["python", "train.py"]);
    for args in [
        "-np 3 ./t",
        "--num-proc 3 ./t",
        "--np 3 ./t",
        "-np=3 ./t",
        "--num-proc=3 ./t",
    ] {
        assert_eq!(parse(args).unwrap().options.get("np"), Some("3"), "{args}");
    }
    let c = parse("-hostfile hosts.txt -prefix-timestamp --verbose ./t").unwrap();
    assert_eq!(c.options.get("hostfile"), Some("hosts.txt"));
    assert_eq!(c.options.get("prefix-output-with-timestamp"), Some("true"));
    assert!(c.verbose);
    assert!(parse("-cb").unwrap().check_build);
    assert!(parse("--check-build").unwrap().check_build);
    let c = parse("--network-interfaces eth1 --tcp --thread-affinity 0,2 ./t").unwrap();
    assert_eq!(c.options.get("network-interface"), Some("eth1"));
    assert_eq!(c.options.get("tcp"), Some("true"));
    assert_eq!(c.options.get("thread-affinity"), Some("0,2"));
    let c = parse("--gloo-timeout-seconds 90 ./t").unwrap();
    assert_eq!(c.options.get("gloo-timeout-seconds"), Some("90"));
    // horovodrun's hidden negations: the last one wins.
    let c = parse("--autotune --no-autotune --no-stall-check --stall-check ./t").unwrap();
    assert_eq!(c.options.get("autotune"), Some("false"));
    assert_eq!(c.options.get("no-stall-check"), Some("false"));
    let c = parse("--log-hide-timestamp --no-timeline-mark-cycles ./t").unwrap();
    assert_eq!(c.options.get("log-without-timestamp"), Some("true"));
    assert_eq!(c.options.get("timeline-mark-cycles"), Some("false"));
    assert!(parse("--no-mpi-threads-disable ./t").is_ok());
    let c = parse("--shared-memory --no-shared-memory ./t").unwrap();
    assert_eq!(c.options.get("no-shared-memory"), Some("true"));
    for bad in ["--thread-affinity one ./t", "--thread-affinity 1,,2 ./t"] {
        assert_eq!(clap_error(bad).kind(), ErrorKind::ValueValidation, "{bad}");
    }
    // Version, as -v, -V and --version.
    for v in ["-v", "-V", "--version"] {
        assert_eq!(clap_error(v).kind(), ErrorKind::DisplayVersion, "{v}");
    }
}

#[test]
fn mpi_and_jsrun_options_are_refused_saying_what_to_do_instead() {
    for (words, flag, instead) in [
        (&["--mpi", "-np", "2", "./t"][..], "mpi", "--gloo"),
        (&["--jsrun", "./t"], "jsrun", "ssh"),
        (
            &["--mpi-args=--map-by ppr:6:node", "./t"],
            "mpi-args",
            "mpirun",
        ),
        (
            &["--mpi-args", "-x FOO", "-np", "2", "./t"],
            "mpi-args",
            "mpirun",
        ),
        (
            &["--binding-args", "--rankfile f", "./t"],
            "binding-args",
            "--thread-affinity",
        ),
        (
            &["--mpi-threads-disable", "./t"],
            "mpi-threads-disable",
            "MPI",
        ),
        (
            &["--num-nccl-streams", "2", "./t"],
            "num-nccl-streams",
            "NCCL",
        ),
    ] {
        let args = words.join(" ");
        match parse_words(words) {
            Err(e @ CliError::Refused { .. }) => {
                let text = e.to_string();
                assert!(text.starts_with(&format!("--{flag}: ")), "{args}: {text}");
                assert!(text.contains(instead), "{args}: {text}");
                assert!(!text.contains('\n'), "one line: {text}");
                assert_eq!(e.exit_code(), 2);
            }
            other => panic!("{args}: {other:?}"),
        }
    }
}

#[test]
fn one_nccl_stream_is_what_runs_and_is_accepted() {
    assert!(parse_words(&["--num-nccl-streams", "1", "-np", "2", "./t"]).is_ok());
}

#[test]
fn help_spells_np_as_users_type_it_and_does_not_require_it() {
    let help = Cli::help_text();
    let usage = help.lines().find(|l| l.starts_with("Usage:")).unwrap();
    assert!(usage.contains("[-np N]"), "{usage}");
    assert!(usage.contains("[--] COMMAND"), "{usage}");
    let np = help
        .lines()
        .find(|l| l.contains("--num-proc"))
        .unwrap_or_else(|| panic!("no --num-proc in\n{help}"));
    assert!(np.starts_with("  -np, --num-proc <N>"), "{np}");
    // The description starts in the same column as its neighbours'.
    let column = |line: &str| line.find("Number of").or_else(|| line.find("Hosts and"));
    let hosts = help.lines().find(|l| l.contains("--hosts <")).unwrap();
    assert_eq!(column(np), column(hosts), "\n{np}\n{hosts}");
    assert!(!help.contains("--np "), "{help}");
    let library =
        &help[help.find("Controller and library:").unwrap()..help.find("Output:").unwrap()];
    for flag in [
        "--gloo ",
        "--gloo-timeout-seconds <SECONDS>",
        "--thread-affinity <CPU,...>",
        "--tcp ",
        "--transport <tcp|quic|tls>",
        "--no-shared-memory ",
        "--shared-memory ",
        "--mpi ",
        "--jsrun ",
        "--mpi-args <ARGS>",
        "--binding-args <ARGS>",
        "--mpi-threads-disable",
        "--num-nccl-streams <N>",
        "[default: 60]",
    ] {
        assert!(
            library.contains(flag),
            "{flag} not under the library options:\n{help}"
        );
    }
    for stated in [
        "--verbose",
        "--check-build",
        "-v, --version",
        "network-interfaces",
    ] {
        assert!(help.contains(stated), "{stated} missing from\n{help}");
    }
    assert!(matches!(parse("--help"), Err(CliError::Help { text }) if text == help));
    assert!(matches!(parse("-h"), Err(CliError::Help { .. })));
}

#[test]
fn spell_np_keeps_the_columns() {
    let plain = "      --num-proc <N>     Number\n  -H, --hosts <H>        Hosts\n";
    assert_eq!(
        crate::config::argv::spell_np(plain),
        "  -np, --num-proc <N>    Number\n  -H, --hosts <H>        Hosts\n"
    );
    // Nothing to take from when the padding is one space.
    assert_eq!(
        crate::config::argv::spell_np("      --num-proc <N> x\n"),
        "  -np, --num-proc <N> x\n"
    );
}
