//! Every control-plane message, defined once for both ends.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::auth::{Nonce, Proof};

/// Worker -> coordinator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WorkerMsg {
    /// Answer to the challenge (see [`crate::auth`]).
    Prove { nonce: Nonce, proof: Proof },
    /// Who this worker is and where its data plane listens.
    Register(Registration),
    /// Liveness, sent every heartbeat interval.
    Heartbeat { generation: u64 },
}

/// Coordinator -> worker.
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
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub host: String,
    pub slot: u32,
    pub pid: u32,
    pub data_addr: SocketAddr,
}

/// A worker's place in one generation, and the knobs it runs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    pub generation: u64,
    pub rank: u32,
    pub size: u32,
    pub local_rank: u32,
    pub local_size: u32,
    pub cross_rank: u32,
    pub cross_size: u32,
    /// Data-plane address of every rank, by rank.
    pub peers: Vec<SocketAddr>,
    /// Token the data-plane mesh checks, so that two jobs never cross-connect.
    pub data_token: u64,
    pub knobs: Knobs,
}

/// Engine settings decided by the coordinator (from its configuration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Knobs {
    pub fusion_threshold_bytes: u64,
    pub cycle_time_us: u64,
    pub cache_capacity: u32,
    pub hierarchical_allreduce: bool,
    pub hierarchical_allgather: bool,
    pub timeline: Option<String>,
    pub timeline_mark_cycles: bool,
    /// Warn about a tensor other ranks have not submitted after this many
    /// milliseconds; `None`: the stall check is off.
    pub stall_warning_ms: Option<u64>,
    /// End the job after this many milliseconds of such a stall; `None`: never.
    pub stall_shutdown_ms: Option<u64>,
}
