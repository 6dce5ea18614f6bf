//! The options of elastic jobs.

use std::path::PathBuf;

use std::borrow::Cow;

use super::super::parse::{count, number, range, some_count, some_path, some_samples, text};
use super::Form::{Value, Values};
use super::{Arg, Opt, When, arg, key, var, var_when};

const ELASTIC: &str = "Elastic";
const STRAGGLERS: &str = "Stragglers";

pub(in super::super) const HOST_DISCOVERY_SCRIPT: Opt<Option<PathBuf>> = Opt {
    flag: "host-discovery-script",
    arg: Arg {
        conflicts: &["hosts", "hostfile"],
        ..arg(
            ELASTIC,
            Value("FILE"),
            "Script printing the hosts available now, one `host` or `host:slots` per line (run \
             through the shell, so it may carry arguments); makes the job elastic [default: \
             none].",
        )
    },
    env: &[var("ELASTICRUN_HOST_DISCOVERY_SCRIPT", some_path)],
    yaml: key("elastic.host_discovery_script"),
    default: None,
};

pub(in super::super) const MIN_NP: Opt<Option<usize>> = Opt {
    flag: "min-np",
    arg: Arg {
        visible_aliases: &["min-num-proc"],
        ..arg(
            ELASTIC,
            Value("N"),
            "Fewest processes training continues with; with fewer it waits for hosts [default: \
             -np].",
        )
    },
    env: &[var("ELASTICRUN_MIN_NP", some_count)],
    yaml: key("elastic.min_np"),
    default: None,
};

pub(in super::super) const MAX_NP: Opt<Option<usize>> = Opt {
    flag: "max-np",
    arg: Arg {
        visible_aliases: &["max-num-proc"],
        ..arg(
            ELASTIC,
            Value("N"),
            "Most processes; further slots stay unused [default: no limit].",
        )
    },
    env: &[var("ELASTICRUN_MAX_NP", some_count)],
    yaml: key("elastic.max_np"),
    default: None,
};

pub(in super::super) const SLOTS_PER_HOST: Opt<usize> = Opt {
    flag: "slots-per-host",
    arg: arg(
        ELASTIC,
        Value("N"),
        "Slots of a discovered host printed without a count [default: 1].",
    ),
    env: &[var("ELASTICRUN_SLOTS_PER_HOST", count)],
    yaml: key("elastic.slots_per_host"),
    default: 1,
};

/// Seconds.
pub(in super::super) const ELASTIC_TIMEOUT: Opt<f64> = Opt {
    flag: "elastic-timeout",
    arg: arg(
        ELASTIC,
        Value("SECONDS"),
        "Seconds to wait for at least --min-np processes, at the start and after hosts are lost \
         [default: 600].",
    ),
    env: &[
        var(control::env::ELASTIC_TIMEOUT, number),
        var_when(When::ElasticJob, "HOROVOD_ELASTIC_TIMEOUT", number),
    ],
    yaml: key("elastic.elastic_timeout"),
    default: 600.0,
};

/// Seconds.
pub(in super::super) const REPLACEMENT_WAIT: Opt<f64> = Opt {
    flag: "replacement-wait",
    arg: arg(
        ELASTIC,
        Value("SECONDS"),
        "Seconds the survivors of a failure wait for the workers started in place of the failed \
         ones before they train on without them; later ones join at the next commit [default: \
         0.5].",
    ),
    env: &[var("ELASTICRUN_REPLACEMENT_WAIT", number)],
    yaml: key("elastic.replacement_wait"),
    default: 0.5,
};

pub(in super::super) const RESET_LIMIT: Opt<Option<u32>> = Opt {
    flag: "reset-limit",
    arg: arg(
        ELASTIC,
        Value("N"),
        "Times the workers may be reset (workers lost, hosts added or removed) before the job \
         ends; with 0 the first reset ends it [default: unlimited].",
    ),
    env: &[var("ELASTICRUN_RESET_LIMIT", some_samples)],
    yaml: key("elastic.reset_limit"),
    default: None,
};

