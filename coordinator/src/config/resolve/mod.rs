//! From the three layers to one typed [`JobConfig`]: every option of the
//! [table](super::options) is picked by [`Layers::pick`] (command line >
//! `ELASTICRUN_*` environment > Horovod's `HOROVOD_*` names, converted to our
//! units > config file > default), then converted and checked here; torchrun's
//! `PET_*` variables ([`super::torchrun`]) are the defaults of the options
//! they match. Pure: the environment comes in as a lookup (only
//! `PET_NPROC_PER_NODE=auto|cpu|gpu` looks at the machine).

use std::path::PathBuf;
use std::time::Duration;

use super::cli::Cli;
use super::error::{BadValue, Layer, Refusal};
use super::file::{ConfigFile, FileType};
use super::options::{self as opt, Opt, When};
use super::parse::segment_bytes;
use super::torchrun::{self, Machine, Torchrun};

mod launching;
use super::{
    AutotuneConfig, ConfigError, ElasticConfig, HostDiscovery, HostSpec, JobConfig, LogLevel,
    MIN_HEARTBEAT_TIMEOUT, Source, Sourced, StallCheck, Timeline, Tuning,
};
use elastic::hosts::parse_host_list;
use launching::{max_restarts, metrics_address, np_per_node, nproc_per_node, prestart_imports};

use crate::straggler::{StragglerAction, StragglerPolicy};

/// The three layers, and which of the environment's conditional names count.
#[derive(Clone, Copy)]
struct Layers<'a> {
    cli: &'a Cli,
    env: &'a dyn Fn(&str) -> Option<String>,
    file: &'a ConfigFile,
    /// An elastic job: Horovod's `HOROVOD_ELASTIC_TIMEOUT` counts.
    elastic_job: bool,
    /// Autotuning is on: Horovod's `HOROVOD_AUTOTUNE_*` settings count.
    autotuning: bool,
    /// torchrun's variables, the defaults of the options they match.
    torchrun: Option<&'a Torchrun>,
    /// Workers a node starts (`--nproc-per-node`, resolved).
    per_node: usize,
}

impl Layers<'_> {
    /// The option's value in the environment: the first of its variables that
    /// counts and is set and not empty, parsed.
    fn env<T>(&self, opt: &Opt<T>) -> Result<Option<Sourced<T>>, ConfigError> {
        let counts = |when| match when {
            When::Always => true,
            When::ElasticJob => self.elastic_job,
            When::Autotuning => self.autotuning,
        };
        for var in opt.env.iter().filter(|v| counts(v.when)) {
            if let Some(raw) = (self.env)(var.name).filter(|v| !v.trim().is_empty()) {
                let value = (var.parse)(raw.trim()).map_err(|why| ConfigError::Env {
                    var: var.name.into(),
                    value: raw.clone(),
                    why,
                })?;
                return Ok(Some(Sourced::new(value, Source::Environment(var.name))));
            }
        }
        Ok(None)
    }

    /// The option's value on the command line, read with its grammar.
    fn cli<T>(&self, opt: &Opt<T>) -> Result<Option<T>, ConfigError> {
        let Some(text) = self.cli.options.get(opt.flag) else {
            return Ok(None);
        };
        (opt.grammar())(text.trim())
            .map(Some)
            .map_err(|why| invalid(opt.flag, why.into()))
    }

    /// The option's value in the config file.
    fn file<T: FileType>(&self, opt: &Opt<T>) -> Option<T> {
        let v = self.file.get(opt.yaml.path)?;
        match opt.yaml.negated {
            true => T::from_file(&v.negated()),
            false => T::from_file(v),
        }
    }

    /// The option's value in one layer.
    fn in_layer<T>(&self, opt: &Opt<Option<T>>, layer: Layer) -> Result<Option<T>, ConfigError>
    where
        Option<T>: FileType,
    {
        Ok(match layer {
            Layer::CommandLine => self.cli(opt)?.flatten(),
            Layer::Environment => self.env(opt)?.and_then(|v| v.value),
            Layer::ConfigFile => self.file(opt).flatten(),
        })
    }

    /// The option's value from the highest layer that gives it, else its
    /// default, with where it came from.
    fn pick<T: Clone + FileType>(&self, opt: &Opt<T>) -> Result<Sourced<T>, ConfigError> {
        debug_assert!(
            opt::find(opt.flag).is_some(),
            "--{} is not in the option table's list",
            opt.flag
        );
        if let Some(v) = self.cli(opt)? {
            return Ok(Sourced::new(v, Source::CommandLine));
        }
        if let Some(v) = self.env(opt)? {
            return Ok(v);
        }
        Ok(match self.file(opt) {
            Some(v) => Sourced::new(v, Source::ConfigFile),
            None => Sourced::new(opt.default.clone(), Source::Default),
        })
    }
}

