//! Resolving horovodrun's library options (`--gloo-timeout-seconds`,
//! `--thread-affinity`, `--tcp`), elasticrun's (`--transport`,
//! `--no-shared-memory`, `--heartbeat-timeout`), `--verbose` and
//! `--network-interfaces` from every layer.

use std::collections::HashMap;
use std::time::Duration;

use super::cli::Cli;
use super::file::parse;
use super::*;

fn run(c: &str, e: &[(&str, &str)], f: &str) -> Result<JobConfig, ConfigError> {
    let cli = Cli::parse_args(
        std::iter::once("elasticrun".to_owned()).chain(c.split_whitespace().map(str::to_owned)),
    )
    .unwrap();
    let vars: HashMap<String, String> = e
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    resolve(&cli, &|k| vars.get(k).cloned(), &parse(f).unwrap())
}

#[test]
fn gloo_timeout_seconds_from_each_layer() {
    let c = run("-np 2 ./t", &[], "").unwrap();
    assert_eq!(c.data_timeout, Duration::from_secs(60));
    let c = run("--gloo-timeout-seconds 2.5 -np 2 ./t", &[], "").unwrap();
    assert_eq!(c.data_timeout, Duration::from_millis(2500));
    let horovods = [("HOROVOD_GLOO_TIMEOUT_SECONDS", "1800")];
    let c = run("-np 2 ./t", &horovods, "").unwrap();
    assert_eq!(c.data_timeout, Duration::from_secs(1800));
    let ours = [
        ("HOROVOD_GLOO_TIMEOUT_SECONDS", "1800"),
        ("ELASTICRUN_GLOO_TIMEOUT_SECONDS", "7"),
    ];
    assert_eq!(
        run("-np 2 ./t", &ours, "").unwrap().data_timeout,
        Duration::from_secs(7)
    );
    let file = "library_options:\n  gloo_timeout_seconds: 90\n";
    assert_eq!(
        run("-np 2 ./t", &[], file).unwrap().data_timeout,
        Duration::from_secs(90)
    );
    let e = run("--gloo-timeout-seconds 0 -np 2 ./t", &[], "").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--gloo-timeout-seconds: 0 is not a positive number"
    );
    let e = run("-np 2 ./t", &[("HOROVOD_GLOO_TIMEOUT_SECONDS", "soon")], "").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("HOROVOD_GLOO_TIMEOUT_SECONDS=\"soon\""),
        "{e}"
    );
}

#[test]
fn thread_affinity_from_each_layer() {
    assert_eq!(run("-np 2 ./t", &[], "").unwrap().engine_cpus, None);
    let c = run("--thread-affinity 3,1 -np 2 ./t", &[], "").unwrap();
    assert_eq!(c.engine_cpus, Some(vec![3, 1]));
    let c = run("-np 2 ./t", &[("HOROVOD_THREAD_AFFINITY", "53,71")], "").unwrap();
    assert_eq!(c.engine_cpus, Some(vec![53, 71]));
    let c = run(
        "-np 2 ./t",
        &[],
        "library_options:\n  thread_affinity: [4, 5]\n",
    )
    .unwrap();
    assert_eq!(c.engine_cpus, Some(vec![4, 5]));
    let e = run("-np 2 ./t", &[("ELASTICRUN_THREAD_AFFINITY", "0;1")], "").unwrap_err();
    assert!(
        e.to_string().contains("ELASTICRUN_THREAD_AFFINITY") && e.to_string().contains("0;1"),
        "{e}"
    );
    let e = run(
        "-np 2 ./t",
        &[],
        "library_options:\n  thread_affinity: [1, 4096]\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with("--thread-affinity:") && e.to_string().contains("4096"),
        "{e}"
    );
    let e = run(
        "-np 2 ./t",
        &[],
        "library_options:\n  thread_affinity: []\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("no CPU"), "{e}");
}

#[test]
fn tcp_gloo_and_verbose() {
    let c = run("-np 2 ./t", &[], "").unwrap();
    assert!(!c.tcp_only);
    assert_eq!(c.log_level, LogLevel::Warning);
    let c = run("--tcp --gloo --verbose -np 2 ./t", &[], "").unwrap();
    assert!(c.tcp_only);
    assert_eq!(c.log_level, LogLevel::Debug);
    assert!(
        run("-np 2 ./t", &[("ELASTICRUN_TCP", "1")], "")
            .unwrap()
            .tcp_only
    );
    assert!(
        run("-np 2 ./t", &[], "library_options:\n  tcp: true\n")
            .unwrap()
            .tcp_only
    );
    // --log-level wins over --verbose.
    let c = run("--verbose --log-level error -np 2 ./t", &[], "").unwrap();
    assert_eq!(c.log_level, LogLevel::Error);
}

#[test]
fn one_network_interface() {
    let c = run("--network-interfaces eth0 -np 2 ./t", &[], "").unwrap();
    assert_eq!(c.network_interface.as_deref(), Some("eth0"));
    let e = run("--network-interfaces eth0,eth1 -np 2 ./t", &[], "").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--network-interface: \"eth0,eth1\" names more than one"),
        "{e}"
    );
}

