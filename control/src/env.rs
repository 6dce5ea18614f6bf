//! The launch environment: the variables `elasticrun` sets for every worker it
//! starts, named once here for the launcher that sets them and the worker that
//! reads them (`worker::init`).
//!
//! [`START_TIMEOUT`], [`ELASTIC_TIMEOUT`], [`COORDINATOR_TIMEOUT`],
//! [`GLOO_TIMEOUT_SECONDS`] and [`THREAD_AFFINITY`] are also the names under
//! which a user sets `--start-timeout`, `--elastic-timeout`,
//! `--coordinator-timeout`, `--gloo-timeout-seconds` and `--thread-affinity`
//! for `elasticrun` itself, so a worker sees the values the job resolved.

/// Every name elasticrun sets or reads starts with this. The launcher never
/// forwards the caller's own `ELASTICRUN_*` variables to a remote host.
pub const PREFIX: &str = "ELASTICRUN_";
/// `ip:port` of the coordinator, as the worker's host reaches it. A process
/// without it runs alone, as a world of one.
pub const COORDINATOR: &str = "ELASTICRUN_COORDINATOR";
/// The job's secret in hex (see [`crate::Secret`]). Set in the environment,
/// never on a command line; ssh hands it over through standard input.
pub const SECRET: &str = "ELASTICRUN_SECRET";
/// The host name the worker was started for (as the job's host list says it).
pub const HOST: &str = "ELASTICRUN_HOST";
/// The slot on that host, from 0.
pub const SLOT: &str = "ELASTICRUN_SLOT";
/// Seconds the worker may take to start and register (`--start-timeout`).
pub const START_TIMEOUT: &str = "ELASTICRUN_START_TIMEOUT";
/// Elastic jobs only: seconds the coordinator may wait for enough workers
/// (`--elastic-timeout`).
pub const ELASTIC_TIMEOUT: &str = "ELASTICRUN_ELASTIC_TIMEOUT";
/// Elastic jobs with hot spares only: how many (`--hot-spares`). A worker
/// of such a job waits for its first placement for as long as the job
/// keeps it (a spare may wait for hours), not only the elastic timeout.
pub const HOT_SPARES: &str = "ELASTICRUN_HOT_SPARES";

/// Seconds a worker that lost its coordinator connection keeps trying to
/// reconnect before it gives up and exits (`--coordinator-timeout`).
pub const COORDINATOR_TIMEOUT: &str = "ELASTICRUN_COORDINATOR_TIMEOUT";

/// Seconds one data-plane operation (a send or a receive between two ranks)
/// may wait before the peer counts as unresponsive (`--gloo-timeout-seconds`).
pub const GLOO_TIMEOUT_SECONDS: &str = "ELASTICRUN_GLOO_TIMEOUT_SECONDS";

/// The CPUs the workers' engine threads are pinned to, comma-separated, one
/// per slot of a host: the worker of slot N takes the Nth
/// (`--thread-affinity`). Unset: not pinned.
pub const THREAD_AFFINITY: &str = "ELASTICRUN_THREAD_AFFINITY";

/// `1` when the job may span hosts: a worker that reaches its coordinator
/// over loopback then listens on every interface, so that remote peers can
/// reach it at the routable address the coordinator gives them in its place.
/// `0` or unset: it listens where it reaches the coordinator from.
pub const DATA_ALL_INTERFACES: &str = "ELASTICRUN_DATA_ALL_INTERFACES";

/// The data plane the worker binds: `tcp` (unset or empty: the default),
/// `quic` or `tls` (`--transport`). Every rank of a job must use the same one.
pub const TRANSPORT: &str = "ELASTICRUN_TRANSPORT";

/// `0` turns shared memory between ranks of one host off: they keep to their
/// TCP connections (`--no-shared-memory`). `1` or unset: on. Only the TCP
/// data plane uses shared memory; with [`TRANSPORT`] `quic` or `tls` every
/// peer is reached over its encrypted connection whatever this says.
pub const SHARED_MEMORY: &str = "ELASTICRUN_SHARED_MEMORY";

/// When a worker's data plane connects to its peers (`--connections`):
/// `on-demand` (or unset) connects a pair when a collective first sends
/// between them; `all` connects every pair before a generation starts (the
/// full mesh). Every data plane reads it (TCP, TLS and QUIC).
pub const CONNECTIONS: &str = "ELASTICRUN_CONNECTIONS";

/// When a data plane's connections are made ([`CONNECTIONS`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Connections {
    /// Every pair, before the generation starts.
    All,
    /// A pair when a collective first sends between them.
    #[default]
    OnDemand,
}

impl Connections {
    pub const NAMES: &'static str = "all, on-demand";

    pub fn name(self) -> &'static str {
        match self {
            Connections::All => "all",
            Connections::OnDemand => "on-demand",
        }
    }

    /// `all` or `on-demand` (`on_demand` too), any case, spaces around
    /// allowed.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Some(Connections::All),
            "on-demand" | "on_demand" => Some(Connections::OnDemand),
            _ => None,
        }
    }
}

/// Microseconds a worker may busy-wait (yield and look again) before it
/// sleeps: its shared-memory links waiting for a peer, its engine gathering
/// a burst of submissions. Unset: 100 µs for the links and 50 µs for the
/// engine, which pay where a core is free; `0`: sleep at once, for programs
/// whose own threads keep every core busy (the Python package's default).
pub const SPIN_US: &str = "ELASTICRUN_SPIN_US";

