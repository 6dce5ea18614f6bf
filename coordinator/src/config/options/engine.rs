//! The engine's options: tuneable parameters, autotune, the timeline, the
//! stall check, and the controller and library (horovodrun's
//! `library_options`).

use std::path::PathBuf;

use control::env::{Connections, TransportKind};

use super::super::parse::{
    bytes_as_mb, connections, count, cpus, flag, number, parse_size, samples, some_path, transport,
};
use super::Form::{Pair, Switch, Value};
use super::{Negation, Opt, When, arg, hidden_negation, key, key_negated, var, var_when};

const TUNING: &str = "Tuneable parameters";
const AUTOTUNING: &str = "Autotune";
const TIMELINE: &str = "Timeline";
const STALL_CHECK: &str = "Stall check";
const LIBRARY: &str = "Controller and library";

/// MiB.
pub(in super::super) const FUSION_THRESHOLD_MB: Opt<f64> = Opt {
    flag: "fusion-threshold-mb",
    arg: arg(
        TUNING,
        Value("MB"),
        "Fusion buffer size in MiB; 0 disables fusion [default: 64].",
    ),
    env: &[
        var("ELASTICRUN_FUSION_THRESHOLD_MB", number),
        var("HOROVOD_FUSION_THRESHOLD", bytes_as_mb),
    ],
    yaml: key("params.fusion_threshold_mb"),
    default: 64.0,
};

/// Milliseconds.
pub(in super::super) const CYCLE_TIME_MS: Opt<f64> = Opt {
    flag: "cycle-time-ms",
    arg: arg(
        TUNING,
        Value("MS"),
        "Milliseconds between the negotiation rounds a rank starts for news no submission \
         carries (leaving, joined, new settings); new submissions, and other ranks' rounds, start \
         one at once, and ranks with nothing to agree on run none [default: 1].",
    ),
    env: &[
        var("ELASTICRUN_CYCLE_TIME_MS", number),
        var("HOROVOD_CYCLE_TIME", number),
    ],
    yaml: key("params.cycle_time_ms"),
    default: 1.0,
};

pub(in super::super) const CACHE_CAPACITY: Opt<usize> = Opt {
    flag: "cache-capacity",
    arg: arg(
        TUNING,
        Value("N"),
        "Tensor names kept in the response cache [default: 1024].",
    ),
    env: &[
        var("ELASTICRUN_CACHE_CAPACITY", count),
        var("HOROVOD_CACHE_CAPACITY", count),
    ],
    yaml: key("params.cache_capacity"),
    default: 1024,
};

pub(in super::super) const DISABLE_CACHE: Opt<bool> = Opt {
    flag: "disable-cache",
    arg: arg(
        TUNING,
        Switch,
        "Turn the response cache off (same as --cache-capacity 0).",
    ),
    env: &[var("ELASTICRUN_DISABLE_CACHE", flag)],
    yaml: key("params.disable_cache"),
    default: false,
};

pub(in super::super) const HIERARCHICAL_ALLREDUCE: Opt<bool> = Opt {
    flag: "hierarchical-allreduce",
    arg: arg(
        TUNING,
        Pair(Negation {
            flag: "no-hierarchical-allreduce",
            help: Some("Plain ring allreduce across all ranks."),
            aliases: &[],
        }),
        "Reduce within each host first, then across hosts [default: off].",
    ),
    env: &[
        var("ELASTICRUN_HIERARCHICAL_ALLREDUCE", flag),
        var("HOROVOD_HIERARCHICAL_ALLREDUCE", flag),
    ],
    yaml: key("params.hierarchical_allreduce"),
    default: false,
};

