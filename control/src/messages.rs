//! Every control-plane message, defined once for both ends.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::address::PeerAddress;
use crate::auth::{Nonce, Proof};
use crate::generation::Generation;

/// Worker -> coordinator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WorkerMsg {
    /// Answer to the challenge (see `crate::auth`).
    Prove { nonce: Nonce, proof: Proof },
    /// Who this worker is and where its data plane listens.
    Register(Registration),
    /// Liveness, sent every heartbeat interval, with the rank's progress and
    /// the tensors waiting on it (for the coordinator's stall inspector).
    Heartbeat {
        generation: Generation,
        /// The optimizer steps this rank's training state holds (its
        /// `Session::steps`): the coordinator's steps per second per rank.
        steps: u64,
        /// Bytes this rank's collectives carried, and how long it waited in
        /// them after submitting (since the worker started).
        collective_bytes: u64,
        collective_wait: Duration,
        pending: PendingReport,
    },
    /// Elastic jobs: this worker is done with its generation (a peer failed,
    /// the coordinator said [`CoordinatorMsg::Reset`], or it reached a commit
    /// after [`CoordinatorMsg::HostsUpdated`]) and asks to be placed in
    /// `generation`, its data plane now listening on `data_addr`.
    Rejoin {
        generation: Generation,
        data_addr: PeerAddress,
    },
    /// Elastic jobs: this worker entered `generation` and synced its state
    /// from rank 0, so it trains on from optimizer step `step`; `reached` is
    /// the step it had reached in the generation it left (`None` for a worker
    /// new to the job). The coordinator tells from these how long a recovery
    /// took and how many steps it rolled back.
    Running {
        generation: Generation,
        step: u64,
        reached: Option<u64>,
    },
    /// The program ended its training cleanly (`Worker::shutdown`): the
    /// connection closing next is this worker's exit 0, not a failure (a
    /// coordinator that does not see its workers' processes, `elasticrun
    /// serve`, tells them apart by this).
    Finished,
    /// The data-plane addresses of `ranks` (at most [`MAX_LOOKUP`]) in
    /// `generation`, which its assignment did not carry
    /// ([`PeerTable::Some`]); answered by [`CoordinatorMsg::Addresses`]
    /// with the same `id`.
    Lookup {
        id: u32,
        generation: Generation,
        ranks: Vec<u32>,
    },
}

/// Coordinator -> worker.
// Assignments are rare (one per worker and generation): not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CoordinatorMsg {
    Challenge {
        nonce: Nonce,
    },
    /// The coordinator's own proof: the worker knows it talks to its job.
    Proven {
        proof: Proof,
    },
    /// Rank and peers for a generation.
    Assign(Assignment),
    /// End now, saying why.
    Stop {
        reason: String,
    },
    /// Elastic jobs: workers failed; drop the current generation now (in-flight
    /// collectives fail) and rejoin for `generation`.
    Reset {
        generation: Generation,
    },
    /// Elastic jobs: hosts were added or removed; rejoin for `generation` at
    /// the next commit, with no rollback.
    HostsUpdated {
        generation: Generation,
    },
    /// Elastic jobs: this worker has no place in the new generation (its host
    /// was removed); it should exit cleanly.
    Leave {
        reason: String,
    },
    /// The answer to a [`WorkerMsg::Lookup`]: each rank asked for with its
    /// address; none when `generation` is not the current one any more (or
    /// a rank is not in it).
    Addresses {
        id: u32,
        generation: Generation,
        entries: Vec<(u32, PeerAddress)>,
    },
}

/// Most ranks one [`WorkerMsg::Lookup`] asks for: its answer stays well
/// within a frame ([`crate::codec::MAX_FRAME`]) whatever the addresses.
pub const MAX_LOOKUP: usize = 4096;

/// The peers' data-plane addresses an assignment carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PeerTable {
    /// Every rank's, by rank: a small generation's (one table, shared by
    /// every assignment of the generation in the coordinator).
    Whole(Arc<[PeerAddress]>),
    /// Only these ranks' (the worker's own, its ring, tree and doubling
    /// partners, its host's ranks): the others' are looked up when first
    /// needed ([`WorkerMsg::Lookup`]), so that a reset does not send every
    /// address to every worker.
    Some(Vec<(u32, PeerAddress)>),
}

impl From<Vec<PeerAddress>> for PeerTable {
    /// Every rank's, `peers[i]` rank `i`'s.
    fn from(peers: Vec<PeerAddress>) -> Self {
        PeerTable::Whole(peers.into())
    }
}

