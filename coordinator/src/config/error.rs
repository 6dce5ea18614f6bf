//! What is wrong with a configuration: [`ConfigError`] says which environment
//! variable or option, and why, with the values involved as fields.

use std::fmt;

use elastic::hosts::HostsError;

use super::{SEGMENT_BYTES_RANGE, Source};

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// An environment variable's text is not a value of its option.
    #[error("{var}={}: {why}", control::Quoted(value))]
    Env {
        var: String,
        value: String,
        why: BadValue,
    },
    /// An option's value (from whichever layer gave it) is refused, or it
    /// conflicts with another option.
    #[error("{}: {why}", spelled(option))]
    Invalid { option: &'static str, why: Refusal },
    #[error(transparent)]
    Hosts(#[from] HostsError),
    #[error(transparent)]
    Torchrun(#[from] super::torchrun::TorchrunError),
}

/// An option as users type it: `-np`, `--min-np`.
fn spelled(option: &str) -> String {
    match option {
        "np" => "-np".to_owned(),
        other => format!("--{other}"),
    }
}

/// Text that does not parse as the value it should be.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BadValue {
    #[error("expected a number")]
    NotANumber,
    #[error("expected a non-negative integer")]
    NotACount,
    #[error("expected a port number (1-65535)")]
    NotAPort,
    #[error("expected an integer from 0 to {}", u32::MAX)]
    NotAU32,
    #[error("expected MIN,MAX (two numbers of seconds)")]
    NotARange,
    #[error("expected 1/0, true/false, yes/no or on/off")]
    NotAFlag,
    #[error(
        "{} is not a size ({why}): expected bytes, optionally with a K, M or G suffix \
         (e.g. 524288, 512K, 4M)",
        control::Quoted(text)
    )]
    NotASize {
        text: String,
        why: parse_size::Error,
    },
    #[error(
        "{bytes} bytes is outside the segment sizes accepted, 4K ({}) to 1G ({})",
        SEGMENT_BYTES_RANGE.start(),
        SEGMENT_BYTES_RANGE.end()
    )]
    SegmentSize { bytes: u64 },
    #[error(
        "{} is not one of {}",
        control::Quoted(level),
        control::env::LogLevel::NAMES
    )]
    NotALogLevel { level: String },
    #[error("expected CPU ids separated by commas (e.g. 0,2): {why}")]
    NotCpus { why: control::env::CpuListError },
    #[error(
        "{} is not a data plane: expected one of {}",
        control::Quoted(text),
        control::env::TransportKind::NAMES
    )]
    NotATransport { text: String },
    #[error(
        "{} is not a way of connecting: expected one of {}",
        control::Quoted(text),
        control::env::Connections::NAMES
    )]
    NotConnections { text: String },
}

