//! The GPU path's only `unsafe` code: NCCL's C calls through cudarc's
//! `result` layer (its safe `Comm` makes only blocking communicators and has
//! no abort, ../docs/gpu.md), and the probes for the libraries, which cudarc
//! declares `unsafe`. Device pointers cross this module as plain integers;
//! every buffer behind one is a live allocation that its caller keeps
//! borrowed until NCCL has finished with it.

use std::ffi::c_int;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::nccl::{result, sys};

use crate::error::NcclCode;

/// Whether libcuda can be loaded (cudarc panics on first use otherwise).
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to load the library by its candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether libnccl can be loaded.
pub(crate) fn nccl_present() -> bool {
    // SAFETY: only tries to load the library by its candidate names.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// Whether an NCCL call finished or is still running (a non-blocking
/// communicator's calls may return before they are done).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    Done,
    Running,
}

fn progress(r: Result<result::NcclStatus, result::NcclError>) -> Result<Progress, NcclCode> {
    match r {
        Ok(result::NcclStatus::InProgress) => Ok(Progress::Running),
        Ok(_) => Ok(Progress::Done),
        Err(e) => Err(NcclCode(e.0 as u32)),
    }
}

/// The loaded NCCL's version, as `NCCL_VERSION_CODE` (2.21.5 is 22105).
pub(crate) fn version() -> Result<i32, NcclCode> {
    result::get_nccl_version().map_err(|e| NcclCode(e.0 as u32))
}

/// A fresh unique id for a new communicator.
pub(crate) fn unique_id() -> Result<[u8; 128], NcclCode> {
    let id = result::get_uniqueid().map_err(|e| NcclCode(e.0 as u32))?;
    Ok(id.internal.map(|c| c as u8))
}

/// `ncclConfig_t` as NCCL 2.17 laid it out. NCCL reads a config by its
/// `size` and `version`, so this prefix works with every later release.
#[repr(C)]
struct ConfigV2_17 {
    size: usize,
    magic: u32,
    version: u32,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const std::ffi::c_char,
    split_share: c_int,
}

/// `NCCL_VERSION(2, 17, 0)`.
pub(crate) const CONFIG_VERSION: i32 = 21700;

/// An NCCL communicator handle. Only [`crate::comm`] holds one, behind a
/// mutex, so no two NCCL calls on it ever overlap.
#[derive(Debug)]
pub(crate) struct RawComm(sys::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread, one call at a
// time; its owner serialises every call behind a mutex.
unsafe impl Send for RawComm {}

/// Starts making rank `rank` of a `size`-rank communicator, non-blocking:
/// [`async_error`] says when it is ready. The caller's CUDA context must be
/// current on this thread.
pub(crate) fn init_rank(
    size: usize,
    id: &[u8; 128],
    rank: usize,
) -> Result<(RawComm, Progress), NcclCode> {
    let nranks = c_int::try_from(size).map_err(|_| NcclCode(4))?;
    let rank = c_int::try_from(rank).map_err(|_| NcclCode(4))?;
    let id = sys::ncclUniqueId {
        internal: id.map(|b| b as std::ffi::c_char),
    };
    let mut config = ConfigV2_17 {
        size: std::mem::size_of::<ConfigV2_17>(),
        magic: 0xcafe_beef,
        version: CONFIG_VERSION as u32,
        blocking: 0,
        cga_cluster_size: c_int::MIN,
        min_ctas: c_int::MIN,
        max_ctas: c_int::MIN,
        net_name: std::ptr::null(),
        split_share: c_int::MIN,
    };
    let mut comm: sys::ncclComm_t = std::ptr::null_mut();
    let config_ptr: *mut ConfigV2_17 = &mut config;
    // SAFETY: `comm` and `config` are live locals; NCCL reads the config
    // (by its size and version) during this call only.
    let r =
        unsafe { result::comm_init_rank_config(&mut comm, nranks, id, rank, config_ptr.cast()) };
    let p = progress(r)?;
    if comm.is_null() {
        return Err(NcclCode(3));
    }
    Ok((RawComm(comm), p))
}

/// The communicator's asynchronous state: done, still running (a
/// non-blocking init or call), or the error that broke it.
pub(crate) fn async_error(comm: &RawComm) -> Result<Progress, NcclCode> {
    let mut state = sys::ncclResult_t::ncclSuccess;
    // SAFETY: `comm` is a live communicator (aborting consumes it) and
    // `state` a live local.
    let r = unsafe { sys::ncclCommGetAsyncError(comm.0, &mut state) };
    progress(r.result())?;
    progress(state.result())
}

/// Aborts the communicator: stops its kernels and frees it, whatever state
/// its peers are in.
pub(crate) fn abort(comm: RawComm) -> Result<(), NcclCode> {
    // SAFETY: `comm` is live and consumed here, so nothing uses it after.
    progress(unsafe { result::comm_abort(comm.0) }).map(drop)
}

/// One NCCL call on device pointers: what [`enqueue`] issues.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Call {
    AllReduce {
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: usize,
        op: sys::ncclRedOp_t,
    },
    Broadcast {
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: usize,
        root: usize,
    },
    Reduce {
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: usize,
        op: sys::ncclRedOp_t,
        root: usize,
    },
    AllGather {
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: usize,
    },
    ReduceScatter {
        send: CUdeviceptr,
        recv: CUdeviceptr,
        count: usize,
        op: sys::ncclRedOp_t,
    },
    Send {
        send: CUdeviceptr,
        count: usize,
        peer: usize,
    },
    Recv {
        recv: CUdeviceptr,
        count: usize,
        peer: usize,
    },
}

