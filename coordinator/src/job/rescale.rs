//! Elastic by restart (`--max-restarts N` with `--min-np`/`--max-np` and a
//! discovery script), as torchrun's `--nnodes MIN:MAX --max-restarts N`: for
//! programs that do not use elasticrun's runtime. Each start of the group is
//! a static job on the hosts discovery gives (up to `--max-np` slots, at
//! least `--min-np`), its workers given torchrun's and Horovod's variables
//! for that world. Discovery keeps running: when the world it gives differs
//! from the running one (a host in use gone, or more slots while below
//! `--max-np`), every worker is stopped and the group starts again at the
//! new size, renumbered, which does not count as a restart; a failed worker
//! stops the group too, and that counts, up to N.
//!
//! The core ([`world`]) is a pure function of the discovered hosts; the
//! driver ([`run`]) runs discovery and the starts.

use std::time::Instant;

use elastic::hosts::HostSlots;
use futures::FutureExt;

use super::discovery::{Discovery, discover_once};
use super::{Ending, JobError, Say};
use crate::config::{ElasticConfig, HostSpec, JobConfig};
use crate::launch::program_env::Restart;
use crate::launch::warm::WarmPool;

/// The world a start runs: the hosts in discovery's order, each with the
/// slots it gives the job, `--max-np` slots at most.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct World {
    pub hosts: Vec<HostSlots>,
    pub np: usize,
}

/// The world `discovered` gives, or `None` while it has fewer than
/// `min_np` slots.
pub(crate) fn world(discovered: &[HostSlots], min_np: usize, max_np: usize) -> Option<World> {
    let mut left = max_np;
    let mut hosts = Vec::new();
    for h in discovered {
        let take = h.slots.min(left);
        if take == 0 {
            continue;
        }
        left -= take;
        hosts.push(HostSlots {
            host: h.host.clone(),
            slots: take,
        });
    }
    let np = max_np - left;
    (np >= min_np.max(1)).then_some(World { hosts, np })
}

/// Runs the job by restarts until it succeeds, fails past `--max-restarts`,
/// or is stopped.
pub(crate) async fn run(cfg: JobConfig, e: ElasticConfig) -> Result<Ending, JobError> {
    let say = super::Say::stderr(cfg.output_timestamps);
    let Some(source) = e.discovery.clone() else {
        return Err(JobError::NoDiscoveryScript);
    };
    let discovery = Discovery {
        source,
        interval: e.discovery_interval,
        timeout: e.discovery_timeout,
        slots_per_host: e.slots_per_host,
    };
    let (metrics, _server) =
        super::setup::serve_metrics(&cfg, &say, crate::metrics::JobMetrics::new()).await?;
    let max_np = e.max_np.unwrap_or(usize::MAX);
    let max = cfg.max_restarts;
    let (mut count, mut failed_at) = (0, None);
    let warm = WarmPool::for_job(&cfg.command, &cfg.prestart_imports);
    loop {
        let now = enough(&discovery, &e, max_np, &say).await?;
        let workers = if now.np == 1 { "worker" } else { "workers" };
        say.line(format_args!(
            "starting {} {workers} ({})",
            now.np,
            summary(&now.hosts)
        ));
        let mut start = cfg.clone();
        start.elastic = None;
        start.np = Some(now.np);
        start.hosts = HostSpec::List(now.hosts.clone());
        let watch = changed(discovery.clone(), now, e.min_np, max_np).boxed();
        let restart = Restart {
            count,
            max,
            failed_at,
        };
        let (ending, failing) =
            super::setup::run_once(start, restart, Some(watch), metrics.clone(), warm.clone())
                .await?;
        failed_at = failing;
        match ending {
            Ending::Rescaled => failed_at = Some(Instant::now()),
            Ending::Failed if count < max => {
                count += 1;
                say.line(format_args!(
                    "restarting every worker: restart {count} of {max} (TORCHELASTIC_RESTART_COUNT={count})"
                ));
            }
            Ending::Failed => {
                say.line(format_args!(
                    "the job failed after {max} restarts (--max-restarts {max}); giving up"
                ));
                return Ok(ending);
            }
            other => return Ok(other),
        }
    }
}

