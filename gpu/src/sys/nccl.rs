//! The NCCL library, opened by this crate rather than by cudarc, so that a
//! process holds one NCCL: cudarc looks only for a fixed list of names
//! (`libnccl.so`, `libnccl.so.12`, ...) and never for `libnccl.so.2`, the
//! only file PyTorch's wheels ship, so inside a torch process it would find
//! none or load a second copy (docs/gpu.md, "Which NCCL").
//!
//! The library is, in this order: the file `ELASTICRUN_NCCL_LIBRARY` names;
//! an NCCL already mapped into this process (torch's, read from
//! `/proc/self/maps`), which opening by its path hands back as the same
//! object; `libnccl.so.2` or `libnccl.so` from the loader's search path.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use libloading::Library;

/// `ncclResult_t` as the C functions return it: read as a plain integer,
/// since a library newer than the bindings may return codes they lack.
pub(crate) type Code = c_int;

type Buf = *const c_void;
type BufMut = *mut c_void;

/// The NCCL functions elasticrun calls, resolved once.
pub(crate) struct Nccl {
    pub(crate) path: String,
    pub(crate) get_version: unsafe extern "C" fn(*mut c_int) -> Code,
    pub(crate) get_unique_id: unsafe extern "C" fn(*mut ncclUniqueId) -> Code,
    pub(crate) comm_init_rank_config:
        unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int, *mut c_void) -> Code,
    pub(crate) comm_get_async_error: unsafe extern "C" fn(ncclComm_t, *mut c_int) -> Code,
    pub(crate) comm_abort: unsafe extern "C" fn(ncclComm_t) -> Code,
    pub(crate) group_start: unsafe extern "C" fn() -> Code,
    pub(crate) group_end: unsafe extern "C" fn() -> Code,
    pub(crate) all_reduce: unsafe extern "C" fn(
        Buf,
        BufMut,
        usize,
        ncclDataType_t,
        ncclRedOp_t,
        ncclComm_t,
        cudaStream_t,
    ) -> Code,
    pub(crate) broadcast: unsafe extern "C" fn(
        Buf,
        BufMut,
        usize,
        ncclDataType_t,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Code,
    pub(crate) reduce: unsafe extern "C" fn(
        Buf,
        BufMut,
        usize,
        ncclDataType_t,
        ncclRedOp_t,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Code,
    pub(crate) all_gather:
        unsafe extern "C" fn(Buf, BufMut, usize, ncclDataType_t, ncclComm_t, cudaStream_t) -> Code,
    pub(crate) reduce_scatter: unsafe extern "C" fn(
        Buf,
        BufMut,
        usize,
        ncclDataType_t,
        ncclRedOp_t,
        ncclComm_t,
        cudaStream_t,
    ) -> Code,
    pub(crate) send:
        unsafe extern "C" fn(Buf, usize, ncclDataType_t, c_int, ncclComm_t, cudaStream_t) -> Code,
    pub(crate) recv: unsafe extern "C" fn(
        BufMut,
        usize,
        ncclDataType_t,
        c_int,
        ncclComm_t,
        cudaStream_t,
    ) -> Code,
    /// Kept open for the process's life (the functions above point into it).
    _lib: Library,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl").field("path", &self.path).finish()
    }
}

/// The variable that names the NCCL library to use.
pub const LIBRARY_VAR: &str = "ELASTICRUN_NCCL_LIBRARY";

/// The NCCL library in `maps` (the text of `/proc/self/maps`): the first
/// mapped file named `libnccl.so` or `libnccl.so.N`.
pub(crate) fn mapped_nccl(maps: &str) -> Option<String> {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| {
            let file = path.rsplit('/').next().unwrap_or(path);
            path.starts_with('/')
                && (file == "libnccl.so"
                    || file
                        .strip_prefix("libnccl.so.")
                        .is_some_and(|v| v.split('.').all(|p| p.parse::<u32>().is_ok())))
        })
        .map(str::to_owned)
}

/// Where to look, in order, with the environment and maps given.
pub(crate) fn candidates(named: Option<String>, maps: &str) -> Vec<String> {
    if let Some(path) = named.filter(|p| !p.trim().is_empty()) {
        return vec![path];
    }
    mapped_nccl(maps)
        .into_iter()
        .chain(["libnccl.so.2".to_owned(), "libnccl.so".to_owned()])
        .collect()
}

/// The process's NCCL, opened on first use; the error says what was tried.
pub(crate) fn nccl() -> Result<&'static Nccl, String> {
    static LIB: OnceLock<Result<Nccl, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let tried = candidates(std::env::var(LIBRARY_VAR).ok(), &maps);
        let mut why = Vec::new();
        for path in &tried {
            match open(path) {
                Ok(n) => return Ok(n),
                Err(e) => why.push(format!("{path}: {e}")),
            }
        }
        Err(why.join("; "))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Resolves one symbol as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C signature of `name` in NCCL's `nccl.h`.
unsafe fn sym<F: Copy>(lib: &Library, name: &str) -> Result<F, libloading::Error> {
    // SAFETY: the caller names the symbol's true type.
    unsafe { lib.get::<F>(name.as_bytes()).map(|s| *s) }
}

fn open(path: &str) -> Result<Nccl, libloading::Error> {
    // SAFETY: opening NCCL runs its initialisers, which only set up the
    // library's own state.
    let lib = unsafe { Library::new(path) }?;
    macro_rules! resolve {
        ($name:literal) => {{
            // SAFETY: the field this fills has the type of the function's
            // prototype in nccl.h (NCCL 2.17 and later).
            unsafe { sym(&lib, $name) }?
        }};
    }
    Ok(Nccl {
        path: path.to_owned(),
        get_version: resolve!("ncclGetVersion"),
        get_unique_id: resolve!("ncclGetUniqueId"),
        comm_init_rank_config: resolve!("ncclCommInitRankConfig"),
        comm_get_async_error: resolve!("ncclCommGetAsyncError"),
        comm_abort: resolve!("ncclCommAbort"),
        group_start: resolve!("ncclGroupStart"),
        group_end: resolve!("ncclGroupEnd"),
        all_reduce: resolve!("ncclAllReduce"),
        broadcast: resolve!("ncclBroadcast"),
        reduce: resolve!("ncclReduce"),
        all_gather: resolve!("ncclAllGather"),
        reduce_scatter: resolve!("ncclReduceScatter"),
        send: resolve!("ncclSend"),
        recv: resolve!("ncclRecv"),
        _lib: lib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f10-7f11 r-xp 00000000 08:01 2 /venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
7f20-7f21 r--p 00000000 00:00 0 [heap]
7f30-7f31 r--p 00000000 08:01 3 /opt/libnccl.so.2.30.7.bak
";

    #[test]
    fn torchs_nccl_is_found_in_the_maps() {
        assert_eq!(
            mapped_nccl(MAPS).as_deref(),
            Some("/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2")
        );
        assert_eq!(mapped_nccl("7f-8f r--p 0 0:0 0 [stack]\n"), None);
        assert_eq!(mapped_nccl("7f-8f r--p 0 0:0 0 /x/libnccl-net.so\n"), None);
    }

    #[test]
    fn a_named_library_is_the_only_candidate() {
        assert_eq!(
            candidates(Some("/x/libnccl.so.2".into()), MAPS),
            ["/x/libnccl.so.2"]
        );
        let found = candidates(Some(" ".into()), MAPS);
        assert_eq!(found.len(), 3);
        assert!(found[0].ends_with("nvidia/nccl/lib/libnccl.so.2"));
        assert_eq!(candidates(None, ""), ["libnccl.so.2", "libnccl.so"]);
    }
}