/// Issues `calls` on `stream` as one NCCL group (a single call needs none).
/// The caller holds every buffer a pointer names until the stream has run
/// past the calls.
pub(crate) fn enqueue(
    comm: &RawComm,
    calls: &[Call],
    dtype: sys::ncclDataType_t,
    stream: cudarc::driver::sys::CUstream,
) -> Result<Progress, NcclCode> {
    let grouped = calls.len() > 1;
    if grouped {
        progress(result::group_start())?;
    }
    let mut issued = Ok(Progress::Done);
    for call in calls {
        issued = issue(comm, *call, dtype, stream);
        if issued.is_err() {
            break;
        }
    }
    if grouped {
        let ended = progress(result::group_end());
        return issued.and(ended);
    }
    issued
}

fn int(v: usize) -> Result<c_int, NcclCode> {
    c_int::try_from(v).map_err(|_| NcclCode(4))
}

fn issue(
    comm: &RawComm,
    call: Call,
    dt: sys::ncclDataType_t,
    stream: cudarc::driver::sys::CUstream,
) -> Result<Progress, NcclCode> {
    let c = comm.0;
    let s = stream as sys::cudaStream_t;
    let p = |ptr: CUdeviceptr| ptr as *mut std::ffi::c_void;
    // In every arm: `c` is a live communicator; every pointer names device
    // memory of at least `count` elements of `dt` that the caller keeps
    // alive until `stream` has run past this call (module docs).
    let r = match call {
        Call::AllReduce {
            send,
            recv,
            count,
            op,
        } => {
            // SAFETY: see above.
            unsafe { result::all_reduce(p(send), p(recv), count, dt, op, c, s) }
        }
        Call::Broadcast {
            send,
            recv,
            count,
            root,
        } => {
            let root = int(root)?;
            // SAFETY: see above.
            unsafe { result::broadcast(p(send), p(recv), count, dt, root, c, s) }
        }
        Call::Reduce {
            send,
            recv,
            count,
            op,
            root,
        } => {
            let root = int(root)?;
            // SAFETY: see above.
            unsafe { result::reduce(p(send), p(recv), count, dt, op, root, c, s) }
        }
        Call::AllGather { send, recv, count } => {
            // SAFETY: see above.
            unsafe { result::all_gather(p(send), p(recv), count, dt, c, s) }
        }
        Call::ReduceScatter {
            send,
            recv,
            count,
            op,
        } => {
            // SAFETY: see above.
            unsafe { result::reduce_scatter(p(send), p(recv), count, dt, op, c, s) }
        }
        Call::Send { send, count, peer } => {
            let peer = int(peer)?;
            // SAFETY: see above.
            unsafe { result::send(p(send), count, dt, peer, c, s) }
        }
        Call::Recv { recv, count, peer } => {
            let peer = int(peer)?;
            // SAFETY: see above.
            unsafe { result::recv(p(recv), count, dt, peer, c, s) }
        }
    };
    progress(r)
}
