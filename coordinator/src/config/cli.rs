//! The command line, with horovodrun's flag names. Every option is optional here
//! (so that "given on the command line" is known); defaults are applied by
//! [`super::resolve()`], after the environment and the config file, and stated in
//! the help.
//!
//! Options are recognized up to the command: the first word that is not an
//! option (or follows `--`) starts the training command, and everything from
//! there on is the program's own. An unknown option before it is an error
//! with a suggestion, never the start of the command. horovodrun's flags are
//! accepted, including its single-dash spellings (`super::argv`); those
//! that ask for MPI or jsrun are refused with what elasticrun does instead.

use std::path::PathBuf;

use clap::{ArgAction, Parser};

#[derive(Clone, Debug, Default, Parser, PartialEq)]
#[command(
    name = "elasticrun",
    version,
    disable_version_flag = true,
    about = "Run a training program as many cooperating processes, on one machine or over ssh",
    after_help = "Options are read up to COMMAND; everything after it is the program's own \
(elasticrun -np 2 ./train --epochs 5). Put -- before a COMMAND that starts with '-'.

Every option can also come from an ELASTICRUN_<OPTION> environment variable \
(e.g. ELASTICRUN_CYCLE_TIME_MS=2) or the YAML --config-file; Horovod's HOROVOD_* variables are \
accepted too. Precedence: command line > environment > config file > default.