#[test]
fn messages_spell_np_as_users_type_it() {
    let e = run("-np 0 ./t", &[], "").unwrap_err();
    assert_eq!(e.to_string(), "-np: at least one process is needed");
}

/// Found by the property tests (`props.rs`): these panicked.
#[test]
fn huge_numbers_are_refused_not_a_panic() {
    let e = run("--cycle-time-ms 1e300 -np 2 ./t", &[], "").unwrap_err();
    assert!(e.to_string().starts_with("--cycle-time-ms: "), "{e}");
    assert!(e.to_string().contains("too long"), "{e}");
    let e = run("-np 2 ./t", &[], "params:\n  cycle_time_ms: 1e300\n").unwrap_err();
    assert!(e.to_string().contains("too long"), "{e}");
}

#[test]
fn transport_from_each_layer_and_refused_beside_tcp() {
    use control::env::TransportKind::{Quic, Tcp, Tls};
    assert_eq!(run("-np 2 ./t", &[], "").unwrap().transport, Tcp);
    assert_eq!(
        run("--transport quic -np 2 ./t", &[], "")
            .unwrap()
            .transport,
        Quic
    );
    let env = [("ELASTICRUN_TRANSPORT", "quic")];
    assert_eq!(run("-np 2 ./t", &env, "").unwrap().transport, Quic);
    let file = "library_options:\n  transport: quic\n";
    assert_eq!(run("-np 2 ./t", &[], file).unwrap().transport, Quic);
    let tls = run("--transport TLS -np 2 ./t", &[], "").unwrap();
    assert_eq!(tls.transport, Tls);
    let tls_file = "library_options:\n  transport: tls\n";
    assert_eq!(run("-np 2 ./t", &[], tls_file).unwrap().transport, Tls);
    // The command line wins over the environment and the file.
    assert_eq!(
        run("--transport tcp -np 2 ./t", &env, file)
            .unwrap()
            .transport,
        Tcp
    );
    let e = run("-np 2 ./t", &[("ELASTICRUN_TRANSPORT", "udp")], "").unwrap_err();
    assert!(e.to_string().contains("\"udp\" is not a data plane"), "{e}");
    for asked in ["quic", "tls"] {
        let e = run(&format!("--tcp --transport {asked} -np 2 ./t"), &[], "").unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "--tcp keeps the data plane on plain TCP, and the {asked} data plane was asked for"
            )),
            "{e}"
        );
    }
}