/// The first world discovery gives with at least `--min-np` slots, within
/// `--elastic-timeout`.
async fn enough(
    d: &Discovery,
    e: &ElasticConfig,
    max_np: usize,
    say: &Say,
) -> Result<World, JobError> {
    let since = tokio::time::Instant::now();
    // Each different thing is said once, not at every run of the script.
    let mut said = String::new();
    loop {
        let now = match discover_once(d).await {
            Ok(hosts) => {
                if let Some(w) = world(&hosts, e.min_np, max_np) {
                    return Ok(w);
                }
                let have: usize = hosts.iter().map(|h| h.slots).sum();
                format!(
                    "waiting for --min-np {} slots: discovery gives {have}",
                    e.min_np
                )
            }
            Err(why) => format!("host discovery failed: {why}"),
        };
        if now != said {
            say.line(format_args!("{now}"));
            said = now;
        }
        if since.elapsed() >= e.elastic_timeout {
            return Err(JobError::TooFewHosts {
                min_np: e.min_np,
                after: e.elastic_timeout,
            });
        }
        tokio::time::sleep(d.interval).await;
    }
}

/// Resolves, saying how, once discovery gives a world other than `now`.
async fn changed(d: Discovery, now: World, min_np: usize, max_np: usize) -> String {
    loop {
        tokio::time::sleep(d.interval).await;
        // A failed run of the script changes nothing.
        let Ok(hosts) = discover_once(&d).await else {
            continue;
        };
        match world(&hosts, min_np, max_np) {
            Some(w) if w == now => {}
            Some(w) => return format!("{} workers now ({})", w.np, summary(&w.hosts)),
            None => {
                let have: usize = hosts.iter().map(|h| h.slots).sum();
                return format!("{have} slots, fewer than --min-np {min_np}");
            }
        }
    }
}

/// "a:2, b:1".
fn summary(hosts: &[HostSlots]) -> String {
    hosts
        .iter()
        .map(|h| format!("{}:{}", h.host, h.slots))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &[(&str, usize)]) -> Vec<HostSlots> {
        list.iter()
            .map(|(h, s)| HostSlots {
                host: (*h).to_owned(),
                slots: *s,
            })
            .collect()
    }

    #[test]
    fn a_world_takes_slots_in_discovery_order_up_to_max_np() {
        let w = world(&hosts(&[("a", 2), ("b", 2), ("c", 2)]), 2, 5).unwrap();
        assert_eq!(w.np, 5);
        assert_eq!(w.hosts, hosts(&[("a", 2), ("b", 2), ("c", 1)]));
        let all = world(&hosts(&[("a", 2), ("b", 0), ("c", 1)]), 1, usize::MAX).unwrap();
        assert_eq!(all.hosts, hosts(&[("a", 2), ("c", 1)]));
        assert_eq!(all.np, 3);
    }

    #[test]
    fn too_few_slots_is_no_world() {
        assert_eq!(world(&hosts(&[("a", 1)]), 2, 4), None);
        assert_eq!(world(&[], 0, 4), None);
    }

    #[test]
    fn hosts_beyond_max_np_change_nothing_and_a_used_host_gone_does() {
        let now = world(&hosts(&[("a", 2), ("b", 2)]), 2, 4).unwrap();
        let more = world(&hosts(&[("a", 2), ("b", 2), ("c", 2)]), 2, 4).unwrap();
        assert_eq!(more, now);
        let fewer = world(&hosts(&[("a", 2)]), 2, 4).unwrap();
        assert_ne!(fewer, now);
        assert_eq!(fewer.np, 2);
    }
}
