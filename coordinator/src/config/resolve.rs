//! From the three layers to one typed [`JobConfig`]: command line >
//! `ELASTICRUN_*` environment > Horovod's `HOROVOD_*` names (converted to our
//! units) > config file > default. Pure: the environment comes in as a lookup.

use std::path::PathBuf;
use std::time::Duration;

use super::cli::Cli;
use super::file::ConfigFile;
use super::{
    AutotuneConfig, ConfigError, ElasticConfig, HostSpec, JobConfig, LogLevel, SEGMENT_BYTES_RANGE,
    Source, Sourced, StallCheck, Timeline, Tuning, parse_size,
};
use elastic::hosts::parse_host_list;

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

fn some_path(s: &str) -> Result<Option<PathBuf>, String> {
    path(s).map(Some)
}

fn samples(s: &str) -> Result<u32, String> {
    s.parse()
        .map_err(|_| format!("expected an integer from 0 to {}", u32::MAX))
}

fn reset_count(s: &str) -> Result<Option<u32>, String> {
    s.parse()
        .map(Some)
        .map_err(|_| format!("expected an integer from 0 to {}", u32::MAX))
}

/// `MIN,MAX` or `MIN MAX`, in seconds.
fn range(s: &str) -> Result<Option<(f64, f64)>, String> {
    let parts: Vec<&str> = if s.contains(',') {
        s.split(',').map(str::trim).collect()
    } else {
        s.split_whitespace().collect()
    };
    match parts[..] {
        [min, max] => Ok(Some((number(min)?, number(max)?))),
        _ => Err("expected MIN,MAX (two numbers of seconds)".to_owned()),
    }
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

/// A segment size within [`SEGMENT_BYTES_RANGE`].
fn segment_bytes(v: u64) -> Result<u64, String> {
    if SEGMENT_BYTES_RANGE.contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{v} bytes is outside the segment sizes accepted, 4K ({}) to 1G ({})",
            SEGMENT_BYTES_RANGE.start(),
            SEGMENT_BYTES_RANGE.end()
        ))
    }
}

/// A size (see [`parse_size`]) that is a valid segment size.
fn segment_size(s: &str) -> Result<u64, String> {
    parse_size(s).and_then(segment_bytes)
}

/// Horovod's HOROVOD_FUSION_THRESHOLD is in bytes.
fn bytes_as_mb(s: &str) -> Result<f64, String> {
    number(s).map(|b| b / (1024.0 * 1024.0))
}

/// A non-negative number of seconds that fits a [`Duration`].
fn seconds(option: &'static str, v: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(non_negative(option, v)?).map_err(|_| ConfigError::Invalid {
        option,
        why: format!("{v} seconds is too long"),
    })
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

/// A positive number of seconds that fits a [`Duration`].
fn positive_seconds(option: &'static str, v: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(positive(option, v)?).map_err(|_| ConfigError::Invalid {
        option,
        why: format!("{v} seconds is too long"),
    })
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
    let (hosts, elastic) = match hosts(cli, &l, f)? {
        Hosts::Static(spec) => (spec, elastic(cli, &l, f, None, np.value)?),
        Hosts::Discovered(script) => (
            HostSpec::Localhost,
            elastic(cli, &l, f, Some(script), np.value)?,
        ),
    };
    Ok(JobConfig {
        command: cli.command.clone(),
        np: elastic.as_ref().map_or(np.value, |e| Some(e.initial_np)),
        hosts,
        start_timeout: positive_seconds("start-timeout", start_timeout.value)?,
        network_interface: network_interface.value,
        ssh_port: ssh_port.value,
        ssh_identity_file: ssh_identity_file.value,
        tuning: tuning(cli, &l, f)?,
        autotune: autotune(cli, &l, f)?,
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
        elastic,
    })
}

/// Where the workers' hosts come from.
enum Hosts {
    Static(HostSpec),
    /// `--host-discovery-script`: an elastic job.
    Discovered(PathBuf),
}

