//! What `elasticrun` tells a worker, read once at `init`: the variables
//! named in [`control::env`].

use std::net::SocketAddr;
use std::time::Duration;

use control::Secret;
// Re-exported for the tests that check whether this process was launched.
pub(crate) use control::env::COORDINATOR;
use control::env::{
    CONNECTIONS, COORDINATOR_TIMEOUT, Connections, DATA_ALL_INTERFACES, ELASTIC_TIMEOUT,
    GLOO_TIMEOUT_SECONDS, HOST, HOT_SPARES, LOG_LEVEL, LogLevel, SECRET, SHARED_MEMORY, SLOT,
    SPIN_US, START_TIMEOUT, THREAD_AFFINITY, TRANSPORT, TransportKind, parse_cpu_list,
};

use crate::InitError;

/// Where this worker's coordinator is and who this worker is.
#[derive(Debug)]
pub(crate) struct Launch {
    pub(crate) coordinator: SocketAddr,
    pub(crate) secret: Secret,
    pub(crate) host: String,
    pub(crate) slot: u32,
    pub(crate) start_timeout: Duration,
    /// `Some` in an elastic job.
    pub(crate) elastic_timeout: Option<Duration>,
    /// The job keeps hot spares ([`control::env::HOT_SPARES`]).
    pub(crate) hot_spares: bool,
    /// How long to keep reconnecting after the coordinator connection drops.
    pub(crate) coordinator_timeout: Duration,
    /// Longest wait of one data-plane send or receive.
    pub(crate) data_timeout: Duration,
    /// The CPU the engine's thread is pinned to (`None`: not pinned).
    pub(crate) engine_cpu: Option<usize>,
    /// The job may span hosts ([`control::env::DATA_ALL_INTERFACES`]).
    pub(crate) data_all_interfaces: bool,
    /// The data plane to bind ([`control::env::TRANSPORT`]).
    pub(crate) transport: TransportKind,
    /// Shared memory with the ranks of this host, on the TCP data plane
    /// ([`control::env::SHARED_MEMORY`]; default on).
    pub(crate) shared_memory: bool,
    /// When the TCP and TLS data planes connect to the peers
    /// ([`control::env::CONNECTIONS`]; default on demand).
    pub(crate) connections: Connections,
    /// How long to busy-wait before sleeping ([`control::env::SPIN_US`];
    /// `None`: the defaults).
    pub(crate) spin: Option<Duration>,
}

impl Launch {
    /// TLS to the coordinator, which a job on an encrypted data plane (QUIC
    /// or TLS) uses for its control connections too.
    pub(crate) fn control_tls(&self) -> Result<Option<control::tls::ControlConnector>, InitError> {
        if !self.transport.encrypted() {
            return Ok(None);
        }
        control::tls::ControlConnector::new(&self.secret)
            .map(Some)
            .map_err(|e| InitError::Control {
                what: "setting up TLS with the coordinator",
                why: e.to_string(),
            })
    }
}

/// How long a worker keeps reconnecting when `elasticrun` did not say
/// (`--coordinator-timeout`'s default).
const DEFAULT_COORDINATOR_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one data-plane operation may wait when `elasticrun` did not say
/// (`--gloo-timeout-seconds`'s default, the TCP transport's own).
fn default_data_timeout() -> Duration {
    collectives::TcpConfig::default().io_timeout
}

/// A positive number of seconds that fits a [`Duration`].
fn seconds(s: &str) -> Option<Duration> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .and_then(|v| Duration::try_from_secs_f64(v).ok())
}