fn invalid(option: &'static str, why: Refusal) -> ConfigError {
    ConfigError::Invalid { option, why }
}

/// A non-negative number of seconds that fits a [`Duration`].
fn seconds(option: &'static str, v: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(non_negative(option, v)?)
        .map_err(|_| invalid(option, Refusal::TooLong { seconds: v }))
}

fn positive(option: &'static str, v: f64) -> Result<f64, ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(invalid(option, Refusal::NotPositive { value: v }))
    }
}

/// A positive number of seconds that fits a [`Duration`].
fn positive_seconds(option: &'static str, v: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(positive(option, v)?)
        .map_err(|_| invalid(option, Refusal::TooLong { seconds: v }))
}

/// `--heartbeat-timeout`: positive seconds, at least [`MIN_HEARTBEAT_TIMEOUT`].
fn heartbeat_timeout(v: f64) -> Result<Duration, ConfigError> {
    let flag = opt::HEARTBEAT_TIMEOUT.flag;
    let d = positive_seconds(flag, v)?;
    if d < MIN_HEARTBEAT_TIMEOUT {
        let min = MIN_HEARTBEAT_TIMEOUT.as_secs_f64();
        return Err(invalid(flag, Refusal::TooShort { seconds: v, min }));
    }
    Ok(d)
}

fn non_negative(option: &'static str, v: f64) -> Result<f64, ConfigError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(invalid(option, Refusal::Negative { value: v }))
    }
}

