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

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{ArgAction, ArgMatches, Args, Command, FromArgMatches, Parser};

use super::options;

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
accepted too. Precedence: command line > environment > config file > torchrun's PET_* variables \
(Kubeflow Trainer's) > default.

`elasticrun serve --etcd URL --job NAME --secret-file FILE [OPTIONS]` runs the coordinator of a job \
whose workers start by themselves (Kubernetes pods) and find it through etcd; see \
`elasticrun serve --help`. With ELASTICRUN_ETCD, ELASTICRUN_JOB and ELASTICRUN_SECRET_FILE set, \
`elasticrun [OPTIONS] COMMAND` runs one node of such a job: --nproc-per-node copies of COMMAND \
that join through etcd, and on nodes 0 and 1 (PET_NODE_RANK) a serve replica.",
    override_usage = "elasticrun [OPTIONS] [-np N] [-H HOST:SLOTS,... | --hostfile FILE | --host-discovery-script SCRIPT] [--] COMMAND [ARGS]..."
)]
pub struct Cli {
    /// Print the version and exit.
    #[arg(short = 'v', long, short_alias = 'V', action = ArgAction::Version)]
    version: Option<bool>,
    /// The options of the table (`super::options`).
    #[command(flatten)]
    pub options: GivenOptions,
    /// YAML file of options (horovodrun's layout).
    #[arg(long, value_name = "FILE", help_heading = "Launching")]
    pub config_file: Option<PathBuf>,
    /// Say what this build of elasticrun can run on, and exit (also -cb).
    #[arg(long, help_heading = "Launching")]
    pub check_build: bool,

    /// Accepted for horovodrun's command lines: elasticrun is always its own controller, starting and connecting the processes the way horovodrun --gloo does.
    #[arg(long, help_heading = "Controller and library")]
    pub gloo: bool,
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
    /// Log what elasticrun does as it starts the job (--log-level debug, unless --log-level is given).
    #[arg(long, help_heading = "Logging")]
    pub verbose: bool,
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

/// The table's options given on the command line: each option's text in
/// its grammar, by flag (see `options::given`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GivenOptions(BTreeMap<&'static str, String>);

impl GivenOptions {
    /// The text given for the option `flag`, if it was given.
    pub fn get(&self, flag: &str) -> Option<&str> {
        self.0.get(flag).map(String::as_str)
    }

    /// Gives `flag` as if typed: for tests of what clap would refuse.
    #[cfg(test)]
    pub(super) fn set(&mut self, flag: &'static str, text: &str) {
        self.0.insert(flag, text.to_owned());
    }
}

impl FromArgMatches for GivenOptions {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let given = options::ALL
            .iter()
            .filter_map(|o| options::given(*o, m).map(|text| (o.flag(), text)));
        Ok(GivenOptions(given.collect()))
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for GivenOptions {
    fn augment_args(cmd: Command) -> Command {
        options::ALL
            .iter()
            .flat_map(|o| options::clap_args(*o))
            .fold(cmd, Command::arg)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
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
