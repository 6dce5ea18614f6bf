//! torchrun's `PET_*` variables, read as the defaults of the options they
//! match, so that `elasticrun` stands where torchrun stands: Kubeflow
//! Trainer's torch runtime, and anything else that starts `torchrun` with its
//! flags in the environment (torchrun reads `PET_<FLAG>` for each of its
//! flags). Anything the command line, an `ELASTICRUN_*` variable or the config
//! file says wins over them.
//!
//! | variable | torchrun's flag | elasticrun |
//! |---|---|---|
//! | `PET_NNODES` (`N` or `MIN:MAX`) | `--nnodes` | `-np` = N (MAX) x the workers per node; in etcd mode also `--min-np` = MIN x, `--max-np` = MAX x |
//! | `PET_NPROC_PER_NODE` (a count, `auto`, `cpu`, `gpu`) | `--nproc-per-node` | `--nproc-per-node`: the workers each node (pod) starts |
//! | `PET_NODE_RANK` | `--node-rank` | nodes 0 and 1 run the coordinator's replicas (etcd mode) |
//! | `PET_MASTER_PORT` | `--master-port` | `elasticrun serve`'s `--port` |
//! | `PET_MASTER_ADDR` | `--master-addr` | not needed: workers find the leading coordinator through etcd |

pub(crate) const NNODES: &str = "PET_NNODES";
pub(crate) const NPROC_PER_NODE: &str = "PET_NPROC_PER_NODE";
pub(crate) const NODE_RANK: &str = "PET_NODE_RANK";
pub(crate) const MASTER_PORT: &str = "PET_MASTER_PORT";

/// The nodes of rank below this run a coordinator replica beside their
/// workers: two, as `deploy/kubernetes/coordinator.yaml`'s Deployment has.
pub const REPLICA_NODES: usize = 2;

/// What torchrun's variables say, each where set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Torchrun {
    /// `PET_NNODES`: at least and at most this many nodes.
    pub nnodes: Option<(usize, usize)>,
    /// `PET_NPROC_PER_NODE`, counted for this machine.
    pub nproc_per_node: Option<usize>,
    /// `PET_NODE_RANK`.
    pub node_rank: Option<usize>,
    /// `PET_MASTER_PORT`.
    pub master_port: Option<u16>,
}

/// Why a `PET_*` variable's value is refused.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum Why {
    #[error("expected a count of at least one")]
    Count,
    #[error("expected N or MIN:MAX nodes, MIN at most MAX")]
    Range,
    #[error("expected a count of at least one, auto, cpu or gpu")]
    ProcsPerNode,
    #[error("this machine has no NVIDIA GPU (no /dev/nvidiaN)")]
    NoGpu,
    #[error("expected a non-negative integer")]
    Rank,
    #[error("expected a port number (1-65535)")]
    Port,
}

/// A `PET_*` variable elasticrun cannot read.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{var}={value:?} (torchrun's variable): {why}")]
pub struct TorchrunError {
    pub var: &'static str,
    pub value: String,
    pub why: Why,
}

/// How many of each accelerator this machine has, for `auto`, `cpu` and
/// `gpu`.
#[derive(Clone, Copy, Debug)]
pub struct Machine {
    pub cpus: usize,
    pub gpus: usize,
}

impl Machine {
    /// This machine: its usable CPUs, and its NVIDIA GPUs as the device
    /// files a container is given (`/dev/nvidia0`, ...).
    pub fn here() -> Machine {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let gpus = std::fs::read_dir("/dev").map_or(0, |d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.strip_prefix("nvidia")
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        });
        Machine { cpus, gpus }
    }
}

impl Torchrun {
    /// Reads the variables through `env`; `None` when none is set.
    pub fn read(
        env: &dyn Fn(&str) -> Option<String>,
        machine: impl FnOnce() -> Machine,
    ) -> Result<Option<Torchrun>, TorchrunError> {
        let get = |var: &'static str| {
            env(var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .map(|v| (var, v))
        };
        let bad = |var: &'static str, value: &str, why: Why| TorchrunError {
            var,
            value: value.to_owned(),
            why,
        };
        let mut t = Torchrun::default();
        if let Some((var, v)) = get(NNODES) {
            t.nnodes = Some(nnodes(&v).map_err(|why| bad(var, &v, why))?);
        }
        if let Some((var, v)) = get(NPROC_PER_NODE) {
            t.nproc_per_node = Some(nproc(&v, machine).map_err(|why| bad(var, &v, why))?);
        }
        if let Some((var, v)) = get(NODE_RANK) {
            let rank = v.parse().map_err(|_| bad(var, &v, Why::Rank))?;
            t.node_rank = Some(rank);
        }
        if let Some((var, v)) = get(MASTER_PORT) {
            let port = v.parse().ok().filter(|p| *p != 0);
            t.master_port = Some(port.ok_or_else(|| bad(var, &v, Why::Port))?);
        }
        Ok((t != Torchrun::default()).then_some(t))
    }

    /// Whether this node runs a coordinator replica: nodes 0 and 1, or every
    /// node where `PET_NODE_RANK` is not set.
    pub fn runs_replica(&self) -> bool {
        self.node_rank.is_none_or(|r| r < REPLICA_NODES)
    }
}