/// The highest layer that names hosts, a hostfile or a discovery script wins;
/// one layer naming two of them is an error.
fn hosts(cli: &Cli, l: &Layers<'_>, f: &ConfigFile) -> Result<Hosts, ConfigError> {
    let layer = |list: Option<String>,
                 file: Option<PathBuf>,
                 script: Option<PathBuf>,
                 what: &str| match (list, file, script) {
        (Some(_), Some(_), _) => Err(ConfigError::Invalid {
            option: "hosts",
            why: format!("{what} gives both hosts and a hostfile"),
        }),
        (Some(_), None, Some(_)) | (None, Some(_), Some(_)) => Err(ConfigError::Invalid {
            option: "host-discovery-script",
            why: format!(
                "{what} gives both a discovery script and hosts (-H or --hostfile); \
                 the script finds the hosts of an elastic job, so give one or the other"
            ),
        }),
        (Some(h), None, None) => parse_host_list(&h)
            .map(|v| Some(Hosts::Static(HostSpec::List(v))))
            .map_err(ConfigError::Hosts),
        (None, Some(p), None) => Ok(Some(Hosts::Static(HostSpec::File(p)))),
        (None, None, Some(s)) => Ok(Some(Hosts::Discovered(s))),
        (None, None, None) => Ok(None),
    };
    let from_env = (
        l.env(&[("ELASTICRUN_HOSTS", text)])?.map(|(v, _)| v),
        l.env(&[("ELASTICRUN_HOSTFILE", path)])?.map(|(v, _)| v),
        l.env(&[("ELASTICRUN_HOST_DISCOVERY_SCRIPT", path)])?
            .map(|(v, _)| v),
    );
    let candidates = [
        layer(
            cli.hosts.clone(),
            cli.hostfile.clone(),
            cli.host_discovery_script.clone(),
            "the command line",
        )?,
        layer(from_env.0, from_env.1, from_env.2, "the environment")?,
        layer(
            f.launch.hosts.clone(),
            f.launch.hostfile.clone().map(PathBuf::from),
            f.elastic.host_discovery_script.clone().map(PathBuf::from),
            "the config file",
        )?,
    ];
    Ok(candidates
        .into_iter()
        .flatten()
        .next()
        .unwrap_or(Hosts::Static(HostSpec::Localhost)))
}

fn given(source: Source) -> String {
    match source {
        Source::CommandLine => "on the command line".into(),
        Source::Environment(var) => format!("by {var}"),
        Source::ConfigFile => "in the config file".into(),
        Source::Default => "by default".into(),
    }
}

