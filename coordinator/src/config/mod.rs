//! Configuration, parsed once at the edge into typed values: the command line
//! ([`cli`]), the environment and the YAML file ([`mod@file`]), merged by
//! [`resolve()`](resolve::resolve) into a [`JobConfig`]. Every option is one
//! entry of the option table (`options/`): its flag and command-line form,
//! environment names, YAML key, grammar and default; the command line and the
//! file are read through it.

mod argv;
pub mod cli;
mod error;
pub mod file;
mod options;
mod parse;
mod resolve;
pub mod serve;
pub mod torchrun;

use std::path::PathBuf;
use std::time::Duration;

pub use argv::check_build;
pub use error::{BadValue, ConfigError, Layer, Refusal};
pub use parse::parse_size;
pub use resolve::resolve;

use control::Knob;
use elastic::hosts::HostSlots;

/// Where a value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    CommandLine,
    /// The environment variable that set it.
    Environment(&'static str),
    ConfigFile,
    Default,
}

/// A value and where it came from. The autotuner only moves values that the user
/// did not set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T> Sourced<T> {
    pub fn new(value: T, source: Source) -> Self {
        Self { value, source }
    }

    /// Set by the user (command line, environment or file), not a default.
    pub fn is_explicit(&self) -> bool {
        self.source != Source::Default
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Sourced<U> {
        Sourced::new(f(self.value), self.source)
    }
}

/// Where the workers run.
#[derive(Clone, Debug, PartialEq)]
pub enum HostSpec {
    /// This machine, with as many slots as processes.
    Localhost,
    List(Vec<HostSlots>),
    /// A hostfile, read when the job starts.
    File(PathBuf),
}

/// The performance knobs the worker engine acts on.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// Default 64 MiB; 0 disables fusion.
    pub fusion_threshold_bytes: Sourced<u64>,
    /// Default 1 ms.
    pub cycle_time: Sourced<Duration>,
    /// Default 1024; 0 when the cache is disabled.
    pub cache_capacity: Sourced<usize>,
    /// Default off.
    pub hierarchical_allreduce: Sourced<bool>,
    /// Default off.
    pub hierarchical_allgather: Sourced<bool>,
    /// Bytes per message in the segmented (ring, chain, alltoall) collectives;
    /// default 512 KiB, within [`SEGMENT_BYTES_RANGE`].
    pub segment_bytes: Sourced<u64>,
}

/// The segment sizes accepted: 4 KiB to 1 GiB.
pub const SEGMENT_BYTES_RANGE: std::ops::RangeInclusive<u64> = (4 << 10)..=(1 << 30);

impl Tuning {
    /// The knobs the user set (command line, environment or file), in the
    /// order of [`Knob::ALL`]. The autotuner holds these fixed.
    pub fn user_set(&self) -> Vec<Knob> {
        Knob::ALL
            .into_iter()
            .filter(|&k| self.is_user_set(k))
            .collect()
    }

    /// Whether the user set `knob`.
    pub fn is_user_set(&self, knob: Knob) -> bool {
        match knob {
            Knob::FusionThreshold => self.fusion_threshold_bytes.is_explicit(),
            Knob::CycleTime => self.cycle_time.is_explicit(),
            Knob::Cache => self.cache_capacity.is_explicit(),
            Knob::HierarchicalAllreduce => self.hierarchical_allreduce.is_explicit(),
            Knob::HierarchicalAllgather => self.hierarchical_allgather.is_explicit(),
            Knob::SegmentSize => self.segment_bytes.is_explicit(),
        }
    }
}

/// `--autotune`: the workers search for the best [`Tuning`], moving only the
/// knobs the user did not set ([`Tuning::user_set`]). Validated:
/// `steps_per_sample` and `max_samples` at least 1, the noise finite and not
/// negative.
#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneConfig {
    /// `--autotune-log-file`: a comma-separated log of the samples; `None` (the
    /// default) = no log.
    pub log_file: Option<PathBuf>,
    /// Samples discarded before tuning starts; default 3.
    pub warmup_samples: u32,
    /// Steps (approximately) recorded in one sample; default 10, at least 1.
    pub steps_per_sample: u32,
    /// `--autotune-bayes-opt-max-samples`: most samples each Bayesian
    /// optimization collects; default 20, at least 1.
    pub max_samples: u32,
    /// Regularization for the noise in the samples (the Gaussian process's
    /// alpha); default 0.8, finite and >= 0.
    pub gaussian_process_noise: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub file: PathBuf,
    pub mark_cycles: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StallCheck {
    Off,
    On {
        /// Default 60 s.
        warning: Duration,
        /// `None` (the default) never ends the job.
        shutdown: Option<Duration>,
    },
}

pub use control::env::LogLevel;

/// The shortest `--heartbeat-timeout`: twice the workers' heartbeat interval
/// (one second), so that one late beat is no failure.
pub const MIN_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where an elastic job's hosts are found, every `discovery_interval`.
#[derive(Clone, Debug, PartialEq)]
pub enum HostDiscovery {
    /// `--host-discovery-script`: prints one `host` or `host:slots` per line.
    Script(PathBuf),
    /// The Slurm allocation this runs in: its nodes, less those Slurm holds
    /// down, drained or failing (`sinfo`).
    Allocation(elastic::slurm::Allocation),
}

