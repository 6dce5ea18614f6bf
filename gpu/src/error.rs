//! The GPU path's errors: what is missing on this machine, and what CUDA or
//! NCCL said, each with the call that said it.

use std::fmt;
use std::time::Duration;

/// An NCCL result code, with NCCL's meaning in words (cudarc's `NcclError`
/// prints only "NcclError").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclCode(pub u32);

impl NcclCode {
    /// Whether NCCL counts this code as fatal for the communicator (abort it
    /// and build a new one), as its user guide lists them; an invalid
    /// argument leaves the communicator usable.
    pub fn is_fatal(self) -> bool {
        self.0 != 4 && self.0 != 0 && self.0 != 7
    }

    fn meaning(self) -> &'static str {
        match self.0 {
            0 => "success",
            1 => "unhandled CUDA error",
            2 => "system error (a socket, memory or a file)",
            3 => "internal error",
            4 => "invalid argument",
            5 => "invalid usage",
            6 => "remote error: a peer failed or the network broke",
            7 => "operation in progress",
            8 => "timed out",
            _ => "unknown result code",
        }
    }
}

impl fmt::Display for NcclCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (ncclResult_t {})", self.meaning(), self.0)
    }
}

/// Why a GPU operation could not run or did not finish.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    #[error(
        "this build has no GPU support: rebuild with the `cuda` feature (e.g. `cargo build --release -p elasticrun-examples --features cuda`; docs/gpu.md)"
    )]
    NotBuilt,
    #[error("no CUDA driver: libcuda.so could not be loaded (no NVIDIA driver on this machine?)")]
    NoDriver,
    #[error(
        "no NCCL: none could be opened ({tried}); in a PyTorch environment import torch first (its NCCL is used), \
         otherwise install NCCL or name its libnccl.so.2 in ELASTICRUN_NCCL_LIBRARY (docs/gpu.md)"
    )]
    NoNccl { tried: String },
    #[error("NCCL {found} is too old: elasticrun needs NCCL {needed} or newer")]
    NcclTooOld { found: i32, needed: i32 },
    #[error("no GPU {ordinal}: this machine has {count}")]
    NoDevice { ordinal: usize, count: usize },
    #[error("CUDA {call} failed: {message}")]
    Cuda { call: &'static str, message: String },
    #[error("NCCL {call} failed: {code}")]
    Nccl { call: &'static str, code: NcclCode },
    #[error("NCCL {op} did not finish within {after:?}; the communicator was aborted")]
    Timeout { op: &'static str, after: Duration },
    #[error("NCCL {op} refused: the communicator was aborted after an earlier failure")]
    Aborted { op: &'static str },
    #[error("{what}: {detail}")]
    Usage { what: &'static str, detail: String },
}

impl From<GpuError> for collectives::CollectiveError {
    fn from(e: GpuError) -> Self {
        match e {
            GpuError::Timeout { op, after } => collectives::CollectiveError::BackendTimeout {
                backend: "nccl",
                op,
                after,
            },
            e => collectives::CollectiveError::BackendFailed {
                backend: "nccl",
                message: e.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_codes_say_what_they_mean() {
        assert_eq!(
            NcclCode(6).to_string(),
            "remote error: a peer failed or the network broke (ncclResult_t 6)"
        );
        assert_eq!(
            NcclCode(42).to_string(),
            "unknown result code (ncclResult_t 42)"
        );
        assert!(NcclCode(6).is_fatal());
        assert!(NcclCode(1).is_fatal());
        assert!(!NcclCode(4).is_fatal());
    }

    #[test]
    fn errors_name_the_call_and_convert_for_the_engine() {
        let e = GpuError::Nccl {
            call: "ncclAllReduce",
            code: NcclCode(5),
        };
        assert_eq!(
            e.to_string(),
            "NCCL ncclAllReduce failed: invalid usage (ncclResult_t 5)"
        );
        let c: collectives::CollectiveError = GpuError::Timeout {
            op: "allreduce",
            after: Duration::from_secs(3),
        }
        .into();
        assert!(matches!(
            c,
            collectives::CollectiveError::BackendTimeout {
                op: "allreduce",
                ..
            }
        ));
    }
}
