//! The data plane's `unsafe` code, all of it (see the `unsafe` policy in
//! docs/architecture.md): a shared mapping of a memory file, the words the
//! shared-memory rings synchronise on, and the copies in and out of it.
//!
//! Everything here checks bounds and alignment itself and returns `None`
//! instead of touching memory outside the mapping, so that a peer which
//! writes nonsense into the shared indices can garble bytes at worst, never
//! make this process read or write outside the segment.

use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

/// A read-write `MAP_SHARED` mapping of a whole memory file, unmapped on drop.
#[derive(Debug)]
pub(crate) struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access
// goes through atomics or through copies whose exclusive use the ring protocol
// (acquire/release on its indices) hands to one side at a time, so sharing the
// handle between threads adds nothing that sharing it between processes does
// not already have.
unsafe impl Send for SharedMap {}
// SAFETY: as for `Send`: `&SharedMap` only offers atomics and bounded copies.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps the first `len` bytes of `fd` read-write and shared.
    pub(crate) fn map(fd: impl AsFd, len: usize) -> std::io::Result<Self> {
        let size = NonZeroUsize::new(len).ok_or(std::io::ErrorKind::InvalidInput)?;
        let prot = ProtFlags::PROT_READ | ProtFlags::PROT_WRITE;
        // SAFETY: a fresh mapping at an address the kernel picks aliases no
        // Rust object; the file is a sealed memory file whose size the caller
        // checked, so no access within `len` can fault.
        let ptr = unsafe { mmap(None, size, prot, MapFlags::MAP_SHARED, fd, 0) }?;
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address of `size` bytes at `offset`, if they lie inside the
    /// mapping and `offset` is a multiple of `align`.
    fn at(&self, offset: usize, size: usize, align: usize) -> Option<*mut u8> {
        let end = offset.checked_add(size)?;
        if end > self.len || !offset.is_multiple_of(align) {
            return None;
        }
        Some(self.ptr.as_ptr().wrapping_add(offset))
    }

    /// The 64-bit atomic word at `offset`.
    pub(crate) fn u64_at(&self, offset: usize) -> Option<&AtomicU64> {
        let p = self.at(offset, 8, 8)?;
        // SAFETY: `p` is in bounds and aligned (checked by `at`; the mapping is
        // page-aligned), lives as long as `self`, and is only ever accessed
        // atomically, here and by the peer's identical code.
        Some(unsafe { AtomicU64::from_ptr(p.cast()) })
    }

    /// The 32-bit atomic word at `offset`.
    pub(crate) fn u32_at(&self, offset: usize) -> Option<&AtomicU32> {
        let p = self.at(offset, 4, 4)?;
        // SAFETY: as in `u64_at`, for a 4-byte aligned word.
        Some(unsafe { AtomicU32::from_ptr(p.cast()) })
    }

    /// Copies `src` into the mapping at `offset`.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Option<()> {
        let p = self.at(offset, src.len(), 1)?;
        // SAFETY: the destination is in bounds (checked by `at`) and cannot
        // overlap `src`, a Rust slice outside the mapping; the ring protocol
        // gives this side the range until it publishes it with a release
        // store, so the peer neither reads nor writes it meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Some(())
    }

    /// Copies from the mapping at `offset` into `dst`.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Option<()> {
        let p = self.at(offset, dst.len(), 1)?;
        // SAFETY: the source is in bounds (checked by `at`) and cannot overlap
        // `dst`; the peer published the range with a release store that this
        // side acquired, and does not touch it again until this side releases
        // it. A peer breaking that rule can only garble bytes, any of which is
        // a valid `u8`.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
        Some(())
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what `mmap` returned, and no
        // reference into the mapping outlives `self` (every accessor borrows it).
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}