/// An elastic job (`--host-discovery-script`, or `--min-np`/`--max-np`
/// inside a Slurm allocation): the hosts come and go, and the number of
/// processes moves between `min_np` and `max_np`. Validated: `1 <= min_np
/// <= initial_np <= max_np`, every count and duration positive.
#[derive(Clone, Debug, PartialEq)]
pub struct ElasticConfig {
    /// `None`: the workers register by themselves (`elasticrun serve`).
    pub discovery: Option<HostDiscovery>,
    /// `--min-np`; default `-np`.
    pub min_np: usize,
    /// `--max-np`; `None` = no cap.
    pub max_np: Option<usize>,
    /// `-np`; default `min_np`.
    pub initial_np: usize,
    /// Slots of a discovered host printed without a count; default 1.
    pub slots_per_host: usize,
    /// Default 600 s.
    pub elastic_timeout: Duration,
    /// How long the survivors of a failure wait for replacements; default
    /// 0.5 s.
    pub replacement_wait: Duration,
    /// `None` (the default) = unlimited; 0 = the first reset ends the job.
    pub reset_limit: Option<u32>,
    /// Workers kept registered beyond those that train (`--hot-spares`).
    pub hot_spares: usize,
    /// `(MIN, MAX)`, `MIN <= MAX`; `None` (the default) = blacklisted for good.
    pub blacklist_cooldown: Option<(Duration, Duration)>,
    /// Default 1 s.
    pub discovery_interval: Duration,
    /// A run taking longer is killed and counts as failed; default 10 s.
    pub discovery_timeout: Duration,
}

/// Everything `elasticrun` needs to run a job, resolved and validated.
#[derive(Clone, Debug, PartialEq)]
pub struct JobConfig {
    /// Empty for `elasticrun serve`. As given: any bytes but NUL.
    pub command: Vec<std::ffi::OsString>,
    /// Times every worker is started again after one fails
    /// (`--max-restarts`); with an elastic job's options, the job runs by
    /// restarts.
    pub max_restarts: u32,
    /// Python modules imported ahead by a process per slot that waits to be
    /// its next worker (`--prestart-imports`); empty: none.
    pub prestart_imports: Vec<String>,
    /// Where the job's Prometheus metrics are served (`--metrics-address`).
    pub metrics_address: Option<std::net::SocketAddr>,
    /// The Slurm allocation this runs as a job inside of (`--slurm`, or
    /// detected): its workers are steps started with `srun`.
    pub slurm: Option<elastic::slurm::Allocation>,
    /// `None`: as many processes as the hosts have slots. In an elastic job,
    /// the initial target (`Some(initial_np)`).
    pub np: Option<usize>,
    /// Workers one node starts (`--nproc-per-node`, else torchrun's
    /// `PET_NPROC_PER_NODE`, else 1): what a pod starts in etcd mode.
    pub nproc_per_node: usize,
    /// torchrun's `PET_*` variables, where any is set.
    pub torchrun: Option<torchrun::Torchrun>,
    /// [`HostSpec::Localhost`] (unused) in an elastic job.
    pub hosts: HostSpec,
    /// Default 30 s.
    pub start_timeout: Duration,
    /// How long a worker that lost its coordinator connection keeps trying
    /// to reconnect (default 10 s).
    pub coordinator_timeout: Duration,
    /// A worker silent (no heartbeat) this long has failed (default 15 s,
    /// at least [`MIN_HEARTBEAT_TIMEOUT`]).
    pub heartbeat_timeout: Duration,
    pub network_interface: Option<String>,
    pub ssh_port: Option<u16>,
    pub ssh_identity_file: Option<PathBuf>,
    pub tuning: Tuning,
    pub timeline: Option<Timeline>,
    pub stall_check: StallCheck,
    /// When a rank is named a straggler, and what is done then.
    pub stragglers: crate::straggler::StragglerPolicy,
    /// `DIR/rank.N/{stdout,stderr}`.
    pub output_dir: Option<PathBuf>,
    pub output_timestamps: bool,
    /// Default warning.
    pub log_level: LogLevel,
    pub log_timestamps: bool,
    /// `None` unless a host discovery script is given.
    pub elastic: Option<ElasticConfig>,
    /// `None` unless `--autotune` is on.
    pub autotune: Option<AutotuneConfig>,
    /// `--gloo-timeout-seconds`: how long one data-plane send or receive may
    /// wait on its peer before the collective fails. Default 60 s: generous
    /// for a slow peer's compute step between collectives, short enough that
    /// a hung job ends.
    pub data_timeout: Duration,
    /// `--thread-affinity`: the CPU of each slot's engine thread (slot N
    /// takes entry N, on every host); `None` (the default) = not pinned.
    pub engine_cpus: Option<Vec<usize>>,
    /// `--tcp`: the data plane stays on plain TCP (refuses `--transport
    /// quic` and `tls`);
    /// default off.
    pub tcp_only: bool,
    /// `--transport`: the data plane between the workers; default TCP.
    pub transport: control::env::TransportKind,
    /// `--no-shared-memory` turns it off: ranks of one host then keep to
    /// their TCP connections (or TLS sessions). Default on. The TCP and TLS
    /// data planes use it (with `--transport quic` every peer is reached
    /// over its QUIC connection).
    pub shared_memory: bool,
    /// `--connections`: each pair of ranks connected when a collective
    /// first needs it (the default), or every pair before a generation
    /// starts.
    pub connections: control::env::Connections,
}

#[cfg(test)]
mod autotune_tests;
#[cfg(test)]
mod elastic_tests;
#[cfg(test)]
mod library_tests;
#[cfg(test)]
mod props;
#[cfg(test)]
mod slurm_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod torchrun_tests;
