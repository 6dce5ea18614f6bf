//! The launching options that need more than a pick: torchrun's variables
//! as defaults (`-np`, `--nproc-per-node`), `--max-restarts`,
//! `--prestart-imports`, `--metrics-address`.

use super::super::torchrun;
use super::{ConfigError, ElasticConfig, Layers, Refusal, Source, Sourced, invalid, opt};

/// `--nproc-per-node`, else torchrun's `PET_NPROC_PER_NODE`, else 1.
pub(super) fn nproc_per_node(l: &Layers<'_>) -> Result<Sourced<usize>, ConfigError> {
    let given = l.pick(&opt::NPROC_PER_NODE)?;
    if given.value == Some(0) {
        return Err(invalid(opt::NPROC_PER_NODE.flag, Refusal::NoProcess));
    }
    let pet = l.torchrun.and_then(|t| t.nproc_per_node);
    Ok(match (given.value, pet) {
        (Some(n), _) => Sourced::new(n, given.source),
        (None, Some(n)) => Sourced::new(n, Source::Environment(torchrun::NPROC_PER_NODE)),
        (None, None) => Sourced::new(1, Source::Default),
    })
}

/// `-np` where nothing set it: the nodes torchrun's `PET_NNODES` names
/// (at most) times the workers a node starts. In etcd mode (`serve`) that
/// is the job's size; on one machine the nodes must be one. A
/// `--nproc-per-node` given for a job with hosts is refused.
pub(super) fn np_per_node(
    l: &Layers<'_>,
    np: Sourced<Option<usize>>,
    per_node: &Sourced<usize>,
    one_machine: bool,
) -> Result<Sourced<Option<usize>>, ConfigError> {
    let serve = l.cli.serve;
    if !serve && !one_machine {
        let from_torchrun =
            matches!(per_node.source, Source::Environment(v) if v == torchrun::NPROC_PER_NODE);
        if per_node.is_explicit() && !from_torchrun {
            let why = Refusal::PerNodeWithHosts {
                given: per_node.source,
            };
            return Err(invalid(opt::NPROC_PER_NODE.flag, why));
        }
        return Ok(np);
    }
    let nodes = l.torchrun.and_then(|t| t.nnodes);
    if np.is_explicit() {
        return Ok(np);
    }
    match nodes {
        Some((_, max)) if !serve && max > 1 => {
            Err(invalid(opt::NP.flag, Refusal::TorchrunNodes { nodes: max }))
        }
        Some((_, max)) => {
            let n = max.saturating_mul(per_node.value);
            Ok(Sourced::new(Some(n), Source::Environment(torchrun::NNODES)))
        }
        None if !serve && per_node.is_explicit() => {
            Ok(Sourced::new(Some(per_node.value), per_node.source))
        }
        None => Ok(np),
    }
}

/// `--max-restarts`, refused with hot spares (spares wait inside the
/// runtime; a job run by restarts starts every worker anew) and by
/// `elasticrun serve` (its workers are pods that start by themselves).
pub(super) fn max_restarts(
    l: &Layers<'_>,
    elastic: Option<&ElasticConfig>,
    serve: bool,
) -> Result<u32, ConfigError> {
    let max_restarts = l.pick(&opt::MAX_RESTARTS)?;
    if max_restarts.value > 0 && serve {
        let given = max_restarts.source;
        let why = Refusal::RestartsInServe { given };
        return Err(invalid(opt::MAX_RESTARTS.flag, why));
    }
    if max_restarts.value > 0 && elastic.is_some_and(|e| e.hot_spares > 0) {
        let given = max_restarts.source;
        return Err(invalid(
            opt::MAX_RESTARTS.flag,
            Refusal::SparesRestarted { given },
        ));
    }
    Ok(max_restarts.value)
}

/// `--prestart-imports`: module names, for a Python COMMAND.
pub(super) fn prestart_imports(l: &Layers<'_>) -> Result<Vec<String>, ConfigError> {
    let given = l.pick(&opt::PRESTART_IMPORTS)?;
    let Some(text) = given.value else {
        return Ok(Vec::new());
    };
    let flag = opt::PRESTART_IMPORTS.flag;
    let names: Vec<String> = text.split(',').map(|m| m.trim().to_owned()).collect();
    let module = |m: &str| {
        !m.is_empty()
            && m.split('.').all(|p| {
                p.chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                    && p.chars().all(|c| c.is_alphanumeric() || c == '_')
            })
    };
    if let Some(bad) = names.iter().find(|m| !module(m)) {
        return Err(invalid(flag, Refusal::NotAModule { name: bad.clone() }));
    }
    if !l.cli.serve && crate::launch::warm::python_command(&l.cli.command).is_none() {
        let why = Refusal::PrestartNotPython {
            given: given.source,
        };
        return Err(invalid(flag, why));
    }
    Ok(names)
}

/// `--metrics-address`, as an address and port.
pub(super) fn metrics_address(l: &Layers<'_>) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    let Some(text) = l.pick(&opt::METRICS_ADDRESS)?.value else {
        return Ok(None);
    };
    match text.trim().parse() {
        Ok(a) => Ok(Some(a)),
        Err(_) => Err(invalid(
            opt::METRICS_ADDRESS.flag,
            Refusal::NotAnAddress { text },
        )),
    }
}