/// Why an option's value is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "this is not a Slurm allocation's shell (SLURM_JOB_ID is not set); run it under salloc or sbatch"
    )]
    NoAllocation,
    #[error("{0}")]
    Allocation(elastic::slurm::SlurmError),
    #[error(
        "{} is not an address and port (HOST:PORT, e.g. 127.0.0.1:9400 or [::]:9400)",
        control::Quoted(text)
    )]
    NotAnAddress { text: String },
    #[error(
        "elasticrun serve runs in pods that start by themselves; starting workers through srun is elasticrun's (it was given {given})"
    )]
    SlurmServe { given: Source },
    /// A value that would not parse ([`BadValue`]), from a layer other than
    /// the environment.
    #[error(transparent)]
    Bad(#[from] BadValue),
    /// A value that parses but is out of range, and where it came from.
    #[error("{why} (it was given {given})")]
    OutOfRange { why: BadValue, given: Source },
    #[error("at least one process is needed")]
    NoProcess,
    #[error("at least 1 is needed")]
    Zero,
    #[error("{value} is not a positive number")]
    NotPositive { value: f64 },
    #[error("{value} is negative or not a number")]
    Negative { value: f64 },
    #[error("{seconds} seconds is too long")]
    TooLong { seconds: f64 },
    #[error(
        "{seconds} seconds is too short: workers send a heartbeat every second, so at least {min} are needed"
    )]
    TooShort { seconds: f64, min: f64 },
    #[error("{layer} gives both hosts and a hostfile")]
    HostsAndHostfile { layer: Layer },
    #[error(
        "{layer} gives both a discovery script and hosts (-H or --hostfile); \
         the script finds the hosts of an elastic job, so give one or the other"
    )]
    ScriptAndHosts { layer: Layer },
    #[error(
        "only elastic jobs use it, and it needs --host-discovery-script (it was given {given})"
    )]
    OnlyElastic { given: Source },
    #[error(
        "a job run by restarts starts every worker anew, so it keeps no hot spares: leave out \
         --hot-spares or --max-restarts (--max-restarts was given {given})"
    )]
    SparesRestarted { given: Source },
    #[error(
        "elasticrun serve does not keep hot spares yet: its workers are pods that start by \
         themselves; leave it out (it was given {given})"
    )]
    NoSparesForPods { given: Source },
    #[error(
        "only autotuning uses it, and it needs --autotune (it was given {given}{})",
        match turned_off {
            Some(off) => format!(", and autotuning was turned off {off}"),
            None => String::new(),
        }
    )]
    OnlyAutotuning {
        given: Source,
        /// Where autotuning was turned off, when it was explicitly.
        turned_off: Option<Source>,
    },
    #[error("an elastic job needs -np or --min-np (the fewest processes to train with)")]
    NoMinNp,
    #[error("{min_np} is above -np {np} (the processes to start with)")]
    MinAboveNp { min_np: usize, np: usize },
    #[error("{max_np} is below --min-np {min_np}")]
    MaxBelowMin { max_np: usize, min_np: usize },
    #[error("{max_np} is below -np {np}")]
    MaxBelowNp { max_np: usize, np: usize },
    #[error("a host needs at least one slot")]
    NoSlot,
    #[error("{slots} slots is more than the {max} a host may offer")]
    TooManySlots { slots: usize, max: usize },
    #[error("expected MIN MAX, got {count} numbers")]
    NotARange { count: usize },
    #[error("MIN {min} is above MAX {max}")]
    MinAboveMax { min: f64, max: f64 },
    #[error(
        "{interfaces:?} names more than one; elasticrun listens on one interface \
         (the workers reach each other from the addresses they reach it through)"
    )]
    OneInterface { interfaces: String },
    #[error("--tcp keeps the data plane on plain TCP, and the {asked} data plane was asked for")]
    TcpAnd { asked: &'static str },
    #[error(
        "elasticrun serve's workers are pods that start by themselves: Kubernetes restarts them \
         (the pod's restartPolicy), and the job recovers them in place; leave it out (it was \
         given {given})"
    )]
    RestartsInServe { given: Source },
    #[error(
        "torchrun's PET_NNODES asks for {nodes} nodes: a job over several nodes started the \
         torchrun way runs in etcd mode, each node's elasticrun with ELASTICRUN_ETCD, \
         ELASTICRUN_JOB and ELASTICRUN_SECRET_FILE set (deploy/kubernetes/trainer/); on one \
         machine, PET_NNODES=1"
    )]
    TorchrunNodes { nodes: usize },
    #[error(
        "it starts Python ahead, so COMMAND must be python SCRIPT or python -m MODULE \
         (it was given {given})"
    )]
    PrestartNotPython { given: Source },
    #[error("{} is not a Python module name", control::Quoted(name))]
    NotAModule { name: String },
    #[error(
        "it says how many workers one machine starts, on its own or in etcd mode; with hosts \
         given, their slots say it (it was given {given})"
    )]
    PerNodeWithHosts { given: Source },
    #[error(
        "{} is not a straggler action: expected warn or replace",
        control::Quoted(text)
    )]
    NotAStragglerAction { text: String },
    #[error("{factor} is not above 1 (a rank is a straggler when slower than the others by it)")]
    FactorNotAbove1 { factor: f64 },
    #[error(
        "only an elastic job can take a straggler out and go on without it; a static job \
         names stragglers (warn) (replace was given {given})"
    )]
    ReplaceInStaticJob { given: Source },
}

/// One of the layers an option can come from, as a message names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    CommandLine,
    Environment,
    ConfigFile,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::CommandLine => "the command line",
            Layer::Environment => "the environment",
            Layer::ConfigFile => "the config file",
        })
    }
}

/// How a message says where a value came from: "on the command line", "by
/// ELASTICRUN_MIN_NP", "in the config file", "by default".
impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::CommandLine => f.write_str("on the command line"),
            Source::Environment(var) => write!(f, "by {var}"),
            Source::ConfigFile => f.write_str("in the config file"),
            Source::Default => f.write_str("by default"),
        }
    }
}
