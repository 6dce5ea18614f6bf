//! From the three layers to one typed [`JobConfig`]: command line >
//! `ELASTICRUN_*` environment > Horovod's `HOROVOD_*` names (converted to our
//! units) > config file > default. Pure: the environment comes in as a lookup.

use std::path::PathBuf;
use std::time::Duration;

use super::cli::Cli;
use super::file::ConfigFile;
use super::{
    ConfigError, HostSpec, JobConfig, LogLevel, Source, Sourced, StallCheck, Timeline, Tuning,
};
use crate::hosts::parse_host_list;

type Parse<T> = fn(&str) -> Result<T, String>;

/// Looks an option up layer by layer.
struct Layers<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Layers<'_> {
    /// The first of `vars` that is set and not empty, parsed.
    fn env<T>(
        &self,
        vars: &[(&'static str, Parse<T>)],
    ) -> Result<Option<(T, Source)>, ConfigError> {
        for &(var, parse) in vars {
            if let Some(raw) = (self.env)(var).filter(|v| !v.trim().is_empty()) {
                let v = parse(raw.trim()).map_err(|why| ConfigError::Env {
                    var: var.into(),
                    value: raw.clone(),
                    why,
                })?;
                return Ok(Some((v, Source::Environment(var))));
            }
        }
        Ok(None)
    }

    fn pick<T>(
        &self,
        cli: Option<T>,
        vars: &[(&'static str, Parse<T>)],
        file: Option<T>,
        default: T,
    ) -> Result<Sourced<T>, ConfigError> {
        if let Some(v) = cli {
            return Ok(Sourced::new(v, Source::CommandLine));
        }
        if let Some((v, s)) = self.env(vars)? {
            return Ok(Sourced::new(v, s));
        }
        Ok(match file {
            Some(v) => Sourced::new(v, Source::ConfigFile),
            None => Sourced::new(default, Source::Default),
        })
    }
}

fn number(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| "expected a non-negative number".to_owned())
}

fn count(s: &str) -> Result<usize, String> {
    s.parse()
        .map_err(|_| "expected a non-negative integer".to_owned())
}

fn port(s: &str) -> Result<u16, String> {
    s.parse()
        .map_err(|_| "expected a port number (1-65535)".to_owned())
}

fn text(s: &str) -> Result<String, String> {
    Ok(s.to_owned())
}

fn path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s))
}

/// `1/0`, `true/false`, `yes/no`, `on/off`, any case.
fn flag(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("expected 1/0, true/false, yes/no or on/off".to_owned()),
    }
}

/// Horovod's HOROVOD_FUSION_THRESHOLD is in bytes.
fn bytes_as_mb(s: &str) -> Result<f64, String> {
    number(s).map(|b| b / (1024.0 * 1024.0))
}

fn seconds(v: f64) -> Duration {
    Duration::from_secs_f64(v)
}

fn positive(option: &'static str, v: f64) -> Result<f64, ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(ConfigError::Invalid {
            option,
            why: format!("{v} is not a positive number"),
        })
    }
}

fn non_negative(option: &'static str, v: f64) -> Result<f64, ConfigError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(ConfigError::Invalid {
            option,
            why: format!("{v} is negative or not a number"),
        })
    }
}

fn on(b: bool) -> Option<bool> {
    b.then_some(true)
}

/// `--x` / `--no-x` pairs: `Some(true)`, `Some(false)` or not given.
fn pair(yes: bool, no: bool) -> Option<bool> {
    if yes {
        Some(true)
    } else if no {
        Some(false)
    } else {
        None
    }
}

