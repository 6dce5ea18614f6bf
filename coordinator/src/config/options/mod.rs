//! The option table. Each option is declared once, here: its command-line
//! flag (the name messages give it) with its help, heading and form; its
//! environment variables (ours first, then Horovod's alias, parsed in
//! Horovod's unit); its key in the YAML `--config-file`; and its default.
//! The command line's arguments ([`super::cli`]) and the file's keys
//! ([`super::file`]) are made from these entries; nothing else names an
//! option. [`super::resolve()`] picks every value with one routine over them:
//! command line > environment > config file > default, recording the source.
//!
//! Values are in the option's own unit (MB, ms, seconds): the command line's
//! text is read with the grammar of the option's own `ELASTICRUN_` variable,
//! the file's value is typed by the option's type ([`FileType`]). Conversion to
//! the typed [`super::JobConfig`] and checks that need other options are done
//! after the pick.

mod elastic;
mod engine;
mod launching;

pub(super) use elastic::*;
pub(super) use engine::*;
pub(super) use launching::*;

use clap::ArgAction;
use clap::builder::ValueParser;

use super::error::BadValue;
use super::file::{FileType, Kind};

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

/// How the option is given on the command line.
#[derive(Debug)]
pub(super) enum Form {
    /// `--flag VALUE`, VALUE named so in the help.
    Value(&'static str),
    /// `--flag A B`: the values, joined by commas, are read as one.
    Values(&'static [&'static str]),
    /// `--flag` alone: the option on.
    Switch,
    /// `--flag` on, its negation off; the last given wins.
    Pair(Negation),
}

/// The `--no-x` of a [`Form::Pair`] (or the `--x` of a `--no-x`).
#[derive(Debug)]
pub(super) struct Negation {
    pub(super) flag: &'static str,
    /// `None`: hidden from the help (horovodrun's hidden negations).
    pub(super) help: Option<&'static str>,
    pub(super) aliases: &'static [&'static str],
}

/// The option's command-line argument.
#[derive(Debug)]
pub(super) struct Arg {
    pub(super) heading: &'static str,
    pub(super) help: &'static str,
    pub(super) form: Form,
    /// The long name where it is not the flag (`-np` is `--num-proc`).
    pub(super) long: Option<&'static str>,
    pub(super) short: Option<char>,
    pub(super) aliases: &'static [&'static str],
    pub(super) visible_aliases: &'static [&'static str],
    /// Flags it may not be given with.
    pub(super) conflicts: &'static [&'static str],
}

/// An argument with nothing but its heading, help and form.
const fn arg(heading: &'static str, form: Form, help: &'static str) -> Arg {
    Arg {
        heading,
        help,
        form,
        long: None,
        short: None,
        aliases: &[],
        visible_aliases: &[],
        conflicts: &[],
    }
}

/// `--x` on, `no` (hidden) off.
const fn hidden_negation(no: &'static str) -> Form {
    Form::Pair(Negation {
        flag: no,
        help: None,
        aliases: &[],
    })
}

/// The option's key in the YAML file.
#[derive(Debug)]
pub(super) struct Key {
    /// `section.key`.
    pub(super) path: &'static str,
    /// The file says the opposite of the flag (`stall_check.enabled` for
    /// `--no-stall-check`).
    pub(super) negated: bool,
}

const fn key(path: &'static str) -> Key {
    Key {
        path,
        negated: false,
    }
}

/// A key that says the opposite of the flag.
const fn key_negated(path: &'static str) -> Key {
    Key {
        path,
        negated: true,
    }
}

/// One option of the table.
#[derive(Debug)]
pub(super) struct Opt<T: 'static> {
    /// The long flag without its dashes; errors name the option by it.
    pub(super) flag: &'static str,
    pub(super) arg: Arg,
    /// Looked at in this order; the first set and not empty wins. The first
    /// is ours, `ELASTICRUN_<FLAG>`, and its grammar is the command line's.
    pub(super) env: &'static [Var<T>],
    pub(super) yaml: Key,
    pub(super) default: T,
}

impl<T> Opt<T> {
    /// The grammar of the option's value: that of its own variable.
    pub(super) fn grammar(&self) -> Parse<T> {
        self.env[0].parse
    }
}

/// What the command line, the file and the tests need of an option,
/// whatever its type.
pub(super) trait Declared: Sync {
    fn flag(&self) -> &'static str;
    fn arg(&self) -> &Arg;
    #[cfg_attr(not(test), allow(dead_code))]
    fn env_names(&self) -> Vec<&'static str>;
    fn yaml(&self) -> &Key;
    /// What the file's value is read as.
    fn kind(&self) -> Kind;
    /// Checks a value's text on the command line.
    fn checker(&self) -> ValueParser;
}

impl<T: FileType + Sync + 'static> Declared for Opt<T> {
    fn flag(&self) -> &'static str {
        self.flag
    }

    fn arg(&self) -> &Arg {
        &self.arg
    }

    fn env_names(&self) -> Vec<&'static str> {
        self.env.iter().map(|v| v.name).collect()
    }

    fn yaml(&self) -> &Key {
        &self.yaml
    }

    fn kind(&self) -> Kind {
        T::KIND
    }

    fn checker(&self) -> ValueParser {
        let parse = self.grammar();
        ValueParser::new(move |s: &str| parse(s.trim()).map(|_| s.to_owned()))
    }
}

