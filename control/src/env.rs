//! The launch environment: the variables `elasticrun` sets for every worker it
//! starts, named once here for the launcher that sets them and the worker that
//! reads them (`worker::init`).
//!
//! [`START_TIMEOUT`], [`ELASTIC_TIMEOUT`] and [`COORDINATOR_TIMEOUT`] are also the names under which a
//! user sets `--start-timeout`, `--elastic-timeout` and `--coordinator-timeout` for
//! `elasticrun` itself,
//! so a worker sees the values the job resolved.

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

/// Seconds a worker that lost its coordinator connection keeps trying to
/// reconnect before it gives up and exits (`--coordinator-timeout`).
pub const COORDINATOR_TIMEOUT: &str = "ELASTICRUN_COORDINATOR_TIMEOUT";

/// Every variable the launcher sets for a worker.
pub const ALL: [&str; 7] = [
    COORDINATOR,
    SECRET,
    HOST,
    SLOT,
    START_TIMEOUT,
    ELASTIC_TIMEOUT,
    COORDINATOR_TIMEOUT,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_has_the_prefix_and_is_distinct() {
        for (i, name) in ALL.iter().enumerate() {
            assert!(name.starts_with(PREFIX), "{name}");
            assert!(!ALL[..i].contains(name), "{name} twice");
        }
    }
}