`elasticrun serve --etcd URL --job NAME --secret-file FILE [OPTIONS]` runs the coordinator of a job \
whose workers start by themselves (Kubernetes pods) and find it through etcd; see \
`elasticrun serve --help`.",
    override_usage = "elasticrun [OPTIONS] [-np N] [-H HOST:SLOTS,... | --hostfile FILE | --host-discovery-script SCRIPT] [--] COMMAND [ARGS]..."
)]
pub struct Cli {
    /// Print the version and exit.
    #[arg(short = 'v', long, short_alias = 'V', action = ArgAction::Version)]
    version: Option<bool>,
    /// Number of worker processes [default: the total slots of the hosts].
    #[arg(
        long = "num-proc",
        alias = "np",
        value_name = "N",
        help_heading = "Launching"
    )]
    pub np: Option<usize>,
    /// Hosts and slots, e.g. a:4,b:4 [default: localhost with -np slots].
    #[arg(
        short = 'H',
        long = "hosts",
        value_name = "HOST:SLOTS,...",
        help_heading = "Launching"
    )]
    pub hosts: Option<String>,
    /// File with one `host slots=N` or `host:N` line per host.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "hosts",
        help_heading = "Launching"
    )]
    pub hostfile: Option<PathBuf>,
    /// Seconds to wait for every worker to start and register [default: 30]. In a static job where no worker registers by then, the program is taken for one that does not use the runtime and supervised until it exits.
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Launching"
    )]
    pub start_timeout: Option<f64>,
    /// Times every worker of a static job is started again after one fails, as torchrun's --max-restarts: a program that resumes from its own checkpoint survives failures (TORCHELASTIC_RESTART_COUNT says which start it is) [default: 0].
    #[arg(long, value_name = "N", help_heading = "Launching")]
    pub max_restarts: Option<u32>,
    /// Seconds a worker that lost its connection to the coordinator keeps trying to reconnect before it exits [default: 10].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Launching"
    )]
    pub coordinator_timeout: Option<f64>,
    /// Seconds without a heartbeat after which elasticrun takes a worker for failed: how soon a host cut from the network is noticed [default: 15]. At least 2: workers send one a second.
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Launching"
    )]
    pub heartbeat_timeout: Option<f64>,
    /// Interface whose address the coordinator listens on; workers reach it, and each other, from the address they reach it through; one interface [default: any].
    #[arg(
        long,
        visible_alias = "network-interfaces",
        value_name = "IFACE",
        help_heading = "Launching"
    )]
    pub network_interface: Option<String>,
    /// YAML file of options (horovodrun's layout).
    #[arg(long, value_name = "FILE", help_heading = "Launching")]
    pub config_file: Option<PathBuf>,
    /// Say what this build of elasticrun can run on, and exit (also -cb).
    #[arg(long, help_heading = "Launching")]
    pub check_build: bool,

    /// SSH port of the remote hosts [default: ssh's own].
    #[arg(
        short = 'p',
        long = "ssh-port",
        value_name = "PORT",
        help_heading = "SSH"
    )]
    pub ssh_port: Option<u16>,
    /// SSH private key for the remote hosts [default: ssh's own].
    #[arg(
        short = 'i',
        long = "ssh-identity-file",
        value_name = "FILE",
        help_heading = "SSH"
    )]
    pub ssh_identity_file: Option<PathBuf>,

    /// Fusion buffer size in MiB; 0 disables fusion [default: 64].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "MB",
        help_heading = "Tuneable parameters"
    )]
    pub fusion_threshold_mb: Option<f64>,
    /// Milliseconds between the negotiation rounds a rank starts for news no
    /// submission carries (leaving, joined, new settings); new submissions,
    /// and other ranks' rounds, start one at once, and ranks with nothing to
    /// agree on run none [default: 1].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "MS",
        help_heading = "Tuneable parameters"
    )]
    pub cycle_time_ms: Option<f64>,
    /// Tensor names kept in the response cache [default: 1024].
    #[arg(long, value_name = "N", help_heading = "Tuneable parameters")]
    pub cache_capacity: Option<usize>,
    /// Turn the response cache off (same as --cache-capacity 0).
    #[arg(long, action = ArgAction::SetTrue, help_heading = "Tuneable parameters")]
    pub disable_cache: bool,
    /// Reduce within each host first, then across hosts [default: off].
    #[arg(
        long,
        overrides_with = "no_hierarchical_allreduce",
        help_heading = "Tuneable parameters"
    )]
    pub hierarchical_allreduce: bool,
    /// Plain ring allreduce across all ranks.
    #[arg(
        long,
        overrides_with = "hierarchical_allreduce",
        help_heading = "Tuneable parameters"
    )]
    pub no_hierarchical_allreduce: bool,
    /// Gather within each host first, then across hosts [default: off].
    #[arg(
        long,
        overrides_with = "no_hierarchical_allgather",
        help_heading = "Tuneable parameters"
    )]
    pub hierarchical_allgather: bool,
    /// Plain ring allgather across all ranks.
    #[arg(
        long,
        overrides_with = "hierarchical_allgather",
        help_heading = "Tuneable parameters"
    )]
    pub no_hierarchical_allgather: bool,
    /// Bytes per message in the segmented ring, chain and alltoall collectives: bytes or with a K, M or G suffix (binary), from 4K to 1G [default: 512K].
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "SIZE",
        value_parser = super::parse_size,
        help_heading = "Tuneable parameters"
    )]
    pub segment_size: Option<u64>,

    /// Search for the best tuneable parameters while training; the ones given here, in the environment or the config file stay fixed [default: off].
    #[arg(long, overrides_with = "no_autotune", help_heading = "Autotune")]
    pub autotune: bool,
    /// No autotuning (horovodrun's hidden negation).
    #[arg(long, overrides_with = "autotune", hide = true)]
    pub no_autotune: bool,
    /// Write a comma-separated log of the autotune samples to FILE [default: none].
    #[arg(long, value_name = "FILE", help_heading = "Autotune")]
    pub autotune_log_file: Option<PathBuf>,
    /// Samples discarded before tuning begins [default: 3].
    #[arg(long, value_name = "N", help_heading = "Autotune")]
    pub autotune_warmup_samples: Option<u32>,
    /// Steps (approximately) recorded in one sample; at least 1 [default: 10].
    #[arg(long, value_name = "N", help_heading = "Autotune")]
    pub autotune_steps_per_sample: Option<u32>,
    /// Most samples each Bayesian optimization collects; at least 1 [default: 20].
    #[arg(long, value_name = "N", help_heading = "Autotune")]
    pub autotune_bayes_opt_max_samples: Option<u32>,
    /// Regularization for the noise in the samples (the Gaussian process's alpha), 0 or more [default: 0.8].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "X",
        help_heading = "Autotune"
    )]
    pub autotune_gaussian_process_noise: Option<f64>,

    /// Script printing the hosts available now, one `host` or `host:slots` per line (run through the shell, so it may carry arguments); makes the job elastic [default: none].
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["hosts", "hostfile"],
        help_heading = "Elastic"
    )]
    pub host_discovery_script: Option<PathBuf>,
    /// Fewest processes training continues with; with fewer it waits for hosts [default: -np].
    #[arg(
        long = "min-np",
        visible_alias = "min-num-proc",
        value_name = "N",
        help_heading = "Elastic"
    )]
    pub min_np: Option<usize>,
    /// Most processes; further slots stay unused [default: no limit].
    #[arg(
        long = "max-np",
        visible_alias = "max-num-proc",
        value_name = "N",
        help_heading = "Elastic"
    )]
    pub max_np: Option<usize>,
    /// Slots of a discovered host printed without a count [default: 1].
    #[arg(long, value_name = "N", help_heading = "Elastic")]
    pub slots_per_host: Option<usize>,
    /// Seconds to wait for at least --min-np processes, at the start and after hosts are lost [default: 600].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Elastic"
    )]
    pub elastic_timeout: Option<f64>,
    /// Seconds the survivors of a failure wait for the workers started in place of the failed ones before they train on without them; later ones join at the next commit [default: 0.5].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Elastic"
    )]
    pub replacement_wait: Option<f64>,
    /// Times the workers may be reset (workers lost, hosts added or removed) before the job ends; with 0 the first reset ends it [default: unlimited].
    #[arg(long, value_name = "N", help_heading = "Elastic")]
    pub reset_limit: Option<u32>,
    /// Seconds a failing host stays blacklisted: MIN, doubling with each blacklisting up to MAX [default: none, blacklisted hosts stay out].
    #[arg(
        long,
        num_args = 2,
        value_names = ["MIN", "MAX"],
        action = ArgAction::Set,
        help_heading = "Elastic"
    )]
    pub blacklist_cooldown_range: Option<Vec<f64>>,
    /// Seconds between runs of the discovery script [default: 1].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Elastic"
    )]
    pub discovery_interval: Option<f64>,
    /// Seconds a discovery run may take; a slower run is killed and counts as failed [default: 10].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Elastic"
    )]
    pub discovery_timeout: Option<f64>,

    /// Write a Chrome-trace timeline of every tensor to FILE [default: none].
    #[arg(long, value_name = "FILE", help_heading = "Timeline")]
    pub timeline_filename: Option<PathBuf>,
    /// Mark negotiation cycles on the timeline.
    #[arg(
        long,
        overrides_with = "no_timeline_mark_cycles",
        help_heading = "Timeline"
    )]
    pub timeline_mark_cycles: bool,
    /// Do not mark cycles (horovodrun's hidden negation).
    #[arg(long, overrides_with = "timeline_mark_cycles", hide = true)]
    pub no_timeline_mark_cycles: bool,

    /// Turn the stall inspector off.
    #[arg(long, overrides_with = "stall_check", help_heading = "Stall check")]
    pub no_stall_check: bool,
    /// Keep the stall inspector on (horovodrun's hidden negation).
    #[arg(long, overrides_with = "no_stall_check", hide = true)]
    pub stall_check: bool,
    /// Seconds a tensor may wait on other ranks before a warning [default: 60].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Stall check"
    )]
    pub stall_check_warning_time_seconds: Option<f64>,
    /// Seconds a tensor may wait before the job is ended; 0 = never [default: 0].
    #[arg(
        long,
        allow_negative_numbers = true,
        value_name = "SECONDS",
        help_heading = "Stall check"
    )]
    pub stall_check_shutdown_time_seconds: Option<f64>,

    /// Accepted for horovodrun's command lines: elasticrun is always its own controller, starting and connecting the processes the way horovodrun --gloo does.
    #[arg(long, help_heading = "Controller and library")]
    pub gloo: bool,
    /// Seconds one data-plane send or receive between two ranks may wait before the peer counts as unresponsive and the collective fails [default: 60].
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "SECONDS",
        help_heading = "Controller and library"
    )]
    pub gloo_timeout_seconds: Option<f64>,
    /// Pin each worker's engine thread to a CPU: CPU ids separated by commas, one per slot of a host (the worker of slot N takes the Nth; the same list on every host) [default: not pinned].
    #[arg(
        long,
        value_name = "CPU,...",
        value_parser = cpu_list,
        help_heading = "Controller and library"
    )]
    pub thread_affinity: Option<CpuList>,
    /// The data plane between the workers: tcp (connections that prove they belong to the job; payloads in the clear), quic (QUIC under mutual TLS 1.3 with a certificate authority made for the job: every byte between workers authenticated and encrypted; the control connections to the coordinator run inside TLS too) or tls (TCP under the same mutual TLS 1.3: as encrypted as quic, and the faster of the two on links of 1,500-byte frames) [default: tcp].
    #[arg(
        long,
        value_name = "tcp|quic|tls",
        value_parser = transport,
        help_heading = "Controller and library"
    )]
    pub transport: Option<control::env::TransportKind>,
    /// Keep ranks on one host on their TCP connections (or TLS sessions) instead of shared memory (default: shared memory between ranks of one host, TCP between hosts). --transport tcp and tls use shared memory (tls offers it inside the pair's TLS session); with quic every peer is reached over its QUIC connection.
    #[arg(
        long,
        overrides_with = "shared_memory",
        help_heading = "Controller and library"
    )]
    pub no_shared_memory: bool,
    /// Shared memory between ranks of one host (the default; undoes --no-shared-memory, ELASTICRUN_NO_SHARED_MEMORY or the config file's shared_memory: false).
    #[arg(
        long,
        overrides_with = "no_shared_memory",
        help_heading = "Controller and library"
    )]
    pub shared_memory: bool,
    /// Keep the data plane on plain TCP: refuses --transport quic and tls [default: off].
    #[arg(long, help_heading = "Controller and library")]
    pub tcp: bool,
    /// Refused: elasticrun does not use MPI (it is its own controller, as with --gloo).
    #[arg(long, help_heading = "Controller and library")]
    pub mpi: bool,
    /// Refused: elasticrun does not launch through jsrun; it starts processes itself, here or over ssh.
    #[arg(long, help_heading = "Controller and library")]
    pub jsrun: bool,
    /// Refused: there is no mpirun to pass arguments to.
    #[arg(
        long,
        value_name = "ARGS",
        allow_hyphen_values = true,
        help_heading = "Controller and library"
    )]
    pub mpi_args: Option<String>,
    /// Refused: elasticrun does not bind processes (--thread-affinity pins the engine's thread).
    #[arg(
        long,
        value_name = "ARGS",
        allow_hyphen_values = true,
        help_heading = "Controller and library"
    )]
    pub binding_args: Option<String>,
    /// Refused: without MPI there are no MPI threads to disable.
    #[arg(
        long,
        overrides_with = "no_mpi_threads_disable",
        help_heading = "Controller and library"
    )]
    pub mpi_threads_disable: bool,
    /// Asks for nothing: accepted (horovodrun's hidden negation).
    #[arg(long, overrides_with = "mpi_threads_disable", hide = true)]
    pub no_mpi_threads_disable: bool,
    /// Only 1 (horovodrun's default): a rank's NCCL collectives run on one CUDA stream.
    #[arg(long, value_name = "N", help_heading = "Controller and library")]
    pub num_nccl_streams: Option<u32>,

    /// Write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub output_filename: Option<PathBuf>,
    /// Prefix every forwarded line with the time it was received (also -prefix-timestamp).
    #[arg(long, help_heading = "Output")]
    pub prefix_output_with_timestamp: bool,

    /// trace, debug, info, warning, error [default: warning]: elasticrun's own
    /// log lines and those of the runtime in every worker.
    #[arg(long, value_name = "LEVEL", help_heading = "Logging")]
    pub log_level: Option<String>,
    /// Log what elasticrun does as it starts the job (--log-level debug, unless --log-level is given).
    #[arg(long, help_heading = "Logging")]
    pub verbose: bool,
    /// Leave timestamps out of elasticrun's own log lines.
    #[arg(
        long,
        alias = "log-hide-timestamp",
        overrides_with = "log_with_timestamp",
        help_heading = "Logging"
    )]
    pub log_without_timestamp: bool,
    /// Keep the timestamps (horovodrun's hidden negation).
    #[arg(
        long,
        alias = "no-log-hide-timestamp",
        overrides_with = "log_without_timestamp",
        hide = true
    )]
    pub log_with_timestamp: bool,

    /// The training program and its arguments.
    /// Passed on as given, bytes that are not UTF-8 included.
    #[arg(
        required_unless_present = "check_build",
        trailing_var_arg = true,
        value_name = "COMMAND",
        value_parser = clap::value_parser!(std::ffi::OsString)
    )]
    pub command: Vec<std::ffi::OsString>,
    /// `elasticrun serve`: a coordinator for workers that register by
    /// themselves; no COMMAND, the hosts are the workers' nodes.
    #[arg(skip)]
    pub serve: bool,
}