/// The first of `sources` that the user set, refused with `why`.
fn refuse_any_set(
    sources: &[(&'static str, Source)],
    why: impl Fn(Source) -> Refusal,
) -> Result<(), ConfigError> {
    match sources.iter().find(|(_, s)| *s != Source::Default) {
        Some(&(option, source)) => Err(invalid(option, why(source))),
        None => Ok(()),
    }
}

/// Resolves every option. `env` looks up an environment variable.
pub fn resolve(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
    file: &ConfigFile,
) -> Result<JobConfig, ConfigError> {
    let torchrun = Torchrun::read(env, Machine::here)?;
    let l = Layers {
        cli,
        env,
        file,
        elastic_job: false,
        autotuning: false,
        torchrun: torchrun.as_ref(),
        per_node: 1,
    };
    let np = l.pick(&opt::NP)?;
    if np.value == Some(0) {
        return Err(invalid(opt::NP.flag, Refusal::NoProcess));
    }
    let per_node = nproc_per_node(&l)?;
    let l = Layers {
        per_node: per_node.value,
        ..l
    };
    let start_timeout = l.pick(&opt::START_TIMEOUT)?;
    let coordinator_timeout = l.pick(&opt::COORDINATOR_TIMEOUT)?;
    let heartbeat_timeout = heartbeat_timeout(l.pick(&opt::HEARTBEAT_TIMEOUT)?.value)?;
    let network_interface = l.pick(&opt::NETWORK_INTERFACE)?;
    let ssh_port = l.pick(&opt::SSH_PORT)?;
    let ssh_identity_file = l.pick(&opt::SSH_IDENTITY_FILE)?;
    let given = hosts(&l)?;
    let slurm = allocation(&l, &given, cli.serve)?;
    let one_machine = matches!(given, Hosts::Static(HostSpec::Localhost)) && slurm.is_none();
    let np = np_per_node(&l, np, &per_node, one_machine)?;
    let (hosts, elastic) = hosts_and_elastic(&l, given, slurm.as_ref(), cli.serve, np.value)?;
    if let Some(names) = &network_interface.value
        && names.contains(',')
    {
        let why = Refusal::OneInterface {
            interfaces: names.clone(),
        };
        return Err(invalid(opt::NETWORK_INTERFACE.flag, why));
    }
    let max_restarts = max_restarts(&l, elastic.as_ref(), cli.serve)?;
    let data_timeout = l.pick(&opt::GLOO_TIMEOUT_SECONDS)?;
    let tcp_only = l.pick(&opt::TCP)?.value;
    let transport = l.pick(&opt::TRANSPORT)?.value;
    if tcp_only && transport != control::env::TransportKind::Tcp {
        let asked = transport.name();
        return Err(invalid(opt::TRANSPORT.flag, Refusal::TcpAnd { asked }));
    }
    Ok(JobConfig {
        command: cli.command.clone(),
        metrics_address: metrics_address(&l)?,
        max_restarts,
        prestart_imports: prestart_imports(&l)?,
        slurm,
        np: elastic.as_ref().map_or(np.value, |e| Some(e.initial_np)),
        nproc_per_node: per_node.value,
        torchrun: torchrun.clone(),
        hosts,
        start_timeout: positive_seconds(opt::START_TIMEOUT.flag, start_timeout.value)?,
        coordinator_timeout: positive_seconds(
            opt::COORDINATOR_TIMEOUT.flag,
            coordinator_timeout.value,
        )?,
        heartbeat_timeout,
        network_interface: network_interface.value,
        ssh_port: ssh_port.value,
        ssh_identity_file: ssh_identity_file.value,
        tuning: tuning(&l)?,
        autotune: autotune(&l)?,
        timeline: timeline(&l)?,
        stall_check: stall_check(&l)?,
        stragglers: stragglers(&l, elastic.is_some())?,
        output_dir: l.pick(&opt::OUTPUT_FILENAME)?.value,
        output_timestamps: l.pick(&opt::PREFIX_OUTPUT_WITH_TIMESTAMP)?.value,
        log_level: log_level(&l)?,
        log_timestamps: !l.pick(&opt::LOG_WITHOUT_TIMESTAMP)?.value,
        elastic,
        data_timeout: positive_seconds(opt::GLOO_TIMEOUT_SECONDS.flag, data_timeout.value)?,
        engine_cpus: engine_cpus(&l)?,
        tcp_only,
        transport,
        shared_memory: !l.pick(&opt::NO_SHARED_MEMORY)?.value,
        connections: l.pick(&opt::CONNECTIONS)?.value,
    })
}

/// Where the hosts come from, and the elastic options: `elasticrun serve`
/// (workers register), hosts given, the allocation's nodes (static, or
/// discovered with `--min-np`/`--max-np`), or a discovery script.
fn hosts_and_elastic(
    l: &Layers<'_>,
    given: Hosts,
    slurm: Option<&elastic::slurm::Allocation>,
    serve: bool,
    np: Option<usize>,
) -> Result<(HostSpec, Option<ElasticConfig>), ConfigError> {
    Ok(match (given, slurm) {
        _ if serve => (HostSpec::Localhost, elastic(l, Some(None), np)?),
        (Hosts::Static(HostSpec::Localhost), Some(a)) if elastic_asked(l)? => {
            let found = HostDiscovery::Allocation(a.clone());
            (HostSpec::Localhost, elastic(l, Some(Some(found)), np)?)
        }
        (Hosts::Static(HostSpec::Localhost), Some(a)) => {
            (HostSpec::List(a.hosts.clone()), elastic(l, None, np)?)
        }
        (Hosts::Static(spec), _) => (spec, elastic(l, None, np)?),
        (Hosts::Discovered(script), _) => {
            let found = HostDiscovery::Script(script);
            (HostSpec::Localhost, elastic(l, Some(Some(found)), np)?)
        }
    })
}

/// The Slurm allocation this runs in, used (`--slurm`, or no hosts given
/// and `SLURM_JOB_ID` set, unless `--no-slurm`): its workers are steps, and
/// without hosts given its nodes are the hosts.
fn allocation(
    l: &Layers<'_>,
    given: &Hosts,
    serve: bool,
) -> Result<Option<elastic::slurm::Allocation>, ConfigError> {
    let forced = l.pick(&opt::SLURM)?;
    let none_given = matches!(given, Hosts::Static(HostSpec::Localhost));
    if serve && forced.value {
        let given = forced.source;
        return Err(invalid(opt::SLURM.flag, Refusal::SlurmServe { given }));
    }
    if serve || l.pick(&opt::NO_SLURM)?.value || !(forced.value || none_given) {
        return Ok(None);
    }
    match elastic::slurm::Allocation::from_env(|k| (l.env)(k)) {
        Ok(Some(a)) => Ok(Some(a)),
        Ok(None) if forced.value => Err(invalid(opt::SLURM.flag, Refusal::NoAllocation)),
        Ok(None) => Ok(None),
        Err(e) => Err(invalid(opt::SLURM.flag, Refusal::Allocation(e))),
    }
}

/// Whether an elastic job is asked for without a discovery script
/// (`--min-np` or `--max-np` given): inside an allocation, its nodes are
/// the hosts.
fn elastic_asked(l: &Layers<'_>) -> Result<bool, ConfigError> {
    let min = l.pick(&opt::MIN_NP)?.source;
    let max = l.pick(&opt::MAX_NP)?.source;
    Ok(min != Source::Default || max != Source::Default)
}

/// Where the workers' hosts come from.
enum Hosts {
    Static(HostSpec),
    /// `--host-discovery-script`: an elastic job.
    Discovered(PathBuf),
}

/// The highest layer that names hosts, a hostfile or a discovery script wins;
/// any layer naming two of them is an error.
fn hosts(l: &Layers<'_>) -> Result<Hosts, ConfigError> {
    let in_layer = |layer| -> Result<Option<Hosts>, ConfigError> {
        let list = l.in_layer(&opt::HOSTS, layer)?;
        let file = l.in_layer(&opt::HOSTFILE, layer)?;
        let script = l.in_layer(&opt::HOST_DISCOVERY_SCRIPT, layer)?;
        match (list, file, script) {
            (Some(_), Some(_), _) => Err(invalid(
                opt::HOSTS.flag,
                Refusal::HostsAndHostfile { layer },
            )),
            (Some(_), None, Some(_)) | (None, Some(_), Some(_)) => Err(invalid(
                opt::HOST_DISCOVERY_SCRIPT.flag,
                Refusal::ScriptAndHosts { layer },
            )),
            (Some(h), None, None) => Ok(Some(Hosts::Static(HostSpec::List(parse_host_list(&h)?)))),
            (None, Some(p), None) => Ok(Some(Hosts::Static(HostSpec::File(p)))),
            (None, None, Some(s)) => Ok(Some(Hosts::Discovered(s))),
            (None, None, None) => Ok(None),
        }
    };
    // Every layer is checked, also those a higher one overrides.
    let candidates = [
        in_layer(Layer::CommandLine)?,
        in_layer(Layer::Environment)?,
        in_layer(Layer::ConfigFile)?,
    ];
    Ok(candidates
        .into_iter()
        .flatten()
        .next()
        .unwrap_or(Hosts::Static(HostSpec::Localhost)))
}

/// The elastic options as the layers give them, before they are checked.
struct ElasticGiven {
    min_np: Sourced<Option<usize>>,
    max_np: Sourced<Option<usize>>,
    slots_per_host: Sourced<usize>,
    elastic_timeout: Sourced<f64>,
    replacement_wait: Sourced<f64>,
    reset_limit: Sourced<Option<u32>>,
    hot_spares: Sourced<usize>,
    cooldown: Sourced<Option<(f64, f64)>>,
    discovery_interval: Sourced<f64>,
    discovery_timeout: Sourced<f64>,
}

/// An elastic job's options, validated against `np` (`-np`, the initial
/// target): `script` is `None` for a job that is not elastic (any of them
/// given is an error), `Some(None)` for `elasticrun serve` (workers
/// register by themselves), `Some(Some(how))` for hosts discovered.
fn elastic(
    l: &Layers<'_>,
    script: Option<Option<HostDiscovery>>,
    np: Option<usize>,
) -> Result<Option<ElasticConfig>, ConfigError> {
    let l = Layers {
        elastic_job: script.is_some(),
        ..*l
    };
    let (mut min_np, mut max_np) = (l.pick(&opt::MIN_NP)?, l.pick(&opt::MAX_NP)?);
    // In etcd mode torchrun's PET_NNODES=MIN:MAX bounds the job.
    let nodes = l.torchrun.and_then(|t| t.nnodes);
    if let (Some(None), Some((min, max))) = (&script, nodes) {
        let (min, max) = (
            min.saturating_mul(l.per_node),
            max.saturating_mul(l.per_node),
        );
        let pet = Source::Environment(torchrun::NNODES);
        if !min_np.is_explicit() {
            min_np = Sourced::new(Some(min), pet);
        }
        if !max_np.is_explicit() {
            max_np = Sourced::new(Some(max), pet);
        }
    }
    let slots_per_host = l.pick(&opt::SLOTS_PER_HOST)?;
    let elastic_timeout = l.pick(&opt::ELASTIC_TIMEOUT)?;
    let reset_limit = l.pick(&opt::RESET_LIMIT)?;
    let range = l.pick(&opt::BLACKLIST_COOLDOWN_RANGE)?;
    let cooldown = match range.value.as_deref() {
        None => Sourced::new(None, range.source),
        Some(&[min, max]) => Sourced::new(Some((min, max)), range.source),
        Some(other) => {
            let why = Refusal::NotARange { count: other.len() };
            return Err(invalid(opt::BLACKLIST_COOLDOWN_RANGE.flag, why));
        }
    };
    let given = ElasticGiven {
        min_np,
        max_np,
        slots_per_host,
        elastic_timeout,
        replacement_wait: l.pick(&opt::REPLACEMENT_WAIT)?,
        reset_limit,
        hot_spares: l.pick(&opt::HOT_SPARES)?,
        cooldown,
        discovery_interval: l.pick(&opt::DISCOVERY_INTERVAL)?,
        discovery_timeout: l.pick(&opt::DISCOVERY_TIMEOUT)?,
    };
    if matches!(script, Some(None)) && given.hot_spares.value > 0 {
        let given = given.hot_spares.source;
        return Err(invalid(
            opt::HOT_SPARES.flag,
            Refusal::NoSparesForPods { given },
        ));
    }
    match script {
        Some(script) => check_elastic(script, given, np).map(Some),
        None => {
            let g = &given;
            let sources = [
                (opt::MIN_NP.flag, g.min_np.source),
                (opt::MAX_NP.flag, g.max_np.source),
                (opt::SLOTS_PER_HOST.flag, g.slots_per_host.source),
                (opt::ELASTIC_TIMEOUT.flag, g.elastic_timeout.source),
                (opt::REPLACEMENT_WAIT.flag, g.replacement_wait.source),
                (opt::RESET_LIMIT.flag, g.reset_limit.source),
                (opt::HOT_SPARES.flag, g.hot_spares.source),
                (opt::BLACKLIST_COOLDOWN_RANGE.flag, g.cooldown.source),
                (opt::DISCOVERY_INTERVAL.flag, g.discovery_interval.source),
                (opt::DISCOVERY_TIMEOUT.flag, g.discovery_timeout.source),
            ];
            refuse_any_set(&sources, |given| Refusal::OnlyElastic { given })?;
            Ok(None)
        }
    }
}

/// An elastic job's options, checked against each other and `np`.
fn check_elastic(
    discovery: Option<HostDiscovery>,
    g: ElasticGiven,
    np: Option<usize>,
) -> Result<ElasticConfig, ConfigError> {
    let at_least_one = |option: &'static str, v: Option<usize>| match v {
        Some(0) => Err(invalid(option, Refusal::NoProcess)),
        v => Ok(v),
    };
    let (min_flag, max_flag) = (opt::MIN_NP.flag, opt::MAX_NP.flag);
    let max_np = at_least_one(max_flag, g.max_np.value)?;
    let min_given = at_least_one(min_flag, g.min_np.value)?;
    let min_np = min_given
        .or(np)
        .ok_or(invalid(min_flag, Refusal::NoMinNp))?;
    let initial_np = np.unwrap_or(min_np);
    if initial_np < min_np {
        let why = Refusal::MinAboveNp {
            min_np,
            np: initial_np,
        };
        return Err(invalid(min_flag, why));
    }
    if let Some(max) = max_np {
        if min_given.is_some() && max < min_np {
            let why = Refusal::MaxBelowMin {
                max_np: max,
                min_np,
            };
            return Err(invalid(max_flag, why));
        }
        if max < initial_np {
            let why = Refusal::MaxBelowNp {
                max_np: max,
                np: initial_np,
            };
            return Err(invalid(max_flag, why));
        }
    }
    if g.slots_per_host.value == 0 {
        return Err(invalid(opt::SLOTS_PER_HOST.flag, Refusal::NoSlot));
    }
    let max = elastic::hosts::MAX_SLOTS_PER_HOST;
    if g.slots_per_host.value > max {
        let why = Refusal::TooManySlots {
            slots: g.slots_per_host.value,
            max,
        };
        return Err(invalid(opt::SLOTS_PER_HOST.flag, why));
    }
    let blacklist_cooldown = match g.cooldown.value {
        None => None,
        Some((min, max)) => {
            let option = opt::BLACKLIST_COOLDOWN_RANGE.flag;
            let lo = positive_seconds(option, min)?;
            let hi = positive_seconds(option, max)?;
            if lo > hi {
                return Err(invalid(option, Refusal::MinAboveMax { min, max }));
            }
            Some((lo, hi))
        }
    };
    let seconds = |o: &Opt<f64>, v: &Sourced<f64>| positive_seconds(o.flag, v.value);
    Ok(ElasticConfig {
        discovery,
        min_np,
        max_np,
        initial_np,
        slots_per_host: g.slots_per_host.value,
        elastic_timeout: seconds(&opt::ELASTIC_TIMEOUT, &g.elastic_timeout)?,
        replacement_wait: self::seconds(opt::REPLACEMENT_WAIT.flag, g.replacement_wait.value)?,
        reset_limit: g.reset_limit.value,
        hot_spares: g.hot_spares.value,
        blacklist_cooldown,
        discovery_interval: seconds(&opt::DISCOVERY_INTERVAL, &g.discovery_interval)?,
        discovery_timeout: seconds(&opt::DISCOVERY_TIMEOUT, &g.discovery_timeout)?,
    })
}

fn tuning(l: &Layers<'_>) -> Result<Tuning, ConfigError> {
    let fusion = l.pick(&opt::FUSION_THRESHOLD_MB)?;
    let mb = non_negative(opt::FUSION_THRESHOLD_MB.flag, fusion.value)?;
    let cycle = l.pick(&opt::CYCLE_TIME_MS)?;
    let ms = positive(opt::CYCLE_TIME_MS.flag, cycle.value)?;
    let cycle_time = Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
        let why = Refusal::TooLong {
            seconds: ms / 1000.0,
        };
        invalid(opt::CYCLE_TIME_MS.flag, why)
    })?;
    let capacity = l.pick(&opt::CACHE_CAPACITY)?;
    let disabled = l.pick(&opt::DISABLE_CACHE)?;
    let segment = l.pick(&opt::SEGMENT_SIZE)?;
    segment_bytes(segment.value).map_err(|why| {
        let why = Refusal::OutOfRange {
            why,
            given: segment.source,
        };
        invalid(opt::SEGMENT_SIZE.flag, why)
    })?;
    Ok(Tuning {
        fusion_threshold_bytes: fusion.map(|_| (mb * 1024.0 * 1024.0).round() as u64),
        cycle_time: cycle.map(|_| cycle_time),
        cache_capacity: if disabled.value {
            disabled.map(|_| 0)
        } else {
            capacity
        },
        hierarchical_allreduce: l.pick(&opt::HIERARCHICAL_ALLREDUCE)?,
        hierarchical_allgather: l.pick(&opt::HIERARCHICAL_ALLGATHER)?,
        segment_bytes: segment,
    })
}