/// The elastic options: `Some` with a discovery `script`, validated against
/// `np` (`-np`, the initial target); without one, any of them given is an error.
fn elastic(
    cli: &Cli,
    l: &Layers<'_>,
    f: &ConfigFile,
    script: Option<PathBuf>,
    np: Option<usize>,
) -> Result<Option<ElasticConfig>, ConfigError> {
    let e = &f.elastic;
    let min_np = l.pick(
        cli.min_np.map(Some),
        &[("ELASTICRUN_MIN_NP", |s| count(s).map(Some))],
        e.min_np.map(Some),
        None,
    )?;
    let max_np = l.pick(
        cli.max_np.map(Some),
        &[("ELASTICRUN_MAX_NP", |s| count(s).map(Some))],
        e.max_np.map(Some),
        None,
    )?;
    let slots_per_host = l.pick(
        cli.slots_per_host,
        &[("ELASTICRUN_SLOTS_PER_HOST", count)],
        e.slots_per_host,
        1,
    )?;
    // Like horovodrun, HOROVOD_ELASTIC_TIMEOUT only counts in elastic jobs (a
    // static one ignores it rather than failing on a stray export).
    let timeout_vars: &[(&'static str, Parse<f64>)] = if script.is_some() {
        &[
            ("ELASTICRUN_ELASTIC_TIMEOUT", number),
            ("HOROVOD_ELASTIC_TIMEOUT", number),
        ]
    } else {
        &[("ELASTICRUN_ELASTIC_TIMEOUT", number)]
    };
    let elastic_timeout = l.pick(cli.elastic_timeout, timeout_vars, e.elastic_timeout, 600.0)?;
    let reset_limit = l.pick(
        cli.reset_limit.map(Some),
        &[("ELASTICRUN_RESET_LIMIT", reset_count)],
        e.reset_limit.map(Some),
        None,
    )?;
    let cli_cooldown = match cli.blacklist_cooldown_range.as_deref() {
        None => None,
        Some(&[min, max]) => Some(Some((min, max))),
        Some(other) => {
            return Err(ConfigError::Invalid {
                option: "blacklist-cooldown-range",
                why: format!("expected MIN MAX, got {} numbers", other.len()),
            });
        }
    };
    let cooldown = l.pick(
        cli_cooldown,
        &[("ELASTICRUN_BLACKLIST_COOLDOWN_RANGE", range)],
        e.blacklist_cooldown_range.map(Some),
        None,
    )?;
    let discovery_interval = l.pick(
        cli.discovery_interval,
        &[("ELASTICRUN_DISCOVERY_INTERVAL", number)],
        e.discovery_interval,
        1.0,
    )?;
    let discovery_timeout = l.pick(
        cli.discovery_timeout,
        &[("ELASTICRUN_DISCOVERY_TIMEOUT", number)],
        e.discovery_timeout,
        10.0,
    )?;

    let Some(discovery_script) = script else {
        let sources = [
            ("min-np", min_np.source),
            ("max-np", max_np.source),
            ("slots-per-host", slots_per_host.source),
            ("elastic-timeout", elastic_timeout.source),
            ("reset-limit", reset_limit.source),
            ("blacklist-cooldown-range", cooldown.source),
            ("discovery-interval", discovery_interval.source),
            ("discovery-timeout", discovery_timeout.source),
        ];
        return match sources.into_iter().find(|(_, s)| *s != Source::Default) {
            Some((option, source)) => Err(ConfigError::Invalid {
                option,
                why: format!(
                    "only elastic jobs use it, and it needs --host-discovery-script \
                     (it was given {})",
                    given(source)
                ),
            }),
            None => Ok(None),
        };
    };

    let at_least_one = |option: &'static str, v: Option<usize>| match v {
        Some(0) => Err(ConfigError::Invalid {
            option,
            why: "at least one process is needed".into(),
        }),
        v => Ok(v),
    };
    let max_np = at_least_one("max-np", max_np.value)?;
    let min_given = at_least_one("min-np", min_np.value)?;
    let min_np = min_given.or(np).ok_or(ConfigError::Invalid {
        option: "min-np",
        why: "an elastic job needs -np or --min-np (the fewest processes to train with)".into(),
    })?;
    let initial_np = np.unwrap_or(min_np);
    if initial_np < min_np {
        return Err(ConfigError::Invalid {
            option: "min-np",
            why: format!("{min_np} is above -np {initial_np} (the processes to start with)"),
        });
    }
    if let Some(max) = max_np {
        if min_given.is_some() && max < min_np {
            return Err(ConfigError::Invalid {
                option: "max-np",
                why: format!("{max} is below --min-np {min_np}"),
            });
        }
        if max < initial_np {
            return Err(ConfigError::Invalid {
                option: "max-np",
                why: format!("{max} is below -np {initial_np}"),
            });
        }
    }
    if slots_per_host.value == 0 {
        return Err(ConfigError::Invalid {
            option: "slots-per-host",
            why: "a host needs at least one slot".into(),
        });
    }
    let blacklist_cooldown = match cooldown.value {
        None => None,
        Some((min, max)) => {
            let option = "blacklist-cooldown-range";
            let (lo, hi) = (
                positive_seconds(option, min)?,
                positive_seconds(option, max)?,
            );
            if lo > hi {
                return Err(ConfigError::Invalid {
                    option,
                    why: format!("MIN {min} is above MAX {max}"),
                });
            }
            Some((lo, hi))
        }
    };
    Ok(Some(ElasticConfig {
        discovery_script,
        min_np,
        max_np,
        initial_np,
        slots_per_host: slots_per_host.value,
        elastic_timeout: positive_seconds("elastic-timeout", elastic_timeout.value)?,
        reset_limit: reset_limit.value,
        blacklist_cooldown,
        discovery_interval: positive_seconds("discovery-interval", discovery_interval.value)?,
        discovery_timeout: positive_seconds("discovery-timeout", discovery_timeout.value)?,
    }))
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
    let segment = l.pick(
        cli.segment_size,
        &[("ELASTICRUN_SEGMENT_SIZE", segment_size)],
        p.segment_bytes,
        512 << 10,
    )?;
    segment_bytes(segment.value).map_err(|why| ConfigError::Invalid {
        option: "segment-size",
        why: format!("{why} (it was given {})", given(segment.source)),
    })?;
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
        segment_bytes: segment,
    })
}

