//! The GPU path's only `unsafe` code: NCCL's C calls through cudarc's
//! `result` layer (its safe `Comm` makes only blocking communicators and has
//! no abort, ../docs/gpu.md), the probes for the libraries, which cudarc
//! declares `unsafe`, and the page-locked stage of the two-level allreduce
//! (its allocation, and copies of part of it, which cudarc's safe copies
//! cannot make). Device pointers cross this module as plain integers;
//! every buffer behind one is a live allocation that its caller keeps
//! borrowed until NCCL or the copy has finished with it.

use std::ffi::c_int;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::nccl::sys;

use crate::error::NcclCode;

mod lent;
mod nccl;

pub(crate) use lent::LentSlice;
pub use lent::{Owner, lend};
pub use nccl::LIBRARY_VAR as NCCL_LIBRARY_VAR;

/// Whether libcuda can be loaded (cudarc panics on first use otherwise).
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to load the library by its candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The NCCL library this process uses, opened on first use; otherwise
/// what was tried and why each failed.
pub(crate) fn nccl_library() -> Result<&'static str, String> {
    nccl::nccl().map(|n| n.path.as_str())
}

/// The loaded NCCL, as an error code when there is none.
fn lib() -> Result<&'static nccl::Nccl, NcclCode> {
    // ncclSystemError: the library is missing (probe() names why first).
    nccl::nccl().map_err(|_| NcclCode(2))
}

/// Whether an NCCL call finished or is still running (a non-blocking
/// communicator's calls may return before they are done).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    Done,
    Running,
}

/// `ncclInProgress`.
const IN_PROGRESS: nccl::Code = 7;

fn progress(code: nccl::Code) -> Result<Progress, NcclCode> {
    match code {
        0 => Ok(Progress::Done),
        IN_PROGRESS => Ok(Progress::Running),
        c => Err(NcclCode(c as u32)),
    }
}

/// The loaded NCCL's version, as `NCCL_VERSION_CODE` (2.21.5 is 22105).
pub(crate) fn version() -> Result<i32, NcclCode> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a live local NCCL writes once.
    progress(unsafe { (lib()?.get_version)(&mut v) })?;
    Ok(v)
}

/// A fresh unique id for a new communicator.
pub(crate) fn unique_id() -> Result<[u8; 128], NcclCode> {
    let mut id = sys::ncclUniqueId { internal: [0; 128] };
    // SAFETY: `id` is a live local NCCL fills.
    progress(unsafe { (lib()?.get_unique_id)(&mut id) })?;
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
    let init = lib()?.comm_init_rank_config;
    // SAFETY: `comm` and `config` are live locals; NCCL reads the config
    // (by its size and version) during this call only.
    let r = unsafe { init(&mut comm, nranks, id, rank, config_ptr.cast()) };
    let p = progress(r)?;
    if comm.is_null() {
        return Err(NcclCode(3));
    }
    Ok((RawComm(comm), p))
}

/// The communicator's asynchronous state: done, still running (a
/// non-blocking init or call), or the error that broke it.
pub(crate) fn async_error(comm: &RawComm) -> Result<Progress, NcclCode> {
    let mut state: nccl::Code = 0;
    let get = lib()?.comm_get_async_error;
    // SAFETY: `comm` is a live communicator (aborting consumes it) and
    // `state` a live local.
    progress(unsafe { get(comm.0, &mut state) })?;
    progress(state)
}

/// Aborts the communicator: stops its kernels and frees it, whatever state
/// its peers are in.
pub(crate) fn abort(comm: RawComm) -> Result<(), NcclCode> {
    let abort = lib()?.comm_abort;
    // SAFETY: `comm` is live and consumed here, so nothing uses it after.
    progress(unsafe { abort(comm.0) }).map(drop)
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
    let n = lib()?;
    let grouped = calls.len() > 1;
    if grouped {
        // SAFETY: no arguments; groups nest.
        progress(unsafe { (n.group_start)() })?;
    }
    let mut issued = Ok(Progress::Done);
    for call in calls {
        issued = issue(n, comm, *call, dtype, stream);
        if issued.is_err() {
            break;
        }
    }
    if grouped {
        // SAFETY: ends the group started above.
        let ended = progress(unsafe { (n.group_end)() });
        return issued.and(ended);
    }
    issued
}

fn int(v: usize) -> Result<c_int, NcclCode> {
    c_int::try_from(v).map_err(|_| NcclCode(4))
}