/// A switch's value: `1`, `true`, `yes`, `on` or empty is on; `0`, `false`,
/// `no`, `off` is off (any case, spaces around allowed); anything else `None`.
fn switch(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" | "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// [`SPIN_US`] as read by `get`: `None` when unset or empty.
fn spin(get: &impl Fn(&str) -> Option<String>) -> Result<Option<Duration>, InitError> {
    let Some(v) = get(SPIN_US).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    match v.trim().parse::<u32>() {
        Ok(us) => Ok(Some(Duration::from_micros(us.into()))),
        Err(_) => Err(InitError::Environment {
            var: SPIN_US,
            why: format!("is {v:?}, not a whole number of microseconds"),
        }),
    }
}

/// [`control::env::LOG_LEVEL`] as read by `get`: `warning` when unset or
/// empty. Read apart from [`read`] (and before it), so that a worker that
/// joins through etcd, or runs alone, logs at the level it is given too.
pub(crate) fn log_level(get: impl Fn(&str) -> Option<String>) -> Result<LogLevel, InitError> {
    match get(LOG_LEVEL).filter(|v| !v.trim().is_empty()) {
        None => Ok(LogLevel::Warning),
        Some(v) => LogLevel::parse(&v).ok_or_else(|| InitError::Environment {
            var: LOG_LEVEL,
            why: format!("is {v:?}, none of: {}", LogLevel::NAMES),
        }),
    }
}

/// `None` when the program was not started by elasticrun.
pub(crate) fn read(get: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, InitError> {
    let Some(coordinator) = get(COORDINATOR) else {
        return Ok(None);
    };
    let bad = |var: &'static str, why: &str| InitError::Environment {
        var,
        why: why.to_owned(),
    };
    let need = |var: &'static str| get(var).ok_or_else(|| bad(var, "is not set"));
    let coordinator = coordinator
        .parse()
        .map_err(|_| bad(COORDINATOR, "is not an ip:port address"))?;
    let secret = Secret::from_hex(&need(SECRET)?).map_err(|e| bad(SECRET, &e.to_string()))?;
    let host = need(HOST)?;
    let slot = need(SLOT)?
        .parse()
        .map_err(|_| bad(SLOT, "is not a slot number"))?;
    let start_timeout = match get(START_TIMEOUT) {
        Some(s) => {
            seconds(&s).ok_or_else(|| bad(START_TIMEOUT, "is not a positive number of seconds"))?
        }
        None => Duration::from_secs(30),
    };
    let elastic_timeout = match get(ELASTIC_TIMEOUT) {
        Some(s) => Some(
            seconds(&s)
                .ok_or_else(|| bad(ELASTIC_TIMEOUT, "is not a positive number of seconds"))?,
        ),
        None => None,
    };
    let hot_spares = get(HOT_SPARES).is_some_and(|n| n.trim() != "0");
    let coordinator_timeout = match get(COORDINATOR_TIMEOUT) {
        Some(s) => seconds(&s)
            .ok_or_else(|| bad(COORDINATOR_TIMEOUT, "is not a positive number of seconds"))?,
        None => DEFAULT_COORDINATOR_TIMEOUT,
    };
    let data_timeout = match get(GLOO_TIMEOUT_SECONDS) {
        Some(s) => seconds(&s)
            .ok_or_else(|| bad(GLOO_TIMEOUT_SECONDS, "is not a positive number of seconds"))?,
        None => default_data_timeout(),
    };
    // Empty: not pinned (the launcher sets it empty then).
    let engine_cpu = match get(THREAD_AFFINITY).filter(|l| !l.trim().is_empty()) {
        Some(list) => Some(cpu_of_slot(&list, slot).map_err(|why| bad(THREAD_AFFINITY, &why))?),
        None => None,
    };
    let data_all_interfaces = match get(DATA_ALL_INTERFACES).as_deref() {
        None | Some("" | "0") => false,
        Some("1") => true,
        Some(_) => return Err(bad(DATA_ALL_INTERFACES, "is neither 0 nor 1")),
    };
    let transport = match get(TRANSPORT).filter(|t| !t.trim().is_empty()) {
        None => TransportKind::default(),
        Some(t) => TransportKind::parse(&t).ok_or_else(|| {
            bad(
                TRANSPORT,
                &format!("is {t:?}, none of: {}", TransportKind::NAMES),
            )
        })?,
    };
    let shared_memory = match get(SHARED_MEMORY) {
        None => true,
        Some(v) => switch(&v).ok_or_else(|| {
            bad(
                SHARED_MEMORY,
                &format!("is {v:?}, neither 0 (off) nor 1 (on)"),
            )
        })?,
    };
    let connections = match get(CONNECTIONS).filter(|c| !c.trim().is_empty()) {
        None => Connections::default(),
        Some(c) => Connections::parse(&c).ok_or_else(|| {
            bad(
                CONNECTIONS,
                &format!("is {c:?}, none of: {}", Connections::NAMES),
            )
        })?,
    };
    Ok(Some(Launch {
        coordinator,
        secret,
        host,
        slot,
        start_timeout,
        elastic_timeout,
        hot_spares,
        coordinator_timeout,
        data_timeout,
        engine_cpu,
        data_all_interfaces,
        transport,
        shared_memory,
        connections,
        spin: spin(&get)?,
    }))
}

/// The CPU of `slot` in a [`THREAD_AFFINITY`] list: its entry `slot`, as
/// Horovod's list holds one CPU per local rank.
fn cpu_of_slot(list: &str, slot: u32) -> Result<usize, String> {
    let cpus = parse_cpu_list(list).map_err(|e| e.to_string())?;
    let at = usize::try_from(slot).unwrap_or(usize::MAX);
    cpus.get(at).copied().ok_or_else(|| {
        format!(
            "lists {} CPUs ({list}), none for slot {slot}: give one CPU per slot of the host",
            cpus.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn standalone_without_a_coordinator() {
        assert!(read(env(&[])).unwrap().is_none());
    }

    #[test]
    fn launched() {
        let k = Secret::generate().unwrap().to_hex();
        let l = read(env(&[
            (COORDINATOR, "127.0.0.1:4000"),
            (SECRET, &k),
            (HOST, "a"),
            (SLOT, "3"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            (l.coordinator.port(), l.host.as_str(), l.slot),
            (4000, "a", 3)
        );
        assert_eq!(l.start_timeout, Duration::from_secs(30));
        assert_eq!(l.elastic_timeout, None);
        let l = read(env(&[
            (COORDINATOR, "127.0.0.1:4000"),
            (SECRET, &k),
            (HOST, "a"),
            (SLOT, "0"),
            (ELASTIC_TIMEOUT, "600"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(l.elastic_timeout, Some(Duration::from_secs(600)));
        assert_eq!(l.coordinator_timeout, DEFAULT_COORDINATOR_TIMEOUT);
        assert!(!l.hot_spares);
        // With hot spares the elastic timeout is kept (it bounds rejoins);
        // only the first placement's wait is the job's to end.
        let l = read(env(&[
            (COORDINATOR, "127.0.0.1:4000"),
            (SECRET, &k),
            (HOST, "a"),
            (SLOT, "0"),
            (ELASTIC_TIMEOUT, "600"),
            (HOT_SPARES, "1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(l.elastic_timeout, Some(Duration::from_secs(600)));
        assert!(l.hot_spares);
        let with = |v: &str| {
            read(env(&[
                (COORDINATOR, "127.0.0.1:4000"),
                (SECRET, &k),
                (HOST, "a"),
                (SLOT, "0"),
                (COORDINATOR_TIMEOUT, v),
            ]))
        };
        let l = with("2.5").unwrap().unwrap();
        assert_eq!(l.coordinator_timeout, Duration::from_millis(2500));
        for bad in ["0", "-1", "soon"] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("ELASTICRUN_COORDINATOR_TIMEOUT"), "{e}");
        }
    }

    /// A launch environment of slot 0 with `extra` besides, as read.
    fn with(extra: &[(&str, &str)]) -> Result<Option<Launch>, InitError> {
        let k = Secret::generate().unwrap().to_hex();
        let mut pairs = vec![
            (COORDINATOR, "127.0.0.1:4000"),
            (SECRET, k.as_str()),
            (HOST, "a"),
            (SLOT, "0"),
        ];
        pairs.extend_from_slice(extra);
        read(env(&pairs))
    }

    #[test]
    fn the_log_level_is_read_or_warning() {
        let with = |v: Option<&str>| {
            let v = v.map(str::to_owned);
            log_level(move |k| (k == LOG_LEVEL).then(|| v.clone()).flatten())
        };
        assert_eq!(with(None).ok(), Some(LogLevel::Warning));
        assert_eq!(with(Some(" ")).ok(), Some(LogLevel::Warning));
        assert_eq!(with(Some("debug")).ok(), Some(LogLevel::Debug));
        assert_eq!(with(Some("ERROR")).ok(), Some(LogLevel::Error));
        let e = with(Some("loud")).err().map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains(LOG_LEVEL) && e.contains("\"loud\""), "{e}");
    }

    #[test]
    fn spin_is_whole_microseconds_or_unset() {
        assert_eq!(with(&[]).unwrap().unwrap().spin, None);
        assert_eq!(with(&[(SPIN_US, " ")]).unwrap().unwrap().spin, None);
        let l = with(&[(SPIN_US, "0")]).unwrap().unwrap();
        assert_eq!(l.spin, Some(Duration::ZERO));
        let l = with(&[(SPIN_US, "250")]).unwrap().unwrap();
        assert_eq!(l.spin, Some(Duration::from_micros(250)));
        for bad in ["-1", "1.5", "soon"] {
            let e = with(&[(SPIN_US, bad)]).unwrap_err();
            assert!(e.to_string().contains(SPIN_US), "{e}");
        }
    }

    #[test]
    fn data_timeout_and_engine_cpu() {
        let k = Secret::generate().unwrap().to_hex();
        let with = |slot: &str, extra: &[(&str, &str)]| {
            let mut pairs = vec![
                (COORDINATOR, "127.0.0.1:4000"),
                (SECRET, k.as_str()),
                (HOST, "a"),
                (SLOT, slot),
            ];
            pairs.extend_from_slice(extra);
            read(env(&pairs))
        };
        let l = with("0", &[]).unwrap().unwrap();
        assert_eq!(l.data_timeout, Duration::from_secs(60));
        assert_eq!(l.engine_cpu, None);
        let l = with("0", &[(THREAD_AFFINITY, "")]).unwrap().unwrap();
        assert_eq!(l.engine_cpu, None, "empty: not pinned");
        let l = with("0", &[(GLOO_TIMEOUT_SECONDS, "2.5")])
            .unwrap()
            .unwrap();
        assert_eq!(l.data_timeout, Duration::from_millis(2500));
        for bad in ["0", "-3", "never"] {
            let e = with("0", &[(GLOO_TIMEOUT_SECONDS, bad)]).unwrap_err();
            assert!(e.to_string().contains(GLOO_TIMEOUT_SECONDS), "{e}");
        }
        // Slot N takes the Nth CPU.
        for (slot, cpu) in [("0", 5), ("1", 3), ("2", 1)] {
            let l = with(slot, &[(THREAD_AFFINITY, "5,3,1")]).unwrap().unwrap();
            assert_eq!(l.engine_cpu, Some(cpu), "slot {slot}");
        }
        let e = with("3", &[(THREAD_AFFINITY, "5,3,1")])
            .unwrap_err()
            .to_string();
        assert!(e.contains(THREAD_AFFINITY) && e.contains("slot 3"), "{e}");
        let e = with("0", &[(THREAD_AFFINITY, "one")])
            .unwrap_err()
            .to_string();
        assert!(e.contains(THREAD_AFFINITY) && e.contains("\"one\""), "{e}");
    }

    #[test]
    fn shared_memory_is_on_unless_turned_off() {
        assert!(with(&[]).unwrap().unwrap().shared_memory, "unset: on");
        for on in ["1", "true", "YES", "on", "", " 1 "] {
            let l = with(&[(SHARED_MEMORY, on)]).unwrap().unwrap();
            assert!(l.shared_memory, "{on:?}");
        }
        for off in ["0", "false", "No", "OFF", " 0"] {
            let l = with(&[(SHARED_MEMORY, off)]).unwrap().unwrap();
            assert!(!l.shared_memory, "{off:?}");
        }
        for bad in ["2", "maybe", "-1", "0,1"] {
            let e = with(&[(SHARED_MEMORY, bad)]).unwrap_err();
            assert!(
                matches!(
                    e,
                    InitError::Environment {
                        var: SHARED_MEMORY,
                        ..
                    }
                ),
                "{bad:?}: {e:?}"
            );
            let text = e.to_string();
            assert!(text.contains(SHARED_MEMORY), "{text}");
            assert!(text.contains(&format!("{bad:?}")), "{text}");
        }
    }

    /// Whatever the variables hold, `read` gives a launch or an error naming
    /// one of them.
    #[test]
    fn any_launch_environment_reads_or_names_the_variable() {
        use testkit::proptest::collection::vec;
        use testkit::proptest::prelude::*;
        use testkit::proptest::sample::select;
        let k = Secret::generate().unwrap().to_hex();
        let values = vec![
            "127.0.0.1:4000".to_owned(),
            "[::1]:1".to_owned(),
            k.clone(),
            k[..10].to_owned(),
            "0".into(),
            "3".into(),
            "1e300".into(),
            "-0".into(),
            "NaN".into(),
            "0.000000001".into(),
            "4294967296".into(),
            "0,1,2".into(),
            "1024".into(),
            String::new(),
        ];
        let value = prop_oneof![3 => select(values), 1 => any::<String>()];
        let names = control::env::ALL.to_vec();
        let valid = [
            (COORDINATOR, "127.0.0.1:4000".to_owned()),
            (SECRET, k.clone()),
            (HOST, "a".to_owned()),
            (SLOT, "1".to_owned()),
        ];
        testkit::check(
            "launch environment",
            vec((select(names), value), 0..6),
            |changes| {
                let mut vars: HashMap<&str, String> = valid.iter().cloned().collect();
                vars.extend(changes);
                if let Err(e) = read(|name| vars.get(name).cloned()) {
                    let text = e.to_string();
                    prop_assert!(control::env::ALL.iter().any(|n| text.contains(n)), "{text}");
                }
                Ok(())
            },
        );
    }

    #[test]
    fn bad_launch_environment_names_the_variable() {
        let e = read(env(&[
            (COORDINATOR, "127.0.0.1:4000"),
            (HOST, "a"),
            (SLOT, "0"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains(SECRET), "{e}");
        let k = Secret::generate().unwrap().to_hex();
        let e = read(env(&[
            (COORDINATOR, "nowhere"),
            (SECRET, &k),
            (HOST, "a"),
            (SLOT, "0"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains(COORDINATOR), "{e}");
        let e = read(env(&[
            (COORDINATOR, "127.0.0.1:1"),
            (SECRET, &k),
            (HOST, "a"),
            (SLOT, "x"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains(SLOT), "{e}");
    }
}