impl PeerTable {
    /// Rank `rank`'s address, if the table holds it.
    pub fn get(&self, rank: usize) -> Option<&PeerAddress> {
        match self {
            PeerTable::Whole(all) => all.get(rank),
            PeerTable::Some(some) => {
                let r = u32::try_from(rank).ok()?;
                some.iter().find(|(at, _)| *at == r).map(|(_, a)| a)
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub host: String,
    pub slot: u32,
    pub pid: u32,
    /// Where this worker's data plane listens.
    pub data_addr: PeerAddress,
    /// The generation the worker is in: 0 when it first registers; the
    /// current one when it reconnects after its control connection dropped
    /// (to the same coordinator, or one that took the job over).
    pub generation: Generation,
}

/// A worker's place in one generation, and the knobs it runs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub generation: Generation,
    pub rank: u32,
    pub size: u32,
    pub local_rank: u32,
    pub local_size: u32,
    pub cross_rank: u32,
    pub cross_size: u32,
    /// Data-plane addresses: every rank's, or some and the rest on demand.
    pub peers: PeerTable,
    /// Host of every rank, by rank: ranks with equal numbers share a host
    /// (the number is the host's position in the job's host list). The
    /// hierarchical collectives group ranks by it. Shared as a whole peer
    /// table is; empty in a large generation whose collectives are not
    /// hierarchical (nothing else reads it).
    pub hosts: Arc<[u32]>,
    /// Token the data-plane mesh checks, so that two jobs never cross-connect.
    pub data_token: u64,
    pub knobs: Knobs,
    /// For a worker on the QUIC data plane: the job's CA certificate and
    /// this worker's leaf for this rank and generation.
    pub tls: Option<TlsGrant>,
}

/// What a worker needs to speak TLS with its peers in one generation: the
/// job authority's certificate (the only root it trusts) and its own leaf,
/// both DER. Certificates are public: the private key never left the worker.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsGrant {
    pub ca: Vec<u8>,
    pub leaf: Vec<u8>,
}

impl std::fmt::Debug for TlsGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TlsGrant(ca {} bytes, leaf {} bytes)",
            self.ca.len(),
            self.leaf.len()
        )
    }
}

/// One setting of every engine knob the autotuner may move, a field for
/// each [`Knob`]: where a job's engines start (from the coordinator's
/// configuration) and what rank 0 hands every rank when it retunes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tuning {
    /// 0 turns fusion off.
    pub fusion_threshold_bytes: u64,
    pub cycle_time_us: u64,
    /// Whether the response cache is on (it holds
    /// [`Knobs::cache_capacity`] entries then).
    pub cache_enabled: bool,
    pub hierarchical_allreduce: bool,
    pub hierarchical_allgather: bool,
    /// Bytes per message in the segmented (ring, chain, alltoall) collectives.
    pub segment_bytes: u64,
}

impl Default for Tuning {
    /// elasticrun's defaults: 64 MiB fusion, 1 ms cycles, the cache on,
    /// flat collectives, 512 KiB segments.
    fn default() -> Self {
        Tuning {
            fusion_threshold_bytes: 64 << 20,
            cycle_time_us: 1000,
            cache_enabled: true,
            hierarchical_allreduce: false,
            hierarchical_allgather: false,
            segment_bytes: 512 << 10,
        }
    }
}

/// Engine settings decided by the coordinator (from its configuration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Knobs {
    /// The settings the autotuner may move, as the job starts.
    pub tuning: Tuning,
    /// Entries the response cache holds when it is on.
    pub cache_capacity: u32,
    pub timeline: Option<String>,
    pub timeline_mark_cycles: bool,
    /// Warn about a tensor other ranks have not submitted after this many
    /// milliseconds; `None`: the stall check is off.
    pub stall_warning_ms: Option<u64>,
    /// End the job after this many milliseconds of such a stall; `None`: never.
    pub stall_shutdown_ms: Option<u64>,
    /// `Some` when the job autotunes these knobs (rank 0 decides).
    pub autotune: Option<Autotune>,
}

impl Default for Knobs {
    /// elasticrun's defaults: [`Tuning::default`], a 1024-entry cache, no
    /// timeline, no stall check, no autotuning.
    fn default() -> Self {
        Knobs {
            tuning: Tuning::default(),
            cache_capacity: 1024,
            timeline: None,
            timeline_mark_cycles: false,
            stall_warning_ms: None,
            stall_shutdown_ms: None,
            autotune: None,
        }
    }
}

/// The autotuner's settings (`--autotune-*`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Autotune {
    /// Rank 0 writes one CSV row per sample here.
    pub log_file: Option<String>,
    pub warmup_samples: u32,
    pub steps_per_sample: u32,
    pub max_samples: u32,
    pub gaussian_process_noise: f64,
    /// Knobs the user set (command line, environment or config file): the
    /// autotuner holds them at their values.
    pub fixed: Vec<Knob>,
}