/// The command line's arguments of an option: its own, and its negation's.
pub(super) fn clap_args(o: &dyn Declared) -> Vec<clap::Arg> {
    let a = o.arg();
    // As clap's derive writes a doc comment: without its last full stop.
    let help = |h: &'static str| h.strip_suffix('.').unwrap_or(h);
    let mut arg = clap::Arg::new(o.flag())
        .long(a.long.unwrap_or(o.flag()))
        .help(help(a.help))
        .help_heading(a.heading)
        .aliases(a.aliases)
        .visible_aliases(a.visible_aliases)
        .conflicts_with_all(a.conflicts);
    if let Some(s) = a.short {
        arg = arg.short(s);
    }
    match &a.form {
        Form::Value(name) => vec![
            arg.value_name(*name)
                .allow_negative_numbers(true)
                .action(ArgAction::Set)
                .value_parser(o.checker()),
        ],
        Form::Values(names) => vec![
            arg.value_names(*names)
                .num_args(names.len())
                .allow_negative_numbers(true)
                .action(ArgAction::Set),
        ],
        Form::Switch => vec![arg.action(ArgAction::SetTrue)],
        Form::Pair(no) => {
            let mut neg = clap::Arg::new(no.flag)
                .long(no.flag)
                .action(ArgAction::SetTrue)
                .aliases(no.aliases)
                .overrides_with(o.flag());
            neg = match no.help {
                Some(h) => neg.help(help(h)).help_heading(a.heading),
                None => neg.hide(true),
            };
            vec![arg.action(ArgAction::SetTrue).overrides_with(no.flag), neg]
        }
    }
}

/// The option's value on the command line, as text of its grammar: the
/// value given, values joined by commas, or `true`/`false` for a switch.
pub(super) fn given(o: &dyn Declared, m: &clap::ArgMatches) -> Option<String> {
    let set = |id: &str| m.get_flag(id);
    match &o.arg().form {
        Form::Value(_) => m.get_one::<String>(o.flag()).cloned(),
        Form::Values(_) => m
            .get_many::<String>(o.flag())
            .map(|v| v.cloned().collect::<Vec<_>>().join(",")),
        Form::Switch => set(o.flag()).then(|| "true".to_owned()),
        Form::Pair(_) if set(o.flag()) => Some("true".to_owned()),
        Form::Pair(no) => set(no.flag).then(|| "false".to_owned()),
    }
}

/// Every option, in the help's order.
pub(super) static ALL: &[&dyn Declared] = &[
    &NP,
    &NPROC_PER_NODE,
    &HOSTS,
    &HOSTFILE,
    &START_TIMEOUT,
    &MAX_RESTARTS,
    &PRESTART_IMPORTS,
    &SLURM,
    &NO_SLURM,
    &COORDINATOR_TIMEOUT,
    &HEARTBEAT_TIMEOUT,
    &NETWORK_INTERFACE,
    &SSH_PORT,
    &SSH_IDENTITY_FILE,
    &FUSION_THRESHOLD_MB,
    &CYCLE_TIME_MS,
    &CACHE_CAPACITY,
    &DISABLE_CACHE,
    &HIERARCHICAL_ALLREDUCE,
    &HIERARCHICAL_ALLGATHER,
    &SEGMENT_SIZE,
    &AUTOTUNE,
    &AUTOTUNE_LOG_FILE,
    &AUTOTUNE_WARMUP_SAMPLES,
    &AUTOTUNE_STEPS_PER_SAMPLE,
    &AUTOTUNE_BAYES_OPT_MAX_SAMPLES,
    &AUTOTUNE_GAUSSIAN_PROCESS_NOISE,
    &HOST_DISCOVERY_SCRIPT,
    &MIN_NP,
    &MAX_NP,
    &SLOTS_PER_HOST,
    &ELASTIC_TIMEOUT,
    &REPLACEMENT_WAIT,
    &RESET_LIMIT,
    &HOT_SPARES,
    &BLACKLIST_COOLDOWN_RANGE,
    &DISCOVERY_INTERVAL,
    &DISCOVERY_TIMEOUT,
    &TIMELINE_FILENAME,
    &TIMELINE_MARK_CYCLES,
    &NO_STALL_CHECK,
    &STALL_CHECK_WARNING_TIME_SECONDS,
    &STALL_CHECK_SHUTDOWN_TIME_SECONDS,
    &GLOO_TIMEOUT_SECONDS,
    &THREAD_AFFINITY,
    &TRANSPORT,
    &CONNECTIONS,
    &NO_SHARED_MEMORY,
    &TCP,
    &OUTPUT_FILENAME,
    &PREFIX_OUTPUT_WITH_TIMESTAMP,
    &LOG_LEVEL,
    &LOG_WITHOUT_TIMESTAMP,
    &METRICS_ADDRESS,
    &STRAGGLER_FACTOR,
    &STRAGGLER_STEPS,
    &STRAGGLER_ACTION,
];

/// The table's entry for `flag`.
pub(super) fn find(flag: &str) -> Option<&'static dyn Declared> {
    ALL.iter().copied().find(|o| o.flag() == flag)
}

#[cfg(test)]
mod tests;
