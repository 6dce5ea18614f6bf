//! Tests of resolving an elastic job's options.

use std::path::PathBuf;
use std::time::Duration;

use super::file::parse;
use super::tests::{cli, elastic, env, invalid_option, run};
use super::*;

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
            discovery: Some(HostDiscovery::Script("./d.sh".into())),
            min_np: 4,
            max_np: None,
            initial_np: 4,
            slots_per_host: 1,
            elastic_timeout: Duration::from_secs(600),
            replacement_wait: Duration::from_millis(500),
            reset_limit: None,
            hot_spares: 0,
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
         --elastic-timeout 30 --replacement-wait 0 --reset-limit 5 --hot-spares 2 \
         --blacklist-cooldown-range 10 100.5 \
         --discovery-interval 0.25 --discovery-timeout 3 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(
        elastic(&c),
        &ElasticConfig {
            discovery: Some(HostDiscovery::Script("d".into())),
            min_np: 2,
            max_np: Some(8),
            initial_np: 4,
            slots_per_host: 4,
            elastic_timeout: Duration::from_secs(30),
            replacement_wait: Duration::ZERO,
            reset_limit: Some(5),
            hot_spares: 2,
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
    assert_eq!(
        e.discovery,
        Some(HostDiscovery::Script(PathBuf::from("env.sh")))
    );
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
    assert_eq!(
        e.discovery,
        Some(HostDiscovery::Script(PathBuf::from("cli.sh")))
    );
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
    c.options.set("host-discovery-script", "d");
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
    assert_eq!(
        elastic(&c).discovery,
        Some(HostDiscovery::Script(PathBuf::from("d")))
    );
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
    let (_, why) = invalid_option(run(
        "--host-discovery-script d -np 1 ./t",
        &[("ELASTICRUN_BLACKLIST_COOLDOWN_RANGE", "-1,5")],
        "",
    ));
    assert!(why.contains("-1 is not a positive number"), "{why}");
    for bad in ["10", "1,2,3", "a,b", ""] {
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
        "--hot-spares 1",
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

#[test]
fn elasticrun_serve_refuses_hot_spares_and_restarts() {
    let serve = |args: &str| {
        let mut c = cli(args);
        c.serve = true;
        c.command.clear();
        resolve(&c, &env(&[]), &parse("").unwrap())
    };
    let (option, why) = invalid_option(serve("--min-np 2 --hot-spares 1 ./t"));
    assert_eq!(option, "hot-spares");
    assert!(
        why.contains("elasticrun serve") && why.contains("on the command line"),
        "{why}"
    );
    assert!(serve("--min-np 2 --hot-spares 0 ./t").is_ok());
    let (option, why) = invalid_option(serve("--min-np 2 --max-restarts 2 ./t"));
    assert_eq!(option, "max-restarts");
    assert!(why.contains("restartPolicy"), "{why}");
    assert!(serve("--min-np 2 --max-restarts 0 ./t").is_ok());
}

#[test]
fn an_elastic_job_runs_by_restarts_with_max_restarts_but_keeps_no_spares() {
    let c = run(
        "--host-discovery-script d --min-np 2 --max-np 4 --max-restarts 3 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!((c.max_restarts, elastic(&c).max_np), (3, Some(4)));
    let (option, why) = invalid_option(run(
        "--host-discovery-script d --min-np 2 --hot-spares 1 --max-restarts 3 ./t",
        &[],
        "",
    ));
    assert_eq!(option, "max-restarts");
    assert!(why.contains("keeps no hot spares"), "{why}");
    assert!(why.contains("command line"), "{why}");
}

#[test]
fn straggler_options_from_every_layer_and_their_refusals() {
    use crate::straggler::{StragglerAction, StragglerPolicy};
    let c = run("-np 2 ./t", &[], "").unwrap();
    assert_eq!(c.stragglers, StragglerPolicy::default());
    let c = run(
        "--host-discovery-script d -np 2 --straggler-factor 1.5 --straggler-steps 20 \
         --straggler-action replace ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(
        c.stragglers,
        StragglerPolicy {
            factor: 1.5,
            steps: 20,
            action: StragglerAction::Replace
        }
    );
    let env = [("ELASTICRUN_STRAGGLER_STEPS", "7")];
    let file = "stragglers:\n  factor: 3\n  action: Replace\n";
    let c = run("--host-discovery-script d -np 2 ./t", &env, file).unwrap();
    assert_eq!((c.stragglers.factor, c.stragglers.steps), (3.0, 7));
    assert_eq!(c.stragglers.action, StragglerAction::Replace);
    let (option, why) = invalid_option(run("-np 2 --straggler-action replace ./t", &[], ""));
    assert_eq!(option, "straggler-action");
    assert!(why.contains("only an elastic job"), "{why}");
    let (option, why) = invalid_option(run("-np 2 --straggler-action kill ./t", &[], ""));
    assert_eq!(option, "straggler-action");
    assert!(why.contains("\"kill\" is not a straggler action"), "{why}");
    let (option, why) = invalid_option(run("-np 2 --straggler-factor 1 ./t", &[], ""));
    assert_eq!(option, "straggler-factor");
    assert!(why.contains("not above 1"), "{why}");
    let (option, _) = invalid_option(run("-np 2 --straggler-steps 0 ./t", &[], ""));
    assert_eq!(option, "straggler-steps");
}