#[test]
fn shared_memory_from_each_layer() {
    assert!(run("-np 2 ./t", &[], "").unwrap().shared_memory);
    assert!(
        !run("--no-shared-memory -np 2 ./t", &[], "")
            .unwrap()
            .shared_memory
    );
    let env = [("ELASTICRUN_NO_SHARED_MEMORY", "1")];
    assert!(!run("-np 2 ./t", &env, "").unwrap().shared_memory);
    let env_on = [("ELASTICRUN_NO_SHARED_MEMORY", "false")];
    assert!(run("-np 2 ./t", &env_on, "").unwrap().shared_memory);
    let file = "library_options:\n  shared_memory: false\n";
    assert!(!run("-np 2 ./t", &[], file).unwrap().shared_memory);
    let file_on = "library_options:\n  shared_memory: true\n";
    assert!(run("-np 2 ./t", &[], file_on).unwrap().shared_memory);
    // The command line wins over the environment, which wins over the file.
    assert!(
        run("--shared-memory -np 2 ./t", &env, file)
            .unwrap()
            .shared_memory
    );
    assert!(
        !run("--no-shared-memory -np 2 ./t", &env_on, file_on)
            .unwrap()
            .shared_memory
    );
    assert!(!run("-np 2 ./t", &env, file_on).unwrap().shared_memory);
    assert!(run("-np 2 ./t", &env_on, file).unwrap().shared_memory);
    // Of the switch and its negation, the last one given wins.
    let c = run("--no-shared-memory --shared-memory -np 2 ./t", &[], "").unwrap();
    assert!(c.shared_memory);
    let c = run("--shared-memory --no-shared-memory -np 2 ./t", &[], "").unwrap();
    assert!(!c.shared_memory);
    let e = run("-np 2 ./t", &[("ELASTICRUN_NO_SHARED_MEMORY", "maybe")], "").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("ELASTICRUN_NO_SHARED_MEMORY=\"maybe\""),
        "{e}"
    );
    // QUIC never uses shared memory, so turning it off there is no error.
    let c = run("--transport quic --no-shared-memory -np 2 ./t", &[], "").unwrap();
    assert_eq!(c.transport, control::env::TransportKind::Quic);
    assert!(!c.shared_memory);
}

#[test]
fn connections_from_each_layer_and_garbage_refused() {
    use control::env::Connections::{All, OnDemand};
    let of =
        |args: &str, env: &[(&str, &str)], file: &str| run(args, env, file).unwrap().connections;
    assert_eq!(of("-np 2 ./t", &[], ""), OnDemand);
    assert_eq!(of("--connections all -np 2 ./t", &[], ""), All);
    let env = [("ELASTICRUN_CONNECTIONS", "All")];
    assert_eq!(of("-np 2 ./t", &env, ""), All);
    let file = "library_options:\n  connections: all\n";
    assert_eq!(of("-np 2 ./t", &[], file), All);
    // The command line wins over the environment, which wins over the file.
    assert_eq!(
        of("--connections on-demand -np 2 ./t", &env, file),
        OnDemand
    );
    let env_od = [("ELASTICRUN_CONNECTIONS", "on_demand")];
    assert_eq!(of("-np 2 ./t", &env_od, file), OnDemand);
    let argv = "elasticrun --connections lazy -np 2 ./t".split(' ');
    let e = Cli::parse_args(argv.map(str::to_owned)).unwrap_err();
    assert!(
        e.to_string()
            .contains("\"lazy\" is not a way of connecting"),
        "{e}"
    );
    let e = parse("library_options:\n  connections: some\n").unwrap_err();
    assert!(e.to_string().contains("not a way of connecting"), "{e}");
}

#[test]
fn heartbeat_timeout_from_each_layer_and_not_below_two_beats() {
    let c = run("-np 2 ./t", &[], "").unwrap();
    assert_eq!(c.heartbeat_timeout, Duration::from_secs(15));
    let c = run("--heartbeat-timeout 4.5 -np 2 ./t", &[], "").unwrap();
    assert_eq!(c.heartbeat_timeout, Duration::from_millis(4500));
    let env = [("ELASTICRUN_HEARTBEAT_TIMEOUT", "6")];
    let file = "launch:\n  heartbeat_timeout: 8\n";
    assert_eq!(
        run("-np 2 ./t", &env, file).unwrap().heartbeat_timeout,
        Duration::from_secs(6)
    );
    let c = run("-np 2 ./t", &[], file).unwrap();
    assert_eq!(c.heartbeat_timeout, Duration::from_secs(8));
    for (bad, says) in [
        (
            "1.5",
            "too short: workers send a heartbeat every second, so at least 2",
        ),
        ("0", "not a positive number"),
        ("-3", "not a positive number"),
    ] {
        let e = run(&format!("--heartbeat-timeout {bad} -np 2 ./t"), &[], "").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("heartbeat-timeout") && text.contains(says),
            "{bad}: {text}"
        );
    }
}
