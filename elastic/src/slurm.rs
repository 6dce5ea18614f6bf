//! A Slurm allocation's hosts and slots, from the variables Slurm gives a
//! job (`salloc`, `sbatch`): `SLURM_JOB_NODELIST` in Slurm's compressed
//! host-list syntax and `SLURM_TASKS_PER_NODE` (`2(x3),1`). Pure parsing, no
//! I/O.
//!
//! The host-list grammar (Slurm's `hostlist_expand`): entries separated by
//! commas outside brackets; each entry a name with any number of bracket
//! groups, each group comma-separated numbers or `lo-hi` ranges, a range
//! keeping the zero padding of its lower bound (`node[08-10]` is `node08`,
//! `node09`, `node10`); an entry with several groups is their product, the
//! last group varying fastest.

use crate::hosts::HostSlots;

/// Most hosts one list may expand to (a bigger one is refused, not
/// allocated).
pub const MAX_HOSTS: usize = 1 << 16;

/// Why an allocation's variables were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlurmError {
    #[error("host list {list:?}: {why}")]
    HostList { list: String, why: String },
    #[error("SLURM_TASKS_PER_NODE {value:?}: {why}")]
    TasksPerNode { value: String, why: String },
    #[error("the allocation names {hosts} hosts but SLURM_TASKS_PER_NODE gives tasks for {counts}")]
    Counts { hosts: usize, counts: usize },
    #[error("{var} is not set: is this an allocation's shell (salloc, sbatch)?")]
    Missing { var: &'static str },
}

fn bad(list: &str, why: impl Into<String>) -> SlurmError {
    SlurmError::HostList {
        list: list.to_owned(),
        why: why.into(),
    }
}

/// The top-level entries of `list`: split at commas outside brackets.
fn entries(list: &str) -> Result<Vec<&str>, SlurmError> {
    let (mut depth, mut start, mut out) = (0usize, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err(bad(list, "nested brackets")),
            ']' if depth == 1 => depth = 0,
            ']' => return Err(bad(list, "a `]` without its `[`")),
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(bad(list, "a `[` without its `]`"));
    }
    out.push(&list[start..]);
    Ok(out)
}

/// The numbers of one bracket group (`01-03,7`), as text with its padding.
fn group(list: &str, body: &str, room: usize) -> Result<Vec<String>, SlurmError> {
    let mut out = Vec::new();
    for part in body.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(bad(
                list,
                format!("[{body}] holds {part:?}, not a number or range"),
            ));
        }
        let parse = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| bad(list, "a number too large"))
        };
        let (a, b) = (parse(lo)?, parse(hi)?);
        if a > b {
            return Err(bad(list, format!("the range {part} runs backwards")));
        }
        if (b - a) as usize >= room.saturating_sub(out.len()) {
            return Err(bad(list, format!("more than {MAX_HOSTS} hosts")));
        }
        out.extend((a..=b).map(|n| format!("{n:0width$}", width = lo.len())));
    }
    Ok(out)
}

/// One entry (`gpu-a[1-2]-b[01,03]`) expanded, with room for `room` more
/// hosts.
fn entry(list: &str, e: &str, room: usize) -> Result<Vec<String>, SlurmError> {
    let mut names = vec![String::new()];
    let mut rest = e;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| bad(list, "a `[` without its `]`"))?;
        let numbers = group(list, &rest[open + 1..close], room)?;
        if names.len().saturating_mul(numbers.len()) > room {
            return Err(bad(list, format!("more than {MAX_HOSTS} hosts")));
        }
        let prefix = &rest[..open];
        names = names
            .iter()
            .flat_map(|n| numbers.iter().map(move |x| format!("{n}{prefix}{x}")))
            .collect();
        rest = &rest[close + 1..];
    }
    Ok(names.into_iter().map(|n| n + rest).collect())
}

/// Expands a Slurm host list (`node[01-04,07],gpu-a[1-2]`) into its hosts,
/// in order.
pub fn expand(list: &str) -> Result<Vec<String>, SlurmError> {
    let mut out = Vec::new();
    for e in entries(list.trim())? {
        if e.is_empty() {
            return Err(bad(list, "an empty entry"));
        }
        if e.contains(char::is_whitespace) {
            return Err(bad(list, format!("{e:?} holds a space")));
        }
        let more = entry(list, e, MAX_HOSTS - out.len())?;
        out.extend(more);
    }
    Ok(out)
}

/// `SLURM_TASKS_PER_NODE` (`2(x3),1`) as one count per host.
pub fn tasks_per_node(value: &str) -> Result<Vec<usize>, SlurmError> {
    let fail = |why: &str| SlurmError::TasksPerNode {
        value: value.to_owned(),
        why: why.to_owned(),
    };
    let mut out = Vec::new();
    for part in value.trim().split(',') {
        let (count, times) = match part.split_once("(x") {
            Some((c, t)) => {
                let t = t
                    .strip_suffix(')')
                    .ok_or_else(|| fail("an `(x` without its `)`"))?;
                (c, t.parse::<usize>().map_err(|_| fail("a bad repeat"))?)
            }
            None => (part, 1),
        };
        let count = count.parse::<usize>().map_err(|_| fail("a bad count"))?;
        if out.len() + times > MAX_HOSTS {
            return Err(fail("more hosts than allowed"));
        }
        out.extend(std::iter::repeat_n(count, times));
    }
    Ok(out)
}