/// The autotune options: `Some` when autotuning is on; when it is off, any of
/// the others given is an error.
fn autotune(l: &Layers<'_>) -> Result<Option<AutotuneConfig>, ConfigError> {
    let enabled = l.pick(&opt::AUTOTUNE)?;
    let l = Layers {
        autotuning: enabled.value,
        ..*l
    };
    let log_file = l.pick(&opt::AUTOTUNE_LOG_FILE)?;
    let warmup_samples = l.pick(&opt::AUTOTUNE_WARMUP_SAMPLES)?;
    let steps_per_sample = l.pick(&opt::AUTOTUNE_STEPS_PER_SAMPLE)?;
    let max_samples = l.pick(&opt::AUTOTUNE_BAYES_OPT_MAX_SAMPLES)?;
    let noise = l.pick(&opt::AUTOTUNE_GAUSSIAN_PROCESS_NOISE)?;

    if !enabled.value {
        let sources = [
            (opt::AUTOTUNE_LOG_FILE.flag, log_file.source),
            (opt::AUTOTUNE_WARMUP_SAMPLES.flag, warmup_samples.source),
            (opt::AUTOTUNE_STEPS_PER_SAMPLE.flag, steps_per_sample.source),
            (opt::AUTOTUNE_BAYES_OPT_MAX_SAMPLES.flag, max_samples.source),
            (opt::AUTOTUNE_GAUSSIAN_PROCESS_NOISE.flag, noise.source),
        ];
        let turned_off = enabled.is_explicit().then_some(enabled.source);
        refuse_any_set(&sources, |given| Refusal::OnlyAutotuning {
            given,
            turned_off,
        })?;
        return Ok(None);
    }

    let at_least_one = |o: &Opt<u32>, v: Sourced<u32>| match v.value {
        0 => Err(invalid(o.flag, Refusal::Zero)),
        v => Ok(v),
    };
    let noise_flag = opt::AUTOTUNE_GAUSSIAN_PROCESS_NOISE.flag;
    Ok(Some(AutotuneConfig {
        log_file: log_file.value,
        warmup_samples: warmup_samples.value,
        steps_per_sample: at_least_one(&opt::AUTOTUNE_STEPS_PER_SAMPLE, steps_per_sample)?,
        max_samples: at_least_one(&opt::AUTOTUNE_BAYES_OPT_MAX_SAMPLES, max_samples)?,
        gaussian_process_noise: non_negative(noise_flag, noise.value)?,
    }))
}

