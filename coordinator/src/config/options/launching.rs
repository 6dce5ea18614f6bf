//! Launching, ssh, output and logging options.

use std::borrow::Cow;
use std::path::PathBuf;

use super::super::parse::{
    flag, number, samples, some_count, some_path, some_port, some_text, text,
};
use super::Form::{Switch, Value};
use super::{Arg, Form, Negation, Opt, arg, key, var};

const LAUNCHING: &str = "Launching";
const SSH: &str = "SSH";
const OUTPUT: &str = "Output";
const LOGGING: &str = "Logging";

pub(in super::super) const NP: Opt<Option<usize>> = Opt {
    flag: "np",
    arg: Arg {
        long: Some("num-proc"),
        aliases: &["np"],
        ..arg(
            LAUNCHING,
            Value("N"),
            "Number of worker processes [default: the total slots of the hosts; on one machine or in \
             etcd mode, torchrun's PET_NNODES x --nproc-per-node where either is set].",
        )
    },
    env: &[var("ELASTICRUN_NP", some_count)],
    yaml: key("launch.np"),
    default: None,
};

/// Workers a node starts, torchrun's `--nproc-per-node`.
pub(in super::super) const NPROC_PER_NODE: Opt<Option<usize>> = Opt {
    flag: "nproc-per-node",
    arg: arg(
        LAUNCHING,
        Value("N"),
        "Workers this machine starts, as torchrun's --nproc-per-node: on one machine it is -np's \
         default; in etcd mode (ELASTICRUN_ETCD set, a pod of a Kubernetes job) it is how many \
         copies of the program this pod starts [default: PET_NPROC_PER_NODE, else 1].",
    ),
    env: &[var("ELASTICRUN_NPROC_PER_NODE", some_count)],
    yaml: key("launch.nproc_per_node"),
    default: None,
};

pub(in super::super) const HOSTS: Opt<Option<String>> = Opt {
    flag: "hosts",
    arg: Arg {
        short: Some('H'),
        ..arg(
            LAUNCHING,
            Value("HOST:SLOTS,..."),
            "Hosts and slots, e.g. a:4,b:4 [default: localhost with -np slots].",
        )
    },
    env: &[var("ELASTICRUN_HOSTS", some_text)],
    yaml: key("launch.hosts"),
    default: None,
};

pub(in super::super) const HOSTFILE: Opt<Option<PathBuf>> = Opt {
    flag: "hostfile",
    arg: Arg {
        conflicts: &["hosts"],
        ..arg(
            LAUNCHING,
            Value("FILE"),
            "File with one `host slots=N` or `host:N` line per host.",
        )
    },
    env: &[var("ELASTICRUN_HOSTFILE", some_path)],
    yaml: key("launch.hostfile"),
    default: None,
};

/// Seconds.
pub(in super::super) const START_TIMEOUT: Opt<f64> = Opt {
    flag: "start-timeout",
    arg: arg(
        LAUNCHING,
        Value("SECONDS"),
        "Seconds to wait for every worker to start and register [default: 30]. In a static job \
         where no worker registers by then, the program is taken for one that does not use the \
         runtime and supervised until it exits.",
    ),
    env: &[
        var(control::env::START_TIMEOUT, number),
        var("HOROVOD_START_TIMEOUT", number),
    ],
    yaml: key("launch.start_timeout"),
    default: 30.0,
};

/// Restarts of every worker after a failure, torchrun's `--max-restarts`.
pub(in super::super) const MAX_RESTARTS: Opt<u32> = Opt {
    flag: "max-restarts",
    arg: arg(
        LAUNCHING,
        Value("N"),
        "Times every worker is started again after one fails, as torchrun's --max-restarts: a \
         program that resumes from its own checkpoint survives failures \
         (TORCHELASTIC_RESTART_COUNT says which start it is). With --min-np/--max-np and a \
         discovery script the job runs by restarts, as torchrun's --nnodes MIN:MAX: a change of \
         hosts restarts every worker at the new size [default: 0].",
    ),
    env: &[var("ELASTICRUN_MAX_RESTARTS", samples)],
    yaml: key("launch.max_restarts"),
    default: 0,
};

/// Python modules imported ahead in processes that wait to be workers.
pub(in super::super) const PRESTART_IMPORTS: Opt<Option<String>> = Opt {
    flag: "prestart-imports",
    arg: arg(
        LAUNCHING,
        Value("MODULE,..."),
        "For a Python COMMAND (python SCRIPT or python -m MODULE): each slot of this machine keeps \
         a Python process started ahead with these modules imported (e.g. torch), and a worker's \
         start after the first (a restart, a replacement) runs the program in it instead of \
         starting Python again [default: none].",
    ),
    env: &[var("ELASTICRUN_PRESTART_IMPORTS", some_text)],
    yaml: key("launch.prestart_imports"),
    default: None,
};

pub(in super::super) const SLURM: Opt<bool> = Opt {
    flag: "slurm",
    arg: Arg {
        conflicts: &["no-slurm"],
        ..arg(
            LAUNCHING,
            Switch,
            "Run as a job inside this Slurm allocation (salloc, sbatch): hosts and slots from the \
             allocation (with --min-np/--max-np, an elastic job on its nodes that Slurm holds \
             usable), every worker a step started with srun, never ssh [default: when \
             SLURM_JOB_ID is set and no hosts are given].",
        )
    },
    env: &[var("ELASTICRUN_SLURM", flag)],
    yaml: key("launch.slurm"),
    default: false,
};

pub(in super::super) const NO_SLURM: Opt<bool> = Opt {
    flag: "no-slurm",
    arg: arg(
        LAUNCHING,
        Switch,
        "Ignore a Slurm allocation this runs in: a local job, or the hosts given [default: off].",
    ),
    env: &[var("ELASTICRUN_NO_SLURM", flag)],
    yaml: key("launch.no_slurm"),
    default: false,
};