/// `--thread-affinity`'s CPU ids, in slot order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// `--thread-affinity`'s value: CPU ids separated by commas.
fn cpu_list(s: &str) -> Result<CpuList, control::env::CpuListError> {
    control::env::parse_cpu_list(s).map(CpuList)
}

/// `--transport`'s value: `tcp`, `quic` or `tls`.
fn transport(s: &str) -> Result<control::env::TransportKind, String> {
    control::env::TransportKind::parse(s).ok_or_else(|| {
        format!(
            "{s:?} is not a data plane: expected one of {}",
            control::env::TransportKind::NAMES
        )
    })
}

/// A command line elasticrun does not run.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// clap's own refusal (an unknown option, with the spelling it resembles;
    /// a bad value; no command), or the `--version` text it prints.
    #[error("{0}")]
    Clap(#[from] clap::Error),
    /// `--help` (or `-h`): the help to print on standard output.
    #[error("{text}")]
    Help { text: String },
    /// A horovodrun option that asks for what elasticrun does not do.
    #[error("--{flag}: {instead}")]
    Refused {
        flag: &'static str,
        instead: &'static str,
    },
}

impl CliError {
    /// elasticrun's exit code for it: 0 for the help and the version, 2 for
    /// every usage error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Clap(e) => u8::try_from(e.exit_code()).unwrap_or(2),
            CliError::Help { .. } => 0,
            CliError::Refused { .. } => 2,
        }
    }
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