fn timeline(l: &Layers<'_>) -> Result<Option<Timeline>, ConfigError> {
    let file = l.pick(&opt::TIMELINE_FILENAME)?;
    let mark_cycles = l.pick(&opt::TIMELINE_MARK_CYCLES)?;
    Ok(file.value.map(|file| Timeline {
        file,
        mark_cycles: mark_cycles.value,
    }))
}

/// `--straggler-factor`, `--straggler-steps` and `--straggler-action`
/// (replace only in an elastic job).
fn stragglers(l: &Layers<'_>, elastic: bool) -> Result<StragglerPolicy, ConfigError> {
    let factor = l.pick(&opt::STRAGGLER_FACTOR)?.value;
    if !(factor.is_finite() && factor > 1.0) {
        let why = Refusal::FactorNotAbove1 { factor };
        return Err(invalid(opt::STRAGGLER_FACTOR.flag, why));
    }
    let steps = l.pick(&opt::STRAGGLER_STEPS)?.value;
    if steps == 0 {
        return Err(invalid(opt::STRAGGLER_STEPS.flag, Refusal::Zero));
    }
    let action = l.pick(&opt::STRAGGLER_ACTION)?;
    let action = match action.value.trim().to_ascii_lowercase().as_str() {
        "warn" => StragglerAction::Warn,
        "replace" if elastic => StragglerAction::Replace,
        "replace" => {
            let why = Refusal::ReplaceInStaticJob {
                given: action.source,
            };
            return Err(invalid(opt::STRAGGLER_ACTION.flag, why));
        }
        _ => {
            let text = action.value.into_owned();
            let why = Refusal::NotAStragglerAction { text };
            return Err(invalid(opt::STRAGGLER_ACTION.flag, why));
        }
    };
    Ok(StragglerPolicy {
        factor,
        steps: steps as u64,
        action,
    })
}