/// Resolves every option. `env` looks up an environment variable.
pub fn resolve(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
    file: &ConfigFile,
) -> Result<JobConfig, ConfigError> {
    let l = Layers { env };
    let f = file;
    let np = l.pick(
        cli.np.map(Some),
        &[("ELASTICRUN_NP", |s| count(s).map(Some))],
        f.launch.np.map(Some),
        None,
    )?;
    if np.value == Some(0) {
        return Err(ConfigError::Invalid {
            option: "np",
            why: "at least one process is needed".into(),
        });
    }
    let start_timeout = l.pick(
        cli.start_timeout,
        &[
            ("ELASTICRUN_START_TIMEOUT", number),
            ("HOROVOD_START_TIMEOUT", number),
        ],
        f.launch.start_timeout,
        30.0,
    )?;
    let network_interface = l.pick(
        cli.network_interface.clone().map(Some),
        &[
            ("ELASTICRUN_NETWORK_INTERFACE", |s| text(s).map(Some)),
            ("HOROVOD_GLOO_IFACE", |s| text(s).map(Some)),
        ],
        f.launch.network_interface.clone().map(Some),
        None,
    )?;
    let ssh_port = l.pick(
        cli.ssh_port.map(Some),
        &[("ELASTICRUN_SSH_PORT", |s| port(s).map(Some))],
        f.launch.ssh_port.map(Some),
        None,
    )?;
    let ssh_identity_file = l.pick(
        cli.ssh_identity_file.clone().map(Some),
        &[("ELASTICRUN_SSH_IDENTITY_FILE", |s| path(s).map(Some))],
        f.launch
            .ssh_identity_file
            .clone()
            .map(|p| Some(PathBuf::from(p))),
        None,
    )?;
    Ok(JobConfig {
        command: cli.command.clone(),
        np: np.value,
        hosts: hosts(cli, &l, f)?,
        start_timeout: seconds(positive("start-timeout", start_timeout.value)?),
        network_interface: network_interface.value,
        ssh_port: ssh_port.value,
        ssh_identity_file: ssh_identity_file.value,
        tuning: tuning(cli, &l, f)?,
        timeline: timeline(cli, &l, f)?,
        stall_check: stall_check(cli, &l, f)?,
        output_dir: l
            .pick(
                cli.output_filename.clone().map(Some),
                &[("ELASTICRUN_OUTPUT_FILENAME", |s| path(s).map(Some))],
                f.launch
                    .output_filename
                    .clone()
                    .map(|p| Some(PathBuf::from(p))),
                None,
            )?
            .value,
        output_timestamps: l
            .pick(
                on(cli.prefix_output_with_timestamp),
                &[("ELASTICRUN_PREFIX_OUTPUT_WITH_TIMESTAMP", flag)],
                f.launch.prefix_output_with_timestamp,
                false,
            )?
            .value,
        log_level: log_level(cli, &l, f)?,
        log_timestamps: !l
            .pick(
                on(cli.log_without_timestamp),
                &[
                    ("ELASTICRUN_LOG_WITHOUT_TIMESTAMP", flag),
                    ("HOROVOD_LOG_HIDE_TIME", flag),
                ],
                f.logging.hide_timestamp,
                false,
            )?
            .value,
    })
}

fn hosts(cli: &Cli, l: &Layers<'_>, f: &ConfigFile) -> Result<HostSpec, ConfigError> {
    let layer = |list: Option<String>, file: Option<PathBuf>, what: &str| match (list, file) {
        (Some(_), Some(_)) => Err(ConfigError::Invalid {
            option: "hosts",
            why: format!("{what} gives both hosts and a hostfile"),
        }),
        (Some(h), None) => parse_host_list(&h)
            .map(|v| Some(HostSpec::List(v)))
            .map_err(ConfigError::Hosts),
        (None, Some(p)) => Ok(Some(HostSpec::File(p))),
        (None, None) => Ok(None),
    };
    let from_env = (
        l.env(&[("ELASTICRUN_HOSTS", text)])?.map(|(v, _)| v),
        l.env(&[("ELASTICRUN_HOSTFILE", path)])?.map(|(v, _)| v),
    );
    let candidates = [
        layer(cli.hosts.clone(), cli.hostfile.clone(), "the command line")?,
        layer(from_env.0, from_env.1, "the environment")?,
        layer(
            f.launch.hosts.clone(),
            f.launch.hostfile.clone().map(PathBuf::from),
            "the config file",
        )?,
    ];
    Ok(candidates
        .into_iter()
        .flatten()
        .next()
        .unwrap_or(HostSpec::Localhost))
}

