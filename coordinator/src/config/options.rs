//! The option table. Each option is declared once, here: its command-line flag
//! (the name messages give it), its environment variables (ours first, then
//! Horovod's alias, parsed in Horovod's unit), its key in the YAML
//! `--config-file`, how the command line and the file hold it, and its default.
//! [`super::resolve()`] picks every value with one routine over these entries:
//! command line > environment > config file > default, recording the source.
//!
//! Values are in the option's own unit (MB, ms, seconds); conversion to the
//! typed [`super::JobConfig`] and checks that need other options are done
//! after the pick. The clap [`Cli`] and the serde [`ConfigFile`] hold the
//! fields these entries read; tests check that every flag and key named here
//! is one they accept.

use std::borrow::Cow;
use std::path::PathBuf;

use super::cli::Cli;
use super::error::BadValue;
use super::file::ConfigFile;
use super::parse::{
    bytes_as_mb, count, cpus, flag, number, range, samples, segment_size, some_count, some_path,
    some_port, some_samples, some_text, text, transport,
};

/// Parses an environment variable's (trimmed, non-empty) text.
pub(super) type Parse<T> = fn(&str) -> Result<T, BadValue>;

/// When an environment variable counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum When {
    Always,
    /// Only in an elastic job: elsewhere it is ignored, as horovodrun does.
    ElasticJob,
    /// Only when autotuning is on: elsewhere it is ignored, as Horovod does.
    Autotuning,
}

/// An environment variable that sets an option.
#[derive(Debug)]
pub(super) struct Var<T: 'static> {
    pub(super) name: &'static str,
    pub(super) parse: Parse<T>,
    pub(super) when: When,
}

/// A variable that always counts.
const fn var<T>(name: &'static str, parse: Parse<T>) -> Var<T> {
    Var {
        name,
        parse,
        when: When::Always,
    }
}

/// A variable that counts only `when`.
const fn var_when<T>(when: When, name: &'static str, parse: Parse<T>) -> Var<T> {
    Var { name, parse, when }
}

/// One option of the table.
#[derive(Debug)]
pub(super) struct Opt<T: 'static> {
    /// The long flag without its dashes; errors name the option by it.
    pub(super) flag: &'static str,
    /// Looked at in this order; the first set and not empty wins.
    pub(super) env: &'static [Var<T>],
    /// `section.key` in the YAML file. For the reader: the file's own parser
    /// ([`ConfigFile`]) names keys in its errors, and the tests check each
    /// key here against it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) yaml: &'static str,
    pub(super) cli: fn(&Cli) -> Option<T>,
    pub(super) file: fn(&ConfigFile) -> Option<T>,
    pub(super) default: T,
}

/// A switch given on the command line: `Some(true)`, or not given.
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

fn file_path(p: &Option<String>) -> Option<Option<PathBuf>> {
    p.clone().map(|p| Some(PathBuf::from(p)))
}

// Launching.

pub(super) const NP: Opt<Option<usize>> = Opt {
    flag: "np",
    env: &[var("ELASTICRUN_NP", some_count)],
    yaml: "launch.np",
    cli: |c| c.np.map(Some),
    file: |f| f.launch.np.map(Some),
    default: None,
};

pub(super) const HOSTS: Opt<Option<String>> = Opt {
    flag: "hosts",
    env: &[var("ELASTICRUN_HOSTS", some_text)],
    yaml: "launch.hosts",
    cli: |c| c.hosts.clone().map(Some),
    file: |f| f.launch.hosts.clone().map(Some),
    default: None,
};

pub(super) const HOSTFILE: Opt<Option<PathBuf>> = Opt {
    flag: "hostfile",
    env: &[var("ELASTICRUN_HOSTFILE", some_path)],
    yaml: "launch.hostfile",
    cli: |c| c.hostfile.clone().map(Some),
    file: |f| file_path(&f.launch.hostfile),
    default: None,
};

/// Seconds.
pub(super) const START_TIMEOUT: Opt<f64> = Opt {
    flag: "start-timeout",
    env: &[
        var(control::env::START_TIMEOUT, number),
        var("HOROVOD_START_TIMEOUT", number),
    ],
    yaml: "launch.start_timeout",
    cli: |c| c.start_timeout,
    file: |f| f.launch.start_timeout,
    default: 30.0,
};