pub(in super::super) const HOT_SPARES: Opt<usize> = Opt {
    flag: "hot-spares",
    arg: arg(
        ELASTIC,
        Value("N"),
        "Workers started beyond those that train, registered and waiting: a failed worker's \
         place is taken by one of them at once, with no process to start, and the spare is \
         started again in the background; they take slots of the hosts [default: 0].",
    ),
    env: &[var("ELASTICRUN_HOT_SPARES", count)],
    yaml: key("elastic.hot_spares"),
    default: 0,
};

/// `[MIN, MAX]` seconds: `--blacklist-cooldown-range MIN MAX`,
/// `ELASTICRUN_BLACKLIST_COOLDOWN_RANGE=MIN,MAX`, `[MIN, MAX]` in the file.
pub(in super::super) const BLACKLIST_COOLDOWN_RANGE: Opt<Option<Vec<f64>>> = Opt {
    flag: "blacklist-cooldown-range",
    arg: arg(
        ELASTIC,
        Values(&["MIN", "MAX"]),
        "Seconds a failing host stays blacklisted: MIN, doubling with each blacklisting up to MAX \
         [default: none, blacklisted hosts stay out].",
    ),
    env: &[var("ELASTICRUN_BLACKLIST_COOLDOWN_RANGE", range)],
    yaml: key("elastic.blacklist_cooldown_range"),
    default: None,
};

/// Seconds.
pub(in super::super) const DISCOVERY_INTERVAL: Opt<f64> = Opt {
    flag: "discovery-interval",
    arg: arg(
        ELASTIC,
        Value("SECONDS"),
        "Seconds between runs of the discovery script [default: 1].",
    ),
    env: &[var("ELASTICRUN_DISCOVERY_INTERVAL", number)],
    yaml: key("elastic.discovery_interval"),
    default: 1.0,
};

/// Seconds.
pub(in super::super) const DISCOVERY_TIMEOUT: Opt<f64> = Opt {
    flag: "discovery-timeout",
    arg: arg(
        ELASTIC,
        Value("SECONDS"),
        "Seconds a discovery run may take; a slower run is killed and counts as failed [default: \
         10].",
    ),
    env: &[var("ELASTICRUN_DISCOVERY_TIMEOUT", number)],
    yaml: key("elastic.discovery_timeout"),
    default: 10.0,
};

pub(in super::super) const STRAGGLER_FACTOR: Opt<f64> = Opt {
    flag: "straggler-factor",
    arg: arg(
        STRAGGLERS,
        Value("X"),
        "A rank whose step time outside collectives stays above X times the other ranks' \
         median for --straggler-steps steps in a row is a straggler (above 1) [default: 2].",
    ),
    env: &[var("ELASTICRUN_STRAGGLER_FACTOR", number)],
    yaml: key("stragglers.factor"),
    default: crate::straggler::DEFAULT_FACTOR,
};

pub(in super::super) const STRAGGLER_STEPS: Opt<usize> = Opt {
    flag: "straggler-steps",
    arg: arg(
        STRAGGLERS,
        Value("N"),
        "Steps in a row a rank must be slow for to be named a straggler [default: 50].",
    ),
    env: &[var("ELASTICRUN_STRAGGLER_STEPS", count)],
    yaml: key("stragglers.steps"),
    default: crate::straggler::DEFAULT_STEPS as usize,
};

pub(in super::super) const STRAGGLER_ACTION: Opt<Cow<'static, str>> = Opt {
    flag: "straggler-action",
    arg: arg(
        STRAGGLERS,
        Value("warn|replace"),
        "What is done with a straggler: warn (named in the log, on /metrics and the status \
         page) or replace (in an elastic job, also taken out as after a failure, its host \
         blacklisted for the cooldown) [default: warn].",
    ),
    env: &[var("ELASTICRUN_STRAGGLER_ACTION", text)],
    yaml: key("stragglers.action"),
    default: Cow::Borrowed("warn"),
};