pub(in super::super) const HIERARCHICAL_ALLGATHER: Opt<bool> = Opt {
    flag: "hierarchical-allgather",
    arg: arg(
        TUNING,
        Pair(Negation {
            flag: "no-hierarchical-allgather",
            help: Some("Plain ring allgather across all ranks."),
            aliases: &[],
        }),
        "Gather within each host first, then across hosts [default: off].",
    ),
    env: &[
        var("ELASTICRUN_HIERARCHICAL_ALLGATHER", flag),
        var("HOROVOD_HIERARCHICAL_ALLGATHER", flag),
    ],
    yaml: key("params.hierarchical_allgather"),
    default: false,
};

/// Bytes: a size with a suffix on the command line and in the environment,
/// an integer in the file (as the autotuner writes it); the range is checked
/// after the pick, whichever layer gave it.
pub(in super::super) const SEGMENT_SIZE: Opt<u64> = Opt {
    flag: "segment-size",
    arg: arg(
        TUNING,
        Value("SIZE"),
        "Bytes per message in the segmented ring, chain and alltoall collectives: bytes or with \
         a K, M or G suffix (binary), from 4K to 1G [default: 512K].",
    ),
    env: &[var("ELASTICRUN_SEGMENT_SIZE", parse_size)],
    yaml: key("params.segment_bytes"),
    default: 512 << 10,
};

// Autotune. Horovod's names for the settings count only when autotuning is on.

pub(in super::super) const AUTOTUNE: Opt<bool> = Opt {
    flag: "autotune",
    arg: arg(
        AUTOTUNING,
        hidden_negation("no-autotune"),
        "Search for the best tuneable parameters while training; the ones given here, in the \
         environment or the config file stay fixed [default: off].",
    ),
    env: &[
        var("ELASTICRUN_AUTOTUNE", flag),
        var("HOROVOD_AUTOTUNE", flag),
    ],
    yaml: key("autotune.enabled"),
    default: false,
};

pub(in super::super) const AUTOTUNE_LOG_FILE: Opt<Option<PathBuf>> = Opt {
    flag: "autotune-log-file",
    arg: arg(
        AUTOTUNING,
        Value("FILE"),
        "Write a comma-separated log of the autotune samples to FILE [default: none].",
    ),
    env: &[
        var("ELASTICRUN_AUTOTUNE_LOG_FILE", some_path),
        var_when(When::Autotuning, "HOROVOD_AUTOTUNE_LOG", some_path),
    ],
    yaml: key("autotune.log_file"),
    default: None,
};