/// Restarts of every worker after a failure, torchrun's `--max-restarts`.
pub(super) const MAX_RESTARTS: Opt<u32> = Opt {
    flag: "max-restarts",
    env: &[var("ELASTICRUN_MAX_RESTARTS", samples)],
    yaml: "launch.max_restarts",
    cli: |c| c.max_restarts,
    file: |f| f.launch.max_restarts,
    default: 0,
};

/// Seconds.
pub(super) const COORDINATOR_TIMEOUT: Opt<f64> = Opt {
    flag: "coordinator-timeout",
    env: &[var(control::env::COORDINATOR_TIMEOUT, number)],
    yaml: "launch.coordinator_timeout",
    cli: |c| c.coordinator_timeout,
    file: |f| f.launch.coordinator_timeout,
    default: 10.0,
};

/// Seconds; at least [`super::MIN_HEARTBEAT_TIMEOUT`].
pub(super) const HEARTBEAT_TIMEOUT: Opt<f64> = Opt {
    flag: "heartbeat-timeout",
    env: &[var("ELASTICRUN_HEARTBEAT_TIMEOUT", number)],
    yaml: "launch.heartbeat_timeout",
    cli: |c| c.heartbeat_timeout,
    file: |f| f.launch.heartbeat_timeout,
    default: 15.0,
};

pub(super) const NETWORK_INTERFACE: Opt<Option<String>> = Opt {
    flag: "network-interface",
    env: &[
        var("ELASTICRUN_NETWORK_INTERFACE", some_text),
        var("HOROVOD_GLOO_IFACE", some_text),
    ],
    yaml: "launch.network_interface",
    cli: |c| c.network_interface.clone().map(Some),
    file: |f| f.launch.network_interface.clone().map(Some),
    default: None,
};

pub(super) const SSH_PORT: Opt<Option<u16>> = Opt {
    flag: "ssh-port",
    env: &[var("ELASTICRUN_SSH_PORT", some_port)],
    yaml: "launch.ssh_port",
    cli: |c| c.ssh_port.map(Some),
    file: |f| f.launch.ssh_port.map(Some),
    default: None,
};

pub(super) const SSH_IDENTITY_FILE: Opt<Option<PathBuf>> = Opt {
    flag: "ssh-identity-file",
    env: &[var("ELASTICRUN_SSH_IDENTITY_FILE", some_path)],
    yaml: "launch.ssh_identity_file",
    cli: |c| c.ssh_identity_file.clone().map(Some),
    file: |f| file_path(&f.launch.ssh_identity_file),
    default: None,
};

// Tuneable parameters.

/// MiB.
pub(super) const FUSION_THRESHOLD_MB: Opt<f64> = Opt {
    flag: "fusion-threshold-mb",
    env: &[
        var("ELASTICRUN_FUSION_THRESHOLD_MB", number),
        var("HOROVOD_FUSION_THRESHOLD", bytes_as_mb),
    ],
    yaml: "params.fusion_threshold_mb",
    cli: |c| c.fusion_threshold_mb,
    file: |f| f.params.fusion_threshold_mb,
    default: 64.0,
};

/// Milliseconds.
pub(super) const CYCLE_TIME_MS: Opt<f64> = Opt {
    flag: "cycle-time-ms",
    env: &[
        var("ELASTICRUN_CYCLE_TIME_MS", number),
        var("HOROVOD_CYCLE_TIME", number),
    ],
    yaml: "params.cycle_time_ms",
    cli: |c| c.cycle_time_ms,
    file: |f| f.params.cycle_time_ms,
    default: 1.0,
};

pub(super) const CACHE_CAPACITY: Opt<usize> = Opt {
    flag: "cache-capacity",
    env: &[
        var("ELASTICRUN_CACHE_CAPACITY", count),
        var("HOROVOD_CACHE_CAPACITY", count),
    ],
    yaml: "params.cache_capacity",
    cli: |c| c.cache_capacity,
    file: |f| f.params.cache_capacity,
    default: 1024,
};