/// A knob the autotuner may move, named so that the user's own settings can be
/// held fixed: one variant per field of [`Tuning`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Knob {
    /// [`Tuning::fusion_threshold_bytes`] (`--fusion-threshold-mb`).
    FusionThreshold,
    /// [`Tuning::cycle_time_us`] (`--cycle-time-ms`).
    CycleTime,
    /// The response cache on or off: [`Tuning::cache_enabled`]
    /// (`--cache-capacity`, `--disable-cache`).
    Cache,
    /// [`Tuning::hierarchical_allreduce`] (`--hierarchical-allreduce`).
    HierarchicalAllreduce,
    /// [`Tuning::hierarchical_allgather`] (`--hierarchical-allgather`).
    HierarchicalAllgather,
    /// [`Tuning::segment_bytes`] (`--segment-size`).
    SegmentSize,
}

impl Knob {
    /// Every knob, in the order of [`Tuning`]'s fields.
    pub const ALL: [Knob; 6] = [
        Knob::FusionThreshold,
        Knob::CycleTime,
        Knob::Cache,
        Knob::HierarchicalAllreduce,
        Knob::HierarchicalAllgather,
        Knob::SegmentSize,
    ];
}

/// Most tensors one heartbeat lists.
pub const MAX_PENDING_REPORTED: usize = 512;
/// Longest tensor name (bytes) a heartbeat carries; longer names are cut at a
/// character boundary. With [`MAX_PENDING_REPORTED`] this bounds a heartbeat to
/// about 110 KiB, well under [`crate::MAX_FRAME`].
pub const MAX_PENDING_NAME: usize = 200;

/// The tensors submitted on a worker and not finished yet, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReport {
    pub tensors: Vec<PendingTensor>,
    /// How many more were pending but left out (each younger than every
    /// listed one).
    pub left_out: u32,
}

/// One pending tensor: its name and how long ago it was submitted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTensor {
    pub name: String,
    pub age_ms: u64,
}

impl PendingReport {
    /// A report of `tensors` (given oldest first): the first
    /// [`MAX_PENDING_REPORTED`], names cut to [`MAX_PENDING_NAME`] bytes.
    pub fn bounded<'a>(tensors: impl IntoIterator<Item = (&'a str, Duration)>) -> Self {
        let mut report = PendingReport::default();
        for (name, age) in tensors {
            if report.tensors.len() == MAX_PENDING_REPORTED {
                report.left_out = report.left_out.saturating_add(1);
                continue;
            }
            report.tensors.push(PendingTensor {
                name: cut_name(name).to_owned(),
                age_ms: u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
            });
        }
        report
    }

    /// Whether every pending tensor of the worker is listed.
    pub fn is_complete(&self) -> bool {
        self.left_out == 0
    }
}

/// `name` cut to at most [`MAX_PENDING_NAME`] bytes, at a character boundary.
pub fn cut_name(name: &str) -> &str {
    if name.len() <= MAX_PENDING_NAME {
        return name;
    }
    let mut end = MAX_PENDING_NAME;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_keeps_the_oldest_and_counts_the_rest() {
        let names: Vec<String> = (0..MAX_PENDING_REPORTED + 3)
            .map(|i| format!("grad.{i}"))
            .collect();
        let r = PendingReport::bounded(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (n.as_str(), Duration::from_millis(10_000 - i as u64))),
        );
        assert_eq!(r.tensors.len(), MAX_PENDING_REPORTED);
        assert_eq!(r.left_out, 3);
        assert!(!r.is_complete());
        assert_eq!(
            r.tensors[0],
            PendingTensor {
                name: "grad.0".into(),
                age_ms: 10_000
            }
        );
        assert!(PendingReport::bounded([("a", Duration::ZERO)]).is_complete());
    }

    #[test]
    fn fixed_knobs_cross_the_wire_as_themselves() {
        let a = Autotune {
            log_file: None,
            warmup_samples: 3,
            steps_per_sample: 10,
            max_samples: 20,
            gaussian_process_noise: 0.8,
            fixed: Knob::ALL.to_vec(),
        };
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(&a, config).unwrap();
        let (back, _): (Autotune, usize) =
            bincode::serde::decode_from_slice(&bytes, config).unwrap();
        assert_eq!(back.fixed, Knob::ALL);
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        let long = "\u{e9}".repeat(MAX_PENDING_NAME); // two bytes each
        let cut = cut_name(&long);
        assert_eq!(cut.len(), MAX_PENDING_NAME);
        let odd = format!("x{long}"); // the boundary falls inside a character
        let cut = cut_name(&odd);
        assert_eq!(cut.len(), MAX_PENDING_NAME - 1);
        assert!(odd.starts_with(cut));
        assert_eq!(cut_name("grad.3"), "grad.3");
    }
}