fn stall_check(l: &Layers<'_>) -> Result<StallCheck, ConfigError> {
    if l.pick(&opt::NO_STALL_CHECK)?.value {
        return Ok(StallCheck::Off);
    }
    let warning = l.pick(&opt::STALL_CHECK_WARNING_TIME_SECONDS)?;
    let shutdown = l.pick(&opt::STALL_CHECK_SHUTDOWN_TIME_SECONDS)?;
    let shutdown = seconds(opt::STALL_CHECK_SHUTDOWN_TIME_SECONDS.flag, shutdown.value)?;
    Ok(StallCheck::On {
        warning: seconds(opt::STALL_CHECK_WARNING_TIME_SECONDS.flag, warning.value)?,
        shutdown: (!shutdown.is_zero()).then_some(shutdown),
    })
}

/// `--thread-affinity`, whichever layer gave it (the file's list is checked
/// here, the other layers' text when parsed).
fn engine_cpus(l: &Layers<'_>) -> Result<Option<Vec<usize>>, ConfigError> {
    let cpus = l.pick(&opt::THREAD_AFFINITY)?.value;
    let Some(cpus) = cpus else { return Ok(None) };
    let text: Vec<String> = cpus.iter().map(usize::to_string).collect();
    let checked = super::parse::cpus(&text.join(","))
        .map_err(|why| invalid(opt::THREAD_AFFINITY.flag, why.into()))?;
    Ok(checked)
}

fn log_level(l: &Layers<'_>) -> Result<LogLevel, ConfigError> {
    let verbose = l.cli.verbose && l.cli.options.get(opt::LOG_LEVEL.flag).is_none();
    let raw = match verbose {
        true => Sourced::new("debug".into(), Source::CommandLine),
        false => l.pick(&opt::LOG_LEVEL)?,
    };
    LogLevel::parse(&raw.value).ok_or_else(|| {
        let why = BadValue::NotALogLevel {
            level: raw.value.to_string(),
        };
        invalid(opt::LOG_LEVEL.flag, why.into())
    })
}