pub(super) const DISABLE_CACHE: Opt<bool> = Opt {
    flag: "disable-cache",
    env: &[var("ELASTICRUN_DISABLE_CACHE", flag)],
    yaml: "params.disable_cache",
    cli: |c| on(c.disable_cache),
    file: |f| f.params.disable_cache,
    default: false,
};

pub(super) const HIERARCHICAL_ALLREDUCE: Opt<bool> = Opt {
    flag: "hierarchical-allreduce",
    env: &[
        var("ELASTICRUN_HIERARCHICAL_ALLREDUCE", flag),
        var("HOROVOD_HIERARCHICAL_ALLREDUCE", flag),
    ],
    yaml: "params.hierarchical_allreduce",
    cli: |c| pair(c.hierarchical_allreduce, c.no_hierarchical_allreduce),
    file: |f| f.params.hierarchical_allreduce,
    default: false,
};

pub(super) const HIERARCHICAL_ALLGATHER: Opt<bool> = Opt {
    flag: "hierarchical-allgather",
    env: &[
        var("ELASTICRUN_HIERARCHICAL_ALLGATHER", flag),
        var("HOROVOD_HIERARCHICAL_ALLGATHER", flag),
    ],
    yaml: "params.hierarchical_allgather",
    cli: |c| pair(c.hierarchical_allgather, c.no_hierarchical_allgather),
    file: |f| f.params.hierarchical_allgather,
    default: false,
};

/// Bytes: a size with a suffix in the environment, an integer in the file
/// (as the autotuner writes it).
pub(super) const SEGMENT_SIZE: Opt<u64> = Opt {
    flag: "segment-size",
    env: &[var("ELASTICRUN_SEGMENT_SIZE", segment_size)],
    yaml: "params.segment_bytes",
    cli: |c| c.segment_size,
    file: |f| f.params.segment_bytes,
    default: 512 << 10,
};

// Autotune. Horovod's names for the settings count only when autotuning is on.

pub(super) const AUTOTUNE: Opt<bool> = Opt {
    flag: "autotune",
    env: &[
        var("ELASTICRUN_AUTOTUNE", flag),
        var("HOROVOD_AUTOTUNE", flag),
    ],
    yaml: "autotune.enabled",
    cli: |c| pair(c.autotune, c.no_autotune),
    file: |f| f.autotune.enabled,
    default: false,
};

pub(super) const AUTOTUNE_LOG_FILE: Opt<Option<PathBuf>> = Opt {
    flag: "autotune-log-file",
    env: &[
        var("ELASTICRUN_AUTOTUNE_LOG_FILE", some_path),
        var_when(When::Autotuning, "HOROVOD_AUTOTUNE_LOG", some_path),
    ],
    yaml: "autotune.log_file",
    cli: |c| c.autotune_log_file.clone().map(Some),
    file: |f| file_path(&f.autotune.log_file),
    default: None,
};

