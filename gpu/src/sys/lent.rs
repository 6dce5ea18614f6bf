//! Device memory lent by the program (a PyTorch tensor's): used in place by
//! the collectives, never freed here.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use collectives::DType;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};

use crate::buffer::DeviceTensor;
use crate::error::GpuError;

/// What keeps lent memory allocated (the program's tensor object).
pub type Owner = Box<dyn std::any::Any + Send + Sync>;

/// A cudarc slice over lent memory. Dropping it gives the memory back: the
/// stream it was lent on waits for the slice's last use (cudarc's events),
/// then the memory's owner is let go; nothing is freed here.
pub(crate) struct LentSlice(ManuallyDrop<CudaSlice<u8>>, Option<Owner>);

impl std::fmt::Debug for LentSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LentSlice").field(&*self.0).finish()
    }
}

impl Deref for LentSlice {
    type Target = CudaSlice<u8>;
    fn deref(&self) -> &CudaSlice<u8> {
        &self.0
    }
}

impl DerefMut for LentSlice {
    fn deref_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.0
    }
}

impl Drop for LentSlice {
    fn drop(&mut self) {
        // SAFETY: the slice is taken once, here, and not used after.
        let slice = unsafe { ManuallyDrop::take(&mut self.0) };
        // The owner's stream waits for the last use; the memory stays its.
        let _ = slice.leak();
        // Only now may the owner free the memory.
        drop(self.1.take());
    }
}

/// Lends `len` elements of `dtype` at device address `ptr` on GPU `device`
/// to the engine, ordered after the work that `stream` (a raw `CUstream`
/// of the device's primary context, 0 for the legacy default stream) has
/// queued so far: an event recorded on it now is what every use of the
/// memory waits for. Dropping the result (or the engine's result made of
/// it) makes `stream` wait for the memory's last use, then drops `owner`.
///
/// # Safety
/// `ptr` must point to at least `len` elements of `dtype` of live device
/// memory in the primary context of `device` that stays allocated while
/// `owner` lives, and `stream` must be a live stream of that context that
/// outlives the returned tensor and anything made of it.
pub unsafe fn lend(
    device: usize,
    stream: u64,
    ptr: u64,
    len: usize,
    dtype: DType,
    owner: Owner,
) -> Result<DeviceTensor, GpuError> {
    let ctx = crate::context(device)?;
    // SAFETY: the caller vouches for the stream; it is borrowed, not owned,
    // so dropping the wrapper destroys nothing.
    let borrowed: Arc<CudaStream> =
        unsafe { ctx.wrap_borrowed_stream(stream as cudarc::driver::sys::CUstream) };
    let bytes = len * dtype.size();
    // SAFETY: the caller vouches for the memory; the slice never frees it
    // (LentSlice's drop leaks it back).
    let slice = unsafe { borrowed.upgrade_device_ptr::<u8>(ptr, bytes) };
    let mut lent = LentSlice(ManuallyDrop::new(slice), Some(owner));
    // The ready event: taking the pointer for writing on the owner's stream
    // records the slice's write event there when the guard drops, and every
    // later use on another stream waits for it.
    drop(lent.device_ptr_mut(&borrowed));
    Ok(DeviceTensor::lent(dtype, lent, len))
}