fn issue(
    n: &nccl::Nccl,
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
            unsafe { (n.all_reduce)(p(send), p(recv), count, dt, op, c, s) }
        }
        Call::Broadcast {
            send,
            recv,
            count,
            root,
        } => {
            let root = int(root)?;
            // SAFETY: see above.
            unsafe { (n.broadcast)(p(send), p(recv), count, dt, root, c, s) }
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
            unsafe { (n.reduce)(p(send), p(recv), count, dt, op, root, c, s) }
        }
        Call::AllGather { send, recv, count } => {
            // SAFETY: see above.
            unsafe { (n.all_gather)(p(send), p(recv), count, dt, c, s) }
        }
        Call::ReduceScatter {
            send,
            recv,
            count,
            op,
        } => {
            // SAFETY: see above.
            unsafe { (n.reduce_scatter)(p(send), p(recv), count, dt, op, c, s) }
        }
        Call::Send { send, count, peer } => {
            let peer = int(peer)?;
            // SAFETY: see above.
            unsafe { (n.send)(p(send), count, dt, peer, c, s) }
        }
        Call::Recv { recv, count, peer } => {
            let peer = int(peer)?;
            // SAFETY: see above.
            unsafe { (n.recv)(p(recv), count, dt, peer, c, s) }
        }
    };
    progress(r)
}

/// Page-locked host memory of `len` bytes in `ctx`, zeroed before any slice
/// of it exists. Not write-combined, as cudarc's `alloc_pinned` is: the host
/// reads these bytes, and reads of write-combined memory are slow.
pub(crate) fn pinned_zeroed(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    len: usize,
) -> Result<cudarc::driver::PinnedHostSlice<u8>, cudarc::driver::DriverError> {
    // SAFETY: allocates `len` page-locked bytes (flags 0: plain); they are
    // all written below before anything reads them.
    let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<u8>(len, 0) }?;
    let ptr = pinned.as_mut_ptr()?;
    // SAFETY: `ptr` is the start of the `len` bytes this allocation owns,
    // and nothing else holds them yet.
    unsafe { std::ptr::write_bytes(ptr, 0, len) };
    Ok(pinned)
}

/// Copies the first `dst.len()` bytes of `src` into `dst` on `stream`,
/// asynchronously. `stream` first waits for earlier uses of `src` and `dst`;
/// the events recorded after the copy make later users (the host reading or
/// writing `src` again, freeing it) wait until the copy has run.
pub(crate) fn htod_prefix(
    stream: &cudarc::driver::CudaStream,
    src: &cudarc::driver::PinnedHostSlice<u8>,
    dst: &mut cudarc::driver::CudaViewMut<'_, u8>,
) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::{DevicePtrMut, HostSlice};
    stream.context().bind_to_thread()?;
    let n = dst.len();
    // SAFETY: cudarc's own first step of a copy from page-locked memory:
    // the stream waits for `src`'s event, and the guard records it again
    // once the copy below is issued.
    let (host, _src_done) = unsafe { src.stream_synced_slice(stream) };
    let Some(host) = host.get(..n) else {
        return Err(stage_too_small());
    };
    let (device, _dst_done) = dst.device_ptr_mut(stream);
    // SAFETY: `host` is `n` page-locked bytes that outlive the copy (the
    // allocation waits for its event before it is freed); `device` is the
    // `n` bytes of `dst`, ordered on `stream` by its guard.
    unsafe { cudarc::driver::result::memcpy_htod_async(device, host, stream.cu_stream()) }
}

/// Copies `src` into the first `src.len()` bytes of `dst` on `stream`,
/// asynchronously: `dst`'s event, recorded after the copy, is what the host
/// waits on before it reads them. (cudarc's `memcpy_dtoh` copies as many
/// bytes as the host side holds, so it cannot fill part of a larger stage.)
pub(crate) fn dtoh_prefix(
    stream: &cudarc::driver::CudaStream,
    src: &cudarc::driver::CudaView<'_, u8>,
    dst: &mut cudarc::driver::PinnedHostSlice<u8>,
) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::{DevicePtr, HostSlice};
    stream.context().bind_to_thread()?;
    let n = src.len();
    let (device, _src_done) = src.device_ptr(stream);
    // SAFETY: cudarc's own first step of a copy into page-locked memory:
    // the stream waits for `dst`'s event, and the guard records it again
    // once the copy below is issued.
    let (host, _dst_done) = unsafe { dst.stream_synced_mut_slice(stream) };
    let Some(host) = host.get_mut(..n) else {
        return Err(stage_too_small());
    };
    // SAFETY: `host` is `n` page-locked bytes that outlive the copy (the
    // allocation waits for its event before it is freed, and the host reads
    // them only after that event); `device` is the `n` bytes of `src`,
    // ordered on `stream` by its guard.
    unsafe { cudarc::driver::result::memcpy_dtoh_async(host, device, stream.cu_stream()) }
}

/// What a copy of more bytes than the page-locked stage holds fails with.
fn stage_too_small() -> cudarc::driver::DriverError {
    cudarc::driver::DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE)
}