pub(in super::super) const AUTOTUNE_WARMUP_SAMPLES: Opt<u32> = Opt {
    flag: "autotune-warmup-samples",
    arg: arg(
        AUTOTUNING,
        Value("N"),
        "Samples discarded before tuning begins [default: 3].",
    ),
    env: &[
        var("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", samples),
        var_when(When::Autotuning, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", samples),
    ],
    yaml: key("autotune.warmup_samples"),
    default: 3,
};

pub(in super::super) const AUTOTUNE_STEPS_PER_SAMPLE: Opt<u32> = Opt {
    flag: "autotune-steps-per-sample",
    arg: arg(
        AUTOTUNING,
        Value("N"),
        "Steps (approximately) recorded in one sample; at least 1 [default: 10].",
    ),
    env: &[
        var("ELASTICRUN_AUTOTUNE_STEPS_PER_SAMPLE", samples),
        var_when(
            When::Autotuning,
            "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
            samples,
        ),
    ],
    yaml: key("autotune.steps_per_sample"),
    default: 10,
};

pub(in super::super) const AUTOTUNE_BAYES_OPT_MAX_SAMPLES: Opt<u32> = Opt {
    flag: "autotune-bayes-opt-max-samples",
    arg: arg(
        AUTOTUNING,
        Value("N"),
        "Most samples each Bayesian optimization collects; at least 1 [default: 20].",
    ),
    env: &[
        var("ELASTICRUN_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", samples),
        var_when(
            When::Autotuning,
            "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
            samples,
        ),
    ],
    yaml: key("autotune.bayes_opt_max_samples"),
    default: 20,
};

pub(in super::super) const AUTOTUNE_GAUSSIAN_PROCESS_NOISE: Opt<f64> = Opt {
    flag: "autotune-gaussian-process-noise",
    arg: arg(
        AUTOTUNING,
        Value("X"),
        "Regularization for the noise in the samples (the Gaussian process's alpha), 0 or more \
         [default: 0.8].",
    ),
    env: &[
        var("ELASTICRUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", number),
        var_when(
            When::Autotuning,
            "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
            number,
        ),
    ],
    yaml: key("autotune.gaussian_process_noise"),
    default: 0.8,
};

// Timeline.

pub(in super::super) const TIMELINE_FILENAME: Opt<Option<PathBuf>> = Opt {
    flag: "timeline-filename",
    arg: arg(
        TIMELINE,
        Value("FILE"),
        "Write a Chrome-trace timeline of every tensor to FILE [default: none].",
    ),
    env: &[
        var("ELASTICRUN_TIMELINE_FILENAME", some_path),
        var("HOROVOD_TIMELINE", some_path),
    ],
    yaml: key("timeline.filename"),
    default: None,
};

pub(in super::super) const TIMELINE_MARK_CYCLES: Opt<bool> = Opt {
    flag: "timeline-mark-cycles",
    arg: arg(
        TIMELINE,
        hidden_negation("no-timeline-mark-cycles"),
        "Mark negotiation cycles on the timeline.",
    ),
    env: &[
        var("ELASTICRUN_TIMELINE_MARK_CYCLES", flag),
        var("HOROVOD_TIMELINE_MARK_CYCLES", flag),
    ],
    yaml: key("timeline.mark_cycles"),
    default: false,
};

// Stall check.

/// The file says the opposite: `stall_check: { enabled: false }`.
pub(in super::super) const NO_STALL_CHECK: Opt<bool> = Opt {
    flag: "no-stall-check",
    arg: arg(
        STALL_CHECK,
        hidden_negation("stall-check"),
        "Turn the stall inspector off.",
    ),
    env: &[
        var("ELASTICRUN_NO_STALL_CHECK", flag),
        var("HOROVOD_STALL_CHECK_DISABLE", flag),
    ],
    yaml: key_negated("stall_check.enabled"),
    default: false,
};

/// Seconds.
pub(in super::super) const STALL_CHECK_WARNING_TIME_SECONDS: Opt<f64> = Opt {
    flag: "stall-check-warning-time-seconds",
    arg: arg(
        STALL_CHECK,
        Value("SECONDS"),
        "Seconds a tensor may wait on other ranks before a warning [default: 60].",
    ),
    env: &[
        var("ELASTICRUN_STALL_CHECK_WARNING_TIME_SECONDS", number),
        var("HOROVOD_STALL_CHECK_TIME_SECONDS", number),
    ],
    yaml: key("stall_check.warning_time_seconds"),
    default: 60.0,
};

/// Seconds; 0 = never.
pub(in super::super) const STALL_CHECK_SHUTDOWN_TIME_SECONDS: Opt<f64> = Opt {
    flag: "stall-check-shutdown-time-seconds",
    arg: arg(
        STALL_CHECK,
        Value("SECONDS"),
        "Seconds a tensor may wait before the job is ended; 0 = never [default: 0].",
    ),
    env: &[
        var("ELASTICRUN_STALL_CHECK_SHUTDOWN_TIME_SECONDS", number),
        var("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", number),
    ],
    yaml: key("stall_check.shutdown_time_seconds"),
    default: 0.0,
};

// Controller and library.

/// Seconds; the data plane's operation timeout.
pub(in super::super) const GLOO_TIMEOUT_SECONDS: Opt<f64> = Opt {
    flag: "gloo-timeout-seconds",
    arg: arg(
        LIBRARY,
        Value("SECONDS"),
        "Seconds one data-plane send or receive between two ranks may wait before the peer \
         counts as unresponsive and the collective fails [default: 60].",
    ),
    env: &[
        var(control::env::GLOO_TIMEOUT_SECONDS, number),
        var("HOROVOD_GLOO_TIMEOUT_SECONDS", number),
    ],
    yaml: key("library_options.gloo_timeout_seconds"),
    default: 60.0,
};

/// One CPU per slot of a host.
pub(in super::super) const THREAD_AFFINITY: Opt<Option<Vec<usize>>> = Opt {
    flag: "thread-affinity",
    arg: arg(
        LIBRARY,
        Value("CPU,..."),
        "Pin each worker's engine thread to a CPU: CPU ids separated by commas, one per slot of a \
         host (the worker of slot N takes the Nth; the same list on every host) [default: not \
         pinned].",
    ),
    env: &[
        var(control::env::THREAD_AFFINITY, cpus),
        var("HOROVOD_THREAD_AFFINITY", cpus),
    ],
    yaml: key("library_options.thread_affinity"),
    default: None,
};

/// The data plane between the workers.
pub(in super::super) const TRANSPORT: Opt<TransportKind> = Opt {
    flag: "transport",
    arg: arg(
        LIBRARY,
        Value("tcp|quic|tls"),
        "The data plane between the workers: tcp (connections that prove they belong to the job; \
         payloads in the clear), quic (QUIC under mutual TLS 1.3 with a certificate authority \
         made for the job: every byte between workers authenticated and encrypted; the control \
         connections to the coordinator run inside TLS too) or tls (TCP under the same mutual TLS \
         1.3: as encrypted as quic, and the faster of the two on links of 1,500-byte frames) \
         [default: tcp].",
    ),
    env: &[var(control::env::TRANSPORT, transport)],
    yaml: key("library_options.transport"),
    default: TransportKind::Tcp,
};

/// When the data plane's connections are made.
pub(in super::super) const CONNECTIONS: Opt<Connections> = Opt {
    flag: "connections",
    arg: arg(
        LIBRARY,
        Value("all|on-demand"),
        "When the workers' data plane connects: all (every pair of ranks before each \
         generation starts: n-1 connections in every worker) or on-demand (a pair when a \
         collective first sends between them, then for the rest of the generation: a ring's \
         two neighbours, recursive doubling's partners; the loss of a peer still reaches every \
         rank; over TCP the next generation takes up the links of the pairs that stay, shared \
         memory included). Every --transport [default: on-demand].",
    ),
    env: &[var(control::env::CONNECTIONS, connections)],
    yaml: key("library_options.connections"),
    default: Connections::OnDemand,
};

/// Ranks of one host on their TCP connections rather than shared memory
/// (`--transport tcp` and `tls`: QUIC never uses shared memory). The file says
/// the opposite: `library_options: { shared_memory: false }`.
pub(in super::super) const NO_SHARED_MEMORY: Opt<bool> = Opt {
    flag: "no-shared-memory",
    arg: arg(
        LIBRARY,
        Pair(Negation {
            flag: "shared-memory",
            help: Some(
                "Shared memory between ranks of one host (the default; undoes \
                 --no-shared-memory, ELASTICRUN_NO_SHARED_MEMORY or the config file's \
                 shared_memory: false).",
            ),
            aliases: &[],
        }),
        "Keep ranks on one host on their TCP connections (or TLS sessions) instead of shared \
         memory (default: shared memory between ranks of one host, TCP between hosts). \
         --transport tcp and tls use shared memory (tls offers it inside the pair's TLS session); \
         with quic every peer is reached over its QUIC connection.",
    ),
    env: &[var("ELASTICRUN_NO_SHARED_MEMORY", flag)],
    yaml: key_negated("library_options.shared_memory"),
    default: false,
};

pub(in super::super) const TCP: Opt<bool> = Opt {
    flag: "tcp",
    arg: arg(
        LIBRARY,
        Switch,
        "Keep the data plane on plain TCP: refuses --transport quic and tls [default: off].",
    ),
    env: &[var("ELASTICRUN_TCP", flag)],
    yaml: key("library_options.tcp"),
    default: false,
};