/// The level of the worker runtime's own log lines on standard error
/// (`--log-level`: `trace`, `debug`, `info`, `warning`, `error`; unset:
/// `warning`). A program that sets up its own `tracing` subscriber decides
/// for itself.
pub const LOG_LEVEL: &str = "ELASTICRUN_LOG_LEVEL";

/// How much elasticrun and its workers log (`--log-level`, [`LOG_LEVEL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warning,
    Error,
}

impl LogLevel {
    /// The names [`LogLevel::parse`] reads, as error messages list them.
    pub const NAMES: &'static str = "trace, debug, info, warning, error";

    /// `trace`, `debug`, `info`, `warning` (or `warn`), `error` (or `fatal`,
    /// Horovod's highest), any case, spaces around allowed.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trace" => Some(LogLevel::Trace),
            "debug" => Some(LogLevel::Debug),
            "info" => Some(LogLevel::Info),
            "warning" | "warn" => Some(LogLevel::Warning),
            "error" | "fatal" => Some(LogLevel::Error),
            _ => None,
        }
    }

    /// The name [`LogLevel::parse`] reads back, and the `tracing` filter
    /// directive of the level (`warning` aside, which is `warn` there).
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
        }
    }

    /// The `tracing` filter directive that lets this level and above through.
    pub fn filter(self) -> &'static str {
        match self {
            LogLevel::Warning => "warn",
            other => other.name(),
        }
    }
}

/// A data plane between hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// TCP, the handshake proving job membership; payloads in the clear.
    #[default]
    Tcp,
    /// QUIC under mutual TLS 1.3 with the job's certificate authority.
    Quic,
    /// TCP under mutual TLS 1.3 with the job's certificate authority.
    Tls,
}

impl TransportKind {
    pub const NAMES: &'static str = "tcp, quic, tls";

    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Quic => "quic",
            TransportKind::Tls => "tls",
        }
    }

    /// Whether this data plane is encrypted under the job's certificate
    /// authority: then every worker is granted a leaf, and the control
    /// connection runs over TLS too.
    pub fn encrypted(self) -> bool {
        matches!(self, TransportKind::Quic | TransportKind::Tls)
    }

    /// `tcp`, `quic` or `tls`, any case, spaces around allowed.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tcp" => Some(TransportKind::Tcp),
            "quic" => Some(TransportKind::Quic),
            "tls" => Some(TransportKind::Tls),
            _ => None,
        }
    }
}

/// Every variable the launcher sets for a worker.
pub const ALL: [&str; 15] = [
    COORDINATOR,
    SECRET,
    HOST,
    SLOT,
    START_TIMEOUT,
    ELASTIC_TIMEOUT,
    HOT_SPARES,
    COORDINATOR_TIMEOUT,
    GLOO_TIMEOUT_SECONDS,
    THREAD_AFFINITY,
    DATA_ALL_INTERFACES,
    TRANSPORT,
    SHARED_MEMORY,
    CONNECTIONS,
    LOG_LEVEL,
];

/// CPU ids a [`THREAD_AFFINITY`] list may name: Linux's `CPU_SETSIZE`.
pub const MAX_CPUS: usize = 1024;

/// Why a [`THREAD_AFFINITY`] list was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("no CPU listed")]
    Empty,
    #[error("{entry:?} is not a CPU number")]
    NotACpu { entry: String },
    #[error("CPU {cpu} is beyond the {MAX_CPUS} CPU ids a thread can be pinned to")]
    TooHigh { cpu: usize },
}

/// Parses a [`THREAD_AFFINITY`] list: CPU ids separated by commas, spaces
/// allowed around them (`0,2,4`).
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, CpuListError> {
    if s.trim().is_empty() {
        return Err(CpuListError::Empty);
    }
    s.split(',')
        .map(|entry| {
            let entry = entry.trim();
            let cpu: usize = entry.parse().map_err(|_| CpuListError::NotACpu {
                entry: entry.to_owned(),
            })?;
            if cpu >= MAX_CPUS {
                return Err(CpuListError::TooHigh { cpu });
            }
            Ok(cpu)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("3"), Ok(vec![3]));
        assert_eq!(parse_cpu_list(" 0, 2,4 "), Ok(vec![0, 2, 4]));
        assert_eq!(parse_cpu_list(""), Err(CpuListError::Empty));
        for bad in ["a", "1,,2", "-1", "1;2", "0x1"] {
            assert!(
                matches!(parse_cpu_list(bad), Err(CpuListError::NotACpu { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            parse_cpu_list("1023,1024"),
            Err(CpuListError::TooHigh { cpu: 1024 })
        );
    }

    #[test]
    fn log_levels_read_back_their_names() {
        for l in [
            LogLevel::Trace,
            LogLevel::Debug,
            LogLevel::Info,
            LogLevel::Warning,
            LogLevel::Error,
        ] {
            assert_eq!(LogLevel::parse(l.name()), Some(l));
            assert_eq!(LogLevel::parse(&l.name().to_uppercase()), Some(l));
        }
        assert_eq!(LogLevel::parse(" warn "), Some(LogLevel::Warning));
        assert_eq!(LogLevel::parse("FATAL"), Some(LogLevel::Error));
        assert_eq!(LogLevel::Warning.filter(), "warn");
        for bad in ["", "verbose", "5", "warnings"] {
            assert_eq!(LogLevel::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_name_has_the_prefix_and_is_distinct() {
        for (i, name) in ALL.iter().enumerate() {
            assert!(name.starts_with(PREFIX), "{name}");
            assert!(!ALL[..i].contains(name), "{name} twice");
        }
    }
}