/// The allocation this process runs in, read through `var` (the
/// environment): its job id, each host with its workers as slots, and what
/// each worker's step is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub job_id: String,
    /// `SLURM_JOB_NODELIST` as Slurm wrote it (compressed), for `sinfo -n`.
    pub nodelist: String,
    pub hosts: Vec<HostSlots>,
    /// `SLURM_CPUS_PER_TASK`: each worker's step asks for as many.
    pub cpus_per_task: Option<u32>,
    /// GPUs on each node (`SLURM_GPUS_ON_NODE`, else `SLURM_GPUS_PER_NODE`).
    pub gpus_per_node: Option<usize>,
}

/// A GPU count as Slurm writes it: `4`, or `a100:4` with a type.
fn gpu_count(value: &str) -> Option<usize> {
    let count = value.trim().rsplit(':').next()?;
    count.parse().ok().filter(|&n| n > 0)
}

impl Allocation {
    /// `None` outside an allocation (no `SLURM_JOB_ID`).
    pub fn from_env(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Allocation>, SlurmError> {
        let Some(job_id) = var("SLURM_JOB_ID").filter(|v| !v.trim().is_empty()) else {
            return Ok(None);
        };
        let list = var("SLURM_JOB_NODELIST")
            .or_else(|| var("SLURM_NODELIST"))
            .ok_or(SlurmError::Missing {
                var: "SLURM_JOB_NODELIST",
            })?;
        let names = expand(&list)?;
        let counts = match var("SLURM_TASKS_PER_NODE") {
            Some(v) => tasks_per_node(&v)?,
            None => vec![1; names.len()],
        };
        if counts.len() != names.len() {
            return Err(SlurmError::Counts {
                hosts: names.len(),
                counts: counts.len(),
            });
        }
        let gpus_per_node = var("SLURM_GPUS_ON_NODE")
            .or_else(|| var("SLURM_GPUS_PER_NODE"))
            .and_then(|v| gpu_count(&v));
        let hosts = names
            .into_iter()
            .zip(workers_per_node(&counts, gpus_per_node))
            .map(|(host, slots)| HostSlots { host, slots })
            .collect();
        let cpus_per_task = var("SLURM_CPUS_PER_TASK")
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n| n > 0);
        Ok(Some(Allocation {
            job_id: job_id.trim().to_owned(),
            nodelist: list.trim().to_owned(),
            hosts,
            cpus_per_task,
            gpus_per_node,
        }))
    }
}

/// Workers on each node: its tasks; but one worker per GPU where the
/// allocation has GPUs and one task on every node (the shape the
/// srun-plus-torchrun recipe asks for: `--ntasks-per-node=1
/// --gpus-per-node=8`).
pub fn workers_per_node(tasks: &[usize], gpus_per_node: Option<usize>) -> Vec<usize> {
    match gpus_per_node {
        Some(g) if tasks.iter().all(|&t| t == 1) => vec![g; tasks.len()],
        _ => tasks.to_vec(),
    }
}

/// Whether a node in state `state` (sinfo's `%t`: `idle`, `alloc`, `mix`,
/// `down*`, `drain`, `drng`, ...) can run workers: not down, drained or
/// draining, failing, in maintenance, unknown, not responding (`*`), or
/// powered off or powering down (`~`, `%`, `!`).
pub fn node_usable(state: &str) -> bool {
    let state = state.trim().to_ascii_lowercase();
    if state.contains(['*', '~', '%', '!']) {
        return false;
    }
    let base = state.trim_end_matches(|c: char| !c.is_ascii_alphabetic());
    !matches!(
        base,
        "down"
            | "drain"
            | "drained"
            | "draining"
            | "drng"
            | "fail"
            | "failg"
            | "failing"
            | "maint"
            | "unk"
            | "unknown"
            | "no_resp"
            | "npc"
            | "futr"
            | "future"
            | "inval"
            | "pow_dn"
            | "pow_up"
            | "boot"
            | "reboot"
    )
}

/// The allocation's `hosts` that `sinfo -h -N -o "%N %t"` (its output,
/// `states`) does not show unusable, in their order. A node sinfo lists
/// twice (in two partitions) is left out if either line says so; one it
/// does not list is kept (the allocation holds it).
pub fn usable(hosts: &[HostSlots], states: &str) -> Vec<HostSlots> {
    let bad: std::collections::HashSet<&str> = states
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (node, state) = (w.next()?, w.next()?);
            (!node_usable(state)).then_some(node)
        })
        .collect();
    hosts
        .iter()
        .filter(|h| !bad.contains(h.host.as_str()))
        .cloned()
        .collect()
}

#[cfg(test)]
#[path = "slurm_tests.rs"]
mod tests;