/// Seconds.
pub(in super::super) const COORDINATOR_TIMEOUT: Opt<f64> = Opt {
    flag: "coordinator-timeout",
    arg: arg(
        LAUNCHING,
        Value("SECONDS"),
        "Seconds a worker that lost its connection to the coordinator keeps trying to reconnect \
         before it exits [default: 10].",
    ),
    env: &[var(control::env::COORDINATOR_TIMEOUT, number)],
    yaml: key("launch.coordinator_timeout"),
    default: 10.0,
};

/// Seconds; at least [`super::super::MIN_HEARTBEAT_TIMEOUT`].
pub(in super::super) const HEARTBEAT_TIMEOUT: Opt<f64> = Opt {
    flag: "heartbeat-timeout",
    arg: arg(
        LAUNCHING,
        Value("SECONDS"),
        "Seconds without a heartbeat after which elasticrun takes a worker for failed: how soon \
         a host cut from the network is noticed [default: 15]. At least 2: workers send one a \
         second.",
    ),
    env: &[var("ELASTICRUN_HEARTBEAT_TIMEOUT", number)],
    yaml: key("launch.heartbeat_timeout"),
    default: 15.0,
};

pub(in super::super) const NETWORK_INTERFACE: Opt<Option<String>> = Opt {
    flag: "network-interface",
    arg: Arg {
        visible_aliases: &["network-interfaces"],
        ..arg(
            LAUNCHING,
            Value("IFACE"),
            "Interface whose address the coordinator listens on; workers reach it, and each \
             other, from the address they reach it through; one interface [default: any].",
        )
    },
    env: &[
        var("ELASTICRUN_NETWORK_INTERFACE", some_text),
        var("HOROVOD_GLOO_IFACE", some_text),
    ],
    yaml: key("launch.network_interface"),
    default: None,
};

pub(in super::super) const SSH_PORT: Opt<Option<u16>> = Opt {
    flag: "ssh-port",
    arg: Arg {
        short: Some('p'),
        ..arg(
            SSH,
            Value("PORT"),
            "SSH port of the remote hosts [default: ssh's own].",
        )
    },
    env: &[var("ELASTICRUN_SSH_PORT", some_port)],
    yaml: key("launch.ssh_port"),
    default: None,
};

pub(in super::super) const SSH_IDENTITY_FILE: Opt<Option<PathBuf>> = Opt {
    flag: "ssh-identity-file",
    arg: Arg {
        short: Some('i'),
        ..arg(
            SSH,
            Value("FILE"),
            "SSH private key for the remote hosts [default: ssh's own].",
        )
    },
    env: &[var("ELASTICRUN_SSH_IDENTITY_FILE", some_path)],
    yaml: key("launch.ssh_identity_file"),
    default: None,
};

pub(in super::super) const OUTPUT_FILENAME: Opt<Option<PathBuf>> = Opt {
    flag: "output-filename",
    arg: arg(
        OUTPUT,
        Value("DIR"),
        "Write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr.",
    ),
    env: &[var("ELASTICRUN_OUTPUT_FILENAME", some_path)],
    yaml: key("launch.output_filename"),
    default: None,
};

pub(in super::super) const PREFIX_OUTPUT_WITH_TIMESTAMP: Opt<bool> = Opt {
    flag: "prefix-output-with-timestamp",
    arg: arg(
        OUTPUT,
        Switch,
        "Prefix every forwarded line with the time it was received (also -prefix-timestamp).",
    ),
    env: &[var("ELASTICRUN_PREFIX_OUTPUT_WITH_TIMESTAMP", flag)],
    yaml: key("launch.prefix_output_with_timestamp"),
    default: false,
};

/// Checked as a [`super::super::LogLevel`] after the pick, whichever layer
/// gave it. `--verbose` on the command line is `debug`, unless `--log-level`
/// is given.
pub(in super::super) const LOG_LEVEL: Opt<Cow<'static, str>> = Opt {
    flag: "log-level",
    arg: arg(
        LOGGING,
        Value("LEVEL"),
        "trace, debug, info, warning, error [default: warning]: elasticrun's own log lines and \
         those of the runtime in every worker.",
    ),
    env: &[
        var("ELASTICRUN_LOG_LEVEL", text),
        var("HOROVOD_LOG_LEVEL", text),
    ],
    yaml: key("logging.level"),
    default: Cow::Borrowed("warning"),
};

pub(in super::super) const LOG_WITHOUT_TIMESTAMP: Opt<bool> = Opt {
    flag: "log-without-timestamp",
    arg: Arg {
        aliases: &["log-hide-timestamp"],
        ..arg(
            LOGGING,
            Form::Pair(Negation {
                flag: "log-with-timestamp",
                help: None,
                aliases: &["no-log-hide-timestamp"],
            }),
            "Leave timestamps out of elasticrun's own log lines.",
        )
    },
    env: &[
        var("ELASTICRUN_LOG_WITHOUT_TIMESTAMP", flag),
        var("HOROVOD_LOG_HIDE_TIME", flag),
    ],
    yaml: key("logging.hide_timestamp"),
    default: false,
};

pub(in super::super) const METRICS_ADDRESS: Opt<Option<String>> = Opt {
    flag: "metrics-address",
    arg: arg(
        LOGGING,
        Value("HOST:PORT"),
        "Serve the job's Prometheus metrics at http://HOST:PORT/metrics, a live status page at \
         http://HOST:PORT/ and its data at /status.json (port 0: any free port, said at start) \
         [default: off].",
    ),
    env: &[var("ELASTICRUN_METRICS_ADDRESS", some_text)],
    yaml: key("logging.metrics_address"),
    default: None,
};
