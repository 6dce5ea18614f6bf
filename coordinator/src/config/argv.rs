//! horovodrun's command line on top of clap's: its single-dash long options
//! (`-np`, `-hostfile`, `-cb`, `-prefix-timestamp`), the `-np` of the help,
//! the flags refused with what elasticrun does instead, and `--check-build`.

use super::cli::{Cli, CpuList};

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

/// Rewrites horovodrun's single-dash spellings among elasticrun's own options
/// into their long forms; nothing from the training command onwards is
/// touched (the first word that is not an option, or the one after `--`).
pub(super) fn horovod_spellings(mut args: Vec<String>) -> Vec<String> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    // How many values follow `flag` (`--blacklist-cooldown-range` takes two).
    let values_after = |flag: &str| {
        cmd.get_arguments()
            .find(|a| {
                a.get_long().is_some_and(|l| flag == format!("--{l}"))
                    || a.get_short().is_some_and(|s| flag == format!("-{s}"))
                    || a.get_all_aliases()
                        .is_some_and(|al| al.iter().any(|l| flag == format!("--{l}")))
            })
            .filter(|a| a.get_action().takes_values())
            .map_or(0, |a| a.get_num_args().map_or(1, |n| n.min_values()))
    };
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" || !a.starts_with('-') {
            break;
        }
        if let Some(long) = long_spelling(a) {
            args[i] = long;
        }
        let a = args[i].as_str();
        i += 1 + if a.contains('=') { 0 } else { values_after(a) };
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
pub(super) fn refused(cli: &Cli) -> Option<(&'static str, &'static str)> {
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
            cli.num_nccl_streams.is_some(),
            "num-nccl-streams",
            "elasticrun has no NCCL data plane yet (collectives run over TCP); leave it out",
        ),
    ];
    refusals
        .into_iter()
        .find(|(given, _, _)| *given)
        .map(|(_, flag, instead)| (flag, instead))
}

/// `--thread-affinity`'s value: CPU ids separated by commas.
pub(super) fn cpu_list(s: &str) -> Result<CpuList, control::env::CpuListError> {
    control::env::parse_cpu_list(s).map(CpuList)
}

/// What `--check-build` (`-cb`) prints: horovodrun's report, for elasticrun.
pub fn check_build() -> String {
    format!(
        "elasticrun {}:\n\n\
         Available controllers:\n    [X] elasticrun (its own; horovodrun --gloo is accepted)\n    \
         [ ] MPI\n\n\
         Available data planes:\n    [X] TCP\n    [ ] NCCL\n",
        env!("CARGO_PKG_VERSION")
    )
}