pub(super) const AUTOTUNE_WARMUP_SAMPLES: Opt<u32> = Opt {
    flag: "autotune-warmup-samples",
    env: &[
        var("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", samples),
        var_when(When::Autotuning, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", samples),
    ],
    yaml: "autotune.warmup_samples",
    cli: |c| c.autotune_warmup_samples,
    file: |f| f.autotune.warmup_samples,
    default: 3,
};

pub(super) const AUTOTUNE_STEPS_PER_SAMPLE: Opt<u32> = Opt {
    flag: "autotune-steps-per-sample",
    env: &[
        var("ELASTICRUN_AUTOTUNE_STEPS_PER_SAMPLE", samples),
        var_when(
            When::Autotuning,
            "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
            samples,
        ),
    ],
    yaml: "autotune.steps_per_sample",
    cli: |c| c.autotune_steps_per_sample,
    file: |f| f.autotune.steps_per_sample,
    default: 10,
};

pub(super) const AUTOTUNE_BAYES_OPT_MAX_SAMPLES: Opt<u32> = Opt {
    flag: "autotune-bayes-opt-max-samples",
    env: &[
        var("ELASTICRUN_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", samples),
        var_when(
            When::Autotuning,
            "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
            samples,
        ),
    ],
    yaml: "autotune.bayes_opt_max_samples",
    cli: |c| c.autotune_bayes_opt_max_samples,
    file: |f| f.autotune.bayes_opt_max_samples,
    default: 20,
};

pub(super) const AUTOTUNE_GAUSSIAN_PROCESS_NOISE: Opt<f64> = Opt {
    flag: "autotune-gaussian-process-noise",
    env: &[
        var("ELASTICRUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", number),
        var_when(
            When::Autotuning,
            "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
            number,
        ),
    ],
    yaml: "autotune.gaussian_process_noise",
    cli: |c| c.autotune_gaussian_process_noise,
    file: |f| f.autotune.gaussian_process_noise,
    default: 0.8,
};

// Elastic.

pub(super) const HOST_DISCOVERY_SCRIPT: Opt<Option<PathBuf>> = Opt {
    flag: "host-discovery-script",
    env: &[var("ELASTICRUN_HOST_DISCOVERY_SCRIPT", some_path)],
    yaml: "elastic.host_discovery_script",
    cli: |c| c.host_discovery_script.clone().map(Some),
    file: |f| file_path(&f.elastic.host_discovery_script),
    default: None,
};

pub(super) const MIN_NP: Opt<Option<usize>> = Opt {
    flag: "min-np",
    env: &[var("ELASTICRUN_MIN_NP", some_count)],
    yaml: "elastic.min_np",
    cli: |c| c.min_np.map(Some),
    file: |f| f.elastic.min_np.map(Some),
    default: None,
};

pub(super) const MAX_NP: Opt<Option<usize>> = Opt {
    flag: "max-np",
    env: &[var("ELASTICRUN_MAX_NP", some_count)],
    yaml: "elastic.max_np",
    cli: |c| c.max_np.map(Some),
    file: |f| f.elastic.max_np.map(Some),
    default: None,
};

pub(super) const SLOTS_PER_HOST: Opt<usize> = Opt {
    flag: "slots-per-host",
    env: &[var("ELASTICRUN_SLOTS_PER_HOST", count)],
    yaml: "elastic.slots_per_host",
    cli: |c| c.slots_per_host,
    file: |f| f.elastic.slots_per_host,
    default: 1,
};

/// Seconds.
pub(super) const ELASTIC_TIMEOUT: Opt<f64> = Opt {
    flag: "elastic-timeout",
    env: &[
        var(control::env::ELASTIC_TIMEOUT, number),
        var_when(When::ElasticJob, "HOROVOD_ELASTIC_TIMEOUT", number),
    ],
    yaml: "elastic.elastic_timeout",
    cli: |c| c.elastic_timeout,
    file: |f| f.elastic.elastic_timeout,
    default: 600.0,
};

/// Seconds.
pub(super) const REPLACEMENT_WAIT: Opt<f64> = Opt {
    flag: "replacement-wait",
    env: &[var("ELASTICRUN_REPLACEMENT_WAIT", number)],
    yaml: "elastic.replacement_wait",
    cli: |c| c.replacement_wait,
    file: |f| f.elastic.replacement_wait,
    default: 0.5,
};

pub(super) const RESET_LIMIT: Opt<Option<u32>> = Opt {
    flag: "reset-limit",
    env: &[var("ELASTICRUN_RESET_LIMIT", some_samples)],
    yaml: "elastic.reset_limit",
    cli: |c| c.reset_limit.map(Some),
    file: |f| f.elastic.reset_limit.map(Some),
    default: None,
};

/// `[MIN, MAX]` seconds; the count is checked after the pick (a hand-built
/// [`Cli`] may hold any number).
pub(super) const BLACKLIST_COOLDOWN_RANGE: Opt<Option<Vec<f64>>> = Opt {
    flag: "blacklist-cooldown-range",
    env: &[var("ELASTICRUN_BLACKLIST_COOLDOWN_RANGE", range)],
    yaml: "elastic.blacklist_cooldown_range",
    cli: |c| c.blacklist_cooldown_range.clone().map(Some),
    file: |f| {
        f.elastic
            .blacklist_cooldown_range
            .map(|(a, b)| Some(vec![a, b]))
    },
    default: None,
};

/// Seconds.
pub(super) const DISCOVERY_INTERVAL: Opt<f64> = Opt {
    flag: "discovery-interval",
    env: &[var("ELASTICRUN_DISCOVERY_INTERVAL", number)],
    yaml: "elastic.discovery_interval",
    cli: |c| c.discovery_interval,
    file: |f| f.elastic.discovery_interval,
    default: 1.0,
};

/// Seconds.
pub(super) const DISCOVERY_TIMEOUT: Opt<f64> = Opt {
    flag: "discovery-timeout",
    env: &[var("ELASTICRUN_DISCOVERY_TIMEOUT", number)],
    yaml: "elastic.discovery_timeout",
    cli: |c| c.discovery_timeout,
    file: |f| f.elastic.discovery_timeout,
    default: 10.0,
};

// Timeline.

pub(super) const TIMELINE_FILENAME: Opt<Option<PathBuf>> = Opt {
    flag: "timeline-filename",
    env: &[
        var("ELASTICRUN_TIMELINE_FILENAME", some_path),
        var("HOROVOD_TIMELINE", some_path),
    ],
    yaml: "timeline.filename",
    cli: |c| c.timeline_filename.clone().map(Some),
    file: |f| file_path(&f.timeline.filename),
    default: None,
};

pub(super) const TIMELINE_MARK_CYCLES: Opt<bool> = Opt {
    flag: "timeline-mark-cycles",
    env: &[
        var("ELASTICRUN_TIMELINE_MARK_CYCLES", flag),
        var("HOROVOD_TIMELINE_MARK_CYCLES", flag),
    ],
    yaml: "timeline.mark_cycles",
    cli: |c| pair(c.timeline_mark_cycles, c.no_timeline_mark_cycles),
    file: |f| f.timeline.mark_cycles,
    default: false,
};

// Stall check.

/// The file says the opposite: `stall_check: { enabled: false }`.
pub(super) const NO_STALL_CHECK: Opt<bool> = Opt {
    flag: "no-stall-check",
    env: &[
        var("ELASTICRUN_NO_STALL_CHECK", flag),
        var("HOROVOD_STALL_CHECK_DISABLE", flag),
    ],
    yaml: "stall_check.enabled",
    cli: |c| pair(c.no_stall_check, c.stall_check),
    file: |f| f.stall_check.enabled.map(|e| !e),
    default: false,
};

/// Seconds.
pub(super) const STALL_CHECK_WARNING_TIME_SECONDS: Opt<f64> = Opt {
    flag: "stall-check-warning-time-seconds",
    env: &[
        var("ELASTICRUN_STALL_CHECK_WARNING_TIME_SECONDS", number),
        var("HOROVOD_STALL_CHECK_TIME_SECONDS", number),
    ],
    yaml: "stall_check.warning_time_seconds",
    cli: |c| c.stall_check_warning_time_seconds,
    file: |f| f.stall_check.warning_time_seconds,
    default: 60.0,
};

/// Seconds; 0 = never.
pub(super) const STALL_CHECK_SHUTDOWN_TIME_SECONDS: Opt<f64> = Opt {
    flag: "stall-check-shutdown-time-seconds",
    env: &[
        var("ELASTICRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS", number),
        var("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", number),
    ],
    yaml: "stall_check.shutdown_time_seconds",
    cli: |c| c.stall_check_shutdown_time_seconds,
    file: |f| f.stall_check.shutdown_time_seconds,
    default: 0.0,
};

// Controller and library (horovodrun's `library_options`).

/// Seconds; the data plane's operation timeout.
pub(super) const GLOO_TIMEOUT_SECONDS: Opt<f64> = Opt {
    flag: "gloo-timeout-seconds",
    env: &[
        var(control::env::GLOO_TIMEOUT_SECONDS, number),
        var("HOROVOD_GLOO_TIMEOUT_SECONDS", number),
    ],
    yaml: "library_options.gloo_timeout_seconds",
    cli: |c| c.gloo_timeout_seconds,
    file: |f| f.library_options.gloo_timeout_seconds,
    default: 60.0,
};

/// One CPU per slot of a host.
pub(super) const THREAD_AFFINITY: Opt<Option<Vec<usize>>> = Opt {
    flag: "thread-affinity",
    env: &[
        var(control::env::THREAD_AFFINITY, cpus),
        var("HOROVOD_THREAD_AFFINITY", cpus),
    ],
    yaml: "library_options.thread_affinity",
    cli: |c| c.thread_affinity.clone().map(|l| Some(l.0)),
    file: |f| f.library_options.thread_affinity.clone().map(Some),
    default: None,
};

/// The data plane between the workers.
pub(super) const TRANSPORT: Opt<control::env::TransportKind> = Opt {
    flag: "transport",
    env: &[var(control::env::TRANSPORT, transport)],
    yaml: "library_options.transport",
    cli: |c| c.transport,
    file: |f| f.library_options.transport,
    default: control::env::TransportKind::Tcp,
};

/// Ranks of one host on their TCP connections rather than shared memory
/// (`--transport tcp` and `tls`: QUIC never uses shared memory). The file says
/// the opposite: `library_options: { shared_memory: false }`.
pub(super) const NO_SHARED_MEMORY: Opt<bool> = Opt {
    flag: "no-shared-memory",
    env: &[var("ELASTICRUN_NO_SHARED_MEMORY", flag)],
    yaml: "library_options.shared_memory",
    cli: |c| pair(c.no_shared_memory, c.shared_memory),
    file: |f| f.library_options.shared_memory.map(|on| !on),
    default: false,
};

pub(super) const TCP: Opt<bool> = Opt {
    flag: "tcp",
    env: &[var("ELASTICRUN_TCP", flag)],
    yaml: "library_options.tcp",
    cli: |c| on(c.tcp),
    file: |f| f.library_options.tcp,
    default: false,
};

// Output and logging.

pub(super) const OUTPUT_FILENAME: Opt<Option<PathBuf>> = Opt {
    flag: "output-filename",
    env: &[var("ELASTICRUN_OUTPUT_FILENAME", some_path)],
    yaml: "launch.output_filename",
    cli: |c| c.output_filename.clone().map(Some),
    file: |f| file_path(&f.launch.output_filename),
    default: None,
};

pub(super) const PREFIX_OUTPUT_WITH_TIMESTAMP: Opt<bool> = Opt {
    flag: "prefix-output-with-timestamp",
    env: &[var("ELASTICRUN_PREFIX_OUTPUT_WITH_TIMESTAMP", flag)],
    yaml: "launch.prefix_output_with_timestamp",
    cli: |c| on(c.prefix_output_with_timestamp),
    file: |f| f.launch.prefix_output_with_timestamp,
    default: false,
};

/// Checked as a [`super::LogLevel`] after the pick, whichever layer gave it.
/// `--verbose` on the command line is `debug`, unless `--log-level` is given.
pub(super) const LOG_LEVEL: Opt<Cow<'static, str>> = Opt {
    flag: "log-level",
    env: &[
        var("ELASTICRUN_LOG_LEVEL", text),
        var("HOROVOD_LOG_LEVEL", text),
    ],
    yaml: "logging.level",
    cli: |c| {
        let verbose = c.verbose.then_some(Cow::Borrowed("debug"));
        c.log_level.clone().map(Cow::Owned).or(verbose)
    },
    file: |f| f.logging.level.clone().map(Cow::Owned),
    default: Cow::Borrowed("warning"),
};

pub(super) const LOG_WITHOUT_TIMESTAMP: Opt<bool> = Opt {
    flag: "log-without-timestamp",
    env: &[
        var("ELASTICRUN_LOG_WITHOUT_TIMESTAMP", flag),
        var("HOROVOD_LOG_HIDE_TIME", flag),
    ],
    yaml: "logging.hide_timestamp",
    cli: |c| pair(c.log_without_timestamp, c.log_with_timestamp),
    file: |f| f.logging.hide_timestamp,
    default: false,
};

#[cfg(test)]
#[path = "options_tests.rs"]
mod tests;