/// `N` or `MIN:MAX`, each at least one.
fn nnodes(v: &str) -> Result<(usize, usize), Why> {
    let count = |s: &str| match s.trim().parse::<usize>() {
        Ok(0) | Err(_) => Err(Why::Count),
        Ok(n) => Ok(n),
    };
    match v.split_once(':') {
        None => count(v).map(|n| (n, n)),
        Some((min, max)) => {
            let (min, max) = (count(min)?, count(max)?);
            if min > max {
                return Err(Why::Range);
            }
            Ok((min, max))
        }
    }
}

/// A count, or torchrun's `auto` (the GPUs, else the CPUs), `cpu`, `gpu`.
fn nproc(v: &str, machine: impl FnOnce() -> Machine) -> Result<usize, Why> {
    if let Ok(n) = v.parse::<usize>() {
        return if n == 0 { Err(Why::Count) } else { Ok(n) };
    }
    let m = match v {
        "auto" | "cpu" | "gpu" => machine(),
        _ => return Err(Why::ProcsPerNode),
    };
    match v {
        "gpu" if m.gpus == 0 => Err(Why::NoGpu),
        "gpu" => Ok(m.gpus),
        "auto" if m.gpus > 0 => Ok(m.gpus),
        _ => Ok(m.cpus.max(1)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Option<Torchrun>, TorchrunError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let machine = || Machine { cpus: 6, gpus: 0 };
        Torchrun::read(&|k| vars.get(k).cloned(), machine)
    }

    #[test]
    fn none_set_is_none() {
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(read(&[(NNODES, "  ")]), Ok(None));
    }

    #[test]
    fn what_kubeflow_trainer_gives_a_node() {
        let t = read(&[
            (NNODES, "4"),
            (NPROC_PER_NODE, "2"),
            (NODE_RANK, "3"),
            ("PET_MASTER_ADDR", "job-node-0-0.job"),
            (MASTER_PORT, "29400"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((t.nnodes, t.nproc_per_node), (Some((4, 4)), Some(2)));
        assert_eq!(t.node_rank, Some(3));
        assert_eq!(t.master_port, Some(29400));
        assert!(!t.runs_replica());
        let first = read(&[(NNODES, "4"), (NODE_RANK, "1")]).unwrap().unwrap();
        assert!(first.runs_replica());
    }

    #[test]
    fn a_range_of_nodes_as_torchrun_writes_it() {
        let t = read(&[(NNODES, "2:4"), (NPROC_PER_NODE, "3")])
            .unwrap()
            .unwrap();
        assert_eq!(t.nnodes, Some((2, 4)));
        assert!(t.runs_replica(), "without a node rank every node runs one");
    }

    #[test]
    fn auto_cpu_and_gpu_count_the_machine() {
        let count = |v: &str, cpus, gpus| nproc(v, || Machine { cpus, gpus });
        assert_eq!(count("auto", 6, 0), Ok(6));
        assert_eq!(count("auto", 6, 8), Ok(8));
        assert_eq!(count("cpu", 6, 8), Ok(6));
        assert_eq!(count("gpu", 6, 8), Ok(8));
        assert_eq!(count("gpu", 6, 0), Err(Why::NoGpu));
        assert_eq!(count("7", 6, 0), Ok(7));
    }

    #[test]
    fn garbage_is_refused_naming_the_variable() {
        for (var, value) in [
            (NNODES, "0"),
            (NNODES, "4:2"),
            (NNODES, "two"),
            (NNODES, "1:"),
            (NPROC_PER_NODE, "0"),
            (NPROC_PER_NODE, "xpu"),
            (NODE_RANK, "-1"),
            (MASTER_PORT, "70000"),
        ] {
            let e = read(&[(var, value)]).unwrap_err();
            assert_eq!(e.var, var);
            assert!(e.to_string().contains(var), "{e}");
        }
    }
}