fn tuning(cli: &Cli, l: &Layers<'_>, f: &ConfigFile) -> Result<Tuning, ConfigError> {
    let p = &f.params;
    let fusion = l.pick(
        cli.fusion_threshold_mb,
        &[
            ("ELASTICRUN_FUSION_THRESHOLD_MB", number),
            ("HOROVOD_FUSION_THRESHOLD", bytes_as_mb),
        ],
        p.fusion_threshold_mb,
        64.0,
    )?;
    let mb = non_negative("fusion-threshold-mb", fusion.value)?;
    let cycle = l.pick(
        cli.cycle_time_ms,
        &[
            ("ELASTICRUN_CYCLE_TIME_MS", number),
            ("HOROVOD_CYCLE_TIME", number),
        ],
        p.cycle_time_ms,
        1.0,
    )?;
    let ms = positive("cycle-time-ms", cycle.value)?;
    let capacity = l.pick(
        cli.cache_capacity,
        &[
            ("ELASTICRUN_CACHE_CAPACITY", count),
            ("HOROVOD_CACHE_CAPACITY", count),
        ],
        p.cache_capacity,
        1024,
    )?;
    let disabled = l.pick(
        on(cli.disable_cache),
        &[("ELASTICRUN_DISABLE_CACHE", flag)],
        p.disable_cache,
        false,
    )?;
    Ok(Tuning {
        fusion_threshold_bytes: fusion.map(|_| (mb * 1024.0 * 1024.0).round() as u64),
        cycle_time: cycle.map(|_| Duration::from_secs_f64(ms / 1000.0)),
        cache_capacity: if disabled.value {
            disabled.map(|_| 0)
        } else {
            capacity
        },
        hierarchical_allreduce: l.pick(
            pair(cli.hierarchical_allreduce, cli.no_hierarchical_allreduce),
            &[
                ("ELASTICRUN_HIERARCHICAL_ALLREDUCE", flag),
                ("HOROVOD_HIERARCHICAL_ALLREDUCE", flag),
            ],
            p.hierarchical_allreduce,
            false,
        )?,
        hierarchical_allgather: l.pick(
            pair(cli.hierarchical_allgather, cli.no_hierarchical_allgather),
            &[
                ("ELASTICRUN_HIERARCHICAL_ALLGATHER", flag),
                ("HOROVOD_HIERARCHICAL_ALLGATHER", flag),
            ],
            p.hierarchical_allgather,
            false,
        )?,
    })
}

fn timeline(cli: &Cli, l: &Layers<'_>, f: &ConfigFile) -> Result<Option<Timeline>, ConfigError> {
    let file = l.pick(
        cli.timeline_filename.clone().map(Some),
        &[
            ("ELASTICRUN_TIMELINE_FILENAME", |s| path(s).map(Some)),
            ("HOROVOD_TIMELINE", |s| path(s).map(Some)),
        ],
        f.timeline.filename.clone().map(|p| Some(PathBuf::from(p))),
        None,
    )?;
    let mark_cycles = l.pick(
        on(cli.timeline_mark_cycles),
        &[
            ("ELASTICRUN_TIMELINE_MARK_CYCLES", flag),
            ("HOROVOD_TIMELINE_MARK_CYCLES", flag),
        ],
        f.timeline.mark_cycles,
        false,
    )?;
    Ok(file.value.map(|file| Timeline {
        file,
        mark_cycles: mark_cycles.value,
    }))
}

fn stall_check(cli: &Cli, l: &Layers<'_>, f: &ConfigFile) -> Result<StallCheck, ConfigError> {
    let s = &f.stall_check;
    let off = l.pick(
        on(cli.no_stall_check),
        &[
            ("ELASTICRUN_NO_STALL_CHECK", flag),
            ("HOROVOD_STALL_CHECK_DISABLE", flag),
        ],
        s.enabled.map(|e| !e),
        false,
    )?;
    if off.value {
        return Ok(StallCheck::Off);
    }
    let warning = l.pick(
        cli.stall_check_warning_time_seconds,
        &[
            ("ELASTICRUN_STALL_CHECK_WARNING_TIME_SECONDS", number),
            ("HOROVOD_STALL_CHECK_TIME_SECONDS", number),
        ],
        s.warning_time_seconds,
        60.0,
    )?;
    let shutdown = l.pick(
        cli.stall_check_shutdown_time_seconds,
        &[
            ("ELASTICRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS", number),
            ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", number),
        ],
        s.shutdown_time_seconds,
        0.0,
    )?;
    let shutdown = non_negative("stall-check-shutdown-time-seconds", shutdown.value)?;
    Ok(StallCheck::On {
        warning: seconds(non_negative(
            "stall-check-warning-time-seconds",
            warning.value,
        )?),
        shutdown: (shutdown > 0.0).then(|| seconds(shutdown)),
    })
}

fn log_level(cli: &Cli, l: &Layers<'_>, f: &ConfigFile) -> Result<LogLevel, ConfigError> {
    let raw = l.pick(
        cli.log_level.clone(),
        &[("ELASTICRUN_LOG_LEVEL", text), ("HOROVOD_LOG_LEVEL", text)],
        f.logging.level.clone(),
        "warning".to_owned(),
    )?;
    raw.value.parse().map_err(|why| ConfigError::Invalid {
        option: "log-level",
        why,
    })
}
