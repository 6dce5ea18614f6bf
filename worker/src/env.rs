//! What `elasticrun` tells a worker, read once at `init`: the variables
//! named in [`control::env`].

use std::net::SocketAddr;
use std::time::Duration;

use control::Secret;
// Re-exported for the tests that check whether this process was launched.
pub(crate) use control::env::COORDINATOR;
use control::env::{ELASTIC_TIMEOUT, HOST, SECRET, SLOT, START_TIMEOUT};

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
}

impl Launch {
    /// How long to wait for an assignment after registering: an elastic job
    /// may wait up to its elastic timeout for enough workers.
    pub(crate) fn assignment_wait(&self) -> Duration {
        self.start_timeout + self.elastic_timeout.unwrap_or_default()
    }
}

fn seconds(s: &str) -> Option<Duration> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(Duration::from_secs_f64)
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
    Ok(Some(Launch {
        coordinator,
        secret,
        host,
        slot,
        start_timeout,
        elastic_timeout,
    }))
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
        assert_eq!(l.assignment_wait(), Duration::from_secs(30));
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
        assert_eq!(l.assignment_wait(), Duration::from_secs(630));
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