/// `[ours, horovods]`, Horovod's name left out unless `with_horovod`.
fn ours_then_horovod<'a, T>(
    with_horovod: bool,
    vars: &'a [(&'static str, Parse<T>); 2],
) -> &'a [(&'static str, Parse<T>)] {
    if with_horovod { vars } else { &vars[..1] }
}

/// The autotune options: `Some` when autotuning is on; when it is off, any of
/// the others given is an error.
fn autotune(
    cli: &Cli,
    l: &Layers<'_>,
    f: &ConfigFile,
) -> Result<Option<AutotuneConfig>, ConfigError> {
    let a = &f.autotune;
    let enabled = l.pick(
        on(cli.autotune),
        &[("ELASTICRUN_AUTOTUNE", flag), ("HOROVOD_AUTOTUNE", flag)],
        a.enabled,
        false,
    )?;
    // Like HOROVOD_ELASTIC_TIMEOUT, Horovod's names only count when autotuning
    // is on (Horovod ignores them otherwise, so a stray export is no error).
    let horovod = enabled.value;
    let log_file = l.pick(
        cli.autotune_log_file.clone().map(Some),
        ours_then_horovod(
            horovod,
            &[
                ("ELASTICRUN_AUTOTUNE_LOG_FILE", some_path),
                ("HOROVOD_AUTOTUNE_LOG", some_path),
            ],
        ),
        a.log_file.clone().map(|p| Some(PathBuf::from(p))),
        None,
    )?;
    let warmup_samples = l.pick(
        cli.autotune_warmup_samples,
        ours_then_horovod(
            horovod,
            &[
                ("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", samples),
                ("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", samples),
            ],
        ),
        a.warmup_samples,
        3,
    )?;
    let steps_per_sample = l.pick(
        cli.autotune_steps_per_sample,
        ours_then_horovod(
            horovod,
            &[
                ("ELASTICRUN_AUTOTUNE_STEPS_PER_SAMPLE", samples),
                ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", samples),
            ],
        ),
        a.steps_per_sample,
        10,
    )?;
    let max_samples = l.pick(
        cli.autotune_bayes_opt_max_samples,
        ours_then_horovod(
            horovod,
            &[
                ("ELASTICRUN_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", samples),
                ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", samples),
            ],
        ),
        a.bayes_opt_max_samples,
        20,
    )?;
    let noise = l.pick(
        cli.autotune_gaussian_process_noise,
        ours_then_horovod(
            horovod,
            &[
                ("ELASTICRUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", number),
                ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", number),
            ],
        ),
        a.gaussian_process_noise,
        0.8,
    )?;

    if !enabled.value {
        let sources = [
            ("autotune-log-file", log_file.source),
            ("autotune-warmup-samples", warmup_samples.source),
            ("autotune-steps-per-sample", steps_per_sample.source),
            ("autotune-bayes-opt-max-samples", max_samples.source),
            ("autotune-gaussian-process-noise", noise.source),
        ];
        return match sources.into_iter().find(|(_, s)| *s != Source::Default) {
            Some((option, source)) => Err(ConfigError::Invalid {
                option,
                why: format!(
                    "only autotuning uses it, and it needs --autotune (it was given {}{})",
                    given(source),
                    match enabled.source {
                        Source::Default => String::new(),
                        off => format!(", and autotuning was turned off {}", given(off)),
                    }
                ),
            }),
            None => Ok(None),
        };
    }

    let at_least_one = |option: &'static str, v: u32| {
        if v == 0 {
            Err(ConfigError::Invalid {
                option,
                why: "at least 1 is needed".into(),
            })
        } else {
            Ok(v)
        }
    };
    Ok(Some(AutotuneConfig {
        log_file: log_file.value,
        warmup_samples: warmup_samples.value,
        steps_per_sample: at_least_one("autotune-steps-per-sample", steps_per_sample.value)?,
        max_samples: at_least_one("autotune-bayes-opt-max-samples", max_samples.value)?,
        gaussian_process_noise: non_negative("autotune-gaussian-process-noise", noise.value)?,
    }))
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
    let shutdown = seconds("stall-check-shutdown-time-seconds", shutdown.value)?;
    Ok(StallCheck::On {
        warning: seconds("stall-check-warning-time-seconds", warning.value)?,
        shutdown: (!shutdown.is_zero()).then_some(shutdown),
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
