//! horovodrun's command line on top of clap's: its single-dash long options
//! (`-np`, `-hostfile`, `-cb`, `-prefix-timestamp`), the `-np` of the help,
//! the flags refused with what elasticrun does instead, and `--check-build`;
//! [`Cli::parse_args`] and [`Cli::help_text`] put them around clap's parse.

use std::ffi::OsString;
use std::sync::OnceLock;

use clap::error::ErrorKind;

use super::cli::{Cli, CliError};

/// horovodrun's single-dash spellings and the long options they are.
const SINGLE_DASH: [(&str, &str); 4] = [
    ("-np", "--num-proc"),
    ("-hostfile", "--hostfile"),
    ("-cb", "--check-build"),
    ("-prefix-timestamp", "--prefix-output-with-timestamp"),
];

/// `token` in its long spelling when it is one of [`SINGLE_DASH`], alone or
/// with `=VALUE`.
fn long_spelling(token: &str) -> Option<String> {
    let (name, value) = match token.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (token, None),
    };
    let (_, long) = SINGLE_DASH.iter().find(|(single, _)| *single == name)?;
    Some(match value {
        Some(v) => format!("{long}={v}"),
        None => (*long).to_owned(),
    })
}

/// clap's description of the command line, built once.
fn command() -> &'static clap::Command {
    static COMMAND: OnceLock<clap::Command> = OnceLock::new();
    COMMAND.get_or_init(|| {
        use clap::CommandFactory;
        let mut cmd = Cli::command();
        cmd.build();
        cmd
    })
}

/// `args` parsed by clap (what `Cli::try_parse_from` does, on the command
/// built once).
fn parse(args: Vec<OsString>) -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let mut cmd = command().clone();
    let mut matches = cmd.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cmd))
}

/// How many values follow each spelling of each option that takes values
/// (`--blacklist-cooldown-range` takes two), from clap's own description.
fn values_after_table() -> &'static [(String, usize)] {
    static TABLE: OnceLock<Vec<(String, usize)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = Vec::new();
        for a in command().get_arguments() {
            if !a.get_action().takes_values() {
                continue;
            }
            let n = a.get_num_args().map_or(1, |n| n.min_values());
            let longs = a
                .get_long()
                .into_iter()
                .chain(a.get_all_aliases().unwrap_or_default());
            table.extend(longs.map(|l| (format!("--{l}"), n)));
            table.extend(a.get_short().map(|s| (format!("-{s}"), n)));
        }
        table
    })
}

/// Rewrites horovodrun's single-dash spellings among elasticrun's own options
/// into their long forms; nothing from the training command onwards is
/// touched (the first word that is not an option, or the one after `--`).
fn horovod_spellings(mut args: Vec<OsString>) -> Vec<OsString> {
    let values_after = |flag: &str| {
        values_after_table()
            .iter()
            .find(|(spelling, _)| spelling == flag)
            .map_or(0, |&(_, n)| n)
    };
    let mut i = 1;
    while i < args.len() {
        // A word that is not UTF-8 is no option: the command starts there.
        let Some(a) = args[i].to_str() else { break };
        if a == "--" || !a.starts_with('-') {
            break;
        }
        let a = long_spelling(a).unwrap_or_else(|| a.to_owned());
        let skip = if a.contains('=') { 0 } else { values_after(&a) };
        args[i] = a.into();
        i += 1 + skip;
    }
    args
}

/// The option's line of the help as clap renders it, and as users type it.
const PLAIN_NP: &str = "      --num-proc <N>";
const SPELLED_NP: &str = "  -np, --num-proc <N>";

/// `help` with `--num-proc` shown as `-np, --num-proc`: one column wider, so
/// one space less of the padding before the description keeps it aligned.
pub(super) fn spell_np(help: &str) -> String {
    let mut out = String::with_capacity(help.len() + 8);
    for line in help.split_inclusive('\n') {
        match line.strip_prefix(PLAIN_NP) {
            Some(rest) => {
                out.push_str(SPELLED_NP);
                let rest = match rest.strip_prefix(' ') {
                    Some(r) if r.starts_with(' ') => r,
                    _ => rest,
                };
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// The first option given that elasticrun refuses, with what it does instead.
fn refused(cli: &Cli) -> Option<(&'static str, &'static str)> {
    let refusals = [
        (
            cli.mpi,
            "mpi",
            "elasticrun does not run MPI: it starts and connects the processes itself, \
             as horovodrun --gloo does; leave --mpi out",
        ),
        (
            cli.jsrun,
            "jsrun",
            "elasticrun does not launch through jsrun: it starts the processes itself, \
             here or over ssh (-H, --hostfile); leave --jsrun out",
        ),
        (
            cli.mpi_args.is_some(),
            "mpi-args",
            "there is no mpirun to pass arguments to: elasticrun starts the processes \
             itself (ssh: -p, -i; network: --network-interface)",
        ),
        (
            cli.binding_args.is_some(),
            "binding-args",
            "elasticrun does not bind processes; --thread-affinity pins each worker's \
             engine thread to a CPU",
        ),
        (
            cli.mpi_threads_disable,
            "mpi-threads-disable",
            "elasticrun does not use MPI, so there are no MPI threads to disable; leave it out",
        ),
        (
            cli.num_nccl_streams.is_some_and(|n| n != 1),
            "num-nccl-streams",
            "elasticrun runs a rank's NCCL collectives on one CUDA stream (horovodrun's \
             default); give 1 or leave it out",
        ),
    ];
    refusals
        .into_iter()
        .find(|(given, _, _)| *given)
        .map(|(_, flag, instead)| (flag, instead))
}

impl Cli {
    /// Parses `args` (program name first), accepting horovodrun's spellings
    /// (`-np N`, `-hostfile`, `-cb`, `-prefix-timestamp`) as well.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, CliError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let args = horovod_spellings(args.into_iter().map(Into::into).collect());
        let cli = match parse(args) {
            Ok(cli) => cli,
            Err(e) if e.kind() == ErrorKind::DisplayHelp => {
                return Err(CliError::Help {
                    text: Cli::help_text(),
                });
            }
            Err(e) => return Err(e.into()),
        };
        match refused(&cli) {
            Some((flag, instead)) => Err(CliError::Refused { flag, instead }),
            None => Ok(cli),
        }
    }

    /// The `--help` text, with `-np` spelled as users type it.
    pub fn help_text() -> String {
        use clap::CommandFactory;
        spell_np(&Cli::command().render_help().to_string())
    }
}

/// What `--check-build` (`-cb`) prints: horovodrun's report, for elasticrun.
pub fn check_build() -> String {
    format!(
        "elasticrun {}:\n\n\
         Available controllers:\n    [X] elasticrun (its own; horovodrun --gloo is accepted)\n    \
         [ ] MPI\n\n\
         Available data planes:\n    [X] TCP\n    [X] QUIC (mutual TLS)\n    [X] TLS over TCP (mutual TLS)\n    [ ] NCCL\n",
        env!("CARGO_PKG_VERSION")
    )
}
