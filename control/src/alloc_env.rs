//! glibc's allocator settings for a worker: `GLIBC_TUNABLES` with a fixed
//! mmap threshold of 32 MiB (glibc's largest) and a trim threshold of 64 MiB,
//! unless the user chose allocator settings of their own.
//!
//! A training step allocates and frees the same tensors every step, many of
//! them between 128 KiB and a few MiB. With glibc's defaults the freed memory
//! is often handed back to the kernel (mapped chunks unmapped, the heap's top
//! trimmed) and the next step faults it in again, page by page, zeroed:
//! 10-15 thousand page faults and about 20 ms of kernel time a step for
//! mobilenet_v2 at batch 2 on two cores, 10% of the step (docs/BENCHMARKS.md).
//! With the thresholds fixed, freed memory stays in the process and is reused.
//! The QUIC data plane's receive buffers gain the same way. The launcher
//! gives this to every worker it starts, and collbench to its ranks.
//! The cost: up to 64 MiB of freed memory a process (per allocator arena)
//! stays mapped instead of going back to the system.

use std::ffi::OsStr;

/// The variable glibc reads its tunables from at a program's start.
pub const GLIBC_TUNABLES: &str = "GLIBC_TUNABLES";

/// What elasticrun adds to it.
pub const MALLOC_TUNABLES: &str =
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864";

/// `GLIBC_TUNABLES` for a worker, given the value elasticrun was started
/// with: [`MALLOC_TUNABLES`] when there was none; the user's own tunables
/// followed by ours when they set no `glibc.malloc.` ones; nothing (the
/// user's value reaches the worker as it is) when they set allocator
/// tunables, or an empty value (glibc's defaults), or one that is not UTF-8.
pub fn malloc_tunables(inherited: Option<&OsStr>) -> Option<(String, String)> {
    let value = match inherited.map(OsStr::to_str) {
        None => MALLOC_TUNABLES.to_owned(),
        Some(Some(v)) if !v.is_empty() && !v.contains("glibc.malloc.") => {
            format!("{v}:{MALLOC_TUNABLES}")
        }
        Some(_) => return None,
    };
    Some((GLIBC_TUNABLES.to_owned(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(v: Option<&str>) -> Option<String> {
        malloc_tunables(v.map(OsStr::new)).map(|(k, v)| {
            assert_eq!(k, GLIBC_TUNABLES);
            v
        })
    }

    #[test]
    fn a_worker_gets_the_allocator_thresholds_unless_the_user_chose_their_own() {
        assert_eq!(given(None).as_deref(), Some(MALLOC_TUNABLES));
        // Other tunables are kept, ours after them.
        assert_eq!(
            given(Some("glibc.cpu.hwcaps=-AVX512F")),
            Some(format!("glibc.cpu.hwcaps=-AVX512F:{MALLOC_TUNABLES}"))
        );
        // The user's allocator settings, or an empty value (glibc's
        // defaults), reach the worker as they are.
        assert_eq!(given(Some("glibc.malloc.arena_max=2")), None);
        assert_eq!(given(Some("")), None);
    }

    #[test]
    fn a_value_that_is_not_utf8_is_left_alone() {
        use std::os::unix::ffi::OsStrExt;
        let odd = OsStr::from_bytes(b"glibc.cpu.x=\xff");
        assert_eq!(malloc_tunables(Some(odd)), None);
    }
}
