//! Device tensors: [`DeviceBuffer`], elements of any [`Element`] type in GPU
//! memory, and [`Device`], the [`Memory`] whose slices they are.
//!
//! A buffer is a cudarc allocation of bytes typed by a marker, so that every
//! element type of the host path (f16 and bf16 included) has a device form
//! without cudarc's own trait bounds on it. cudarc orders each use of the
//! allocation on the stream that uses it (it records and waits on the
//! buffer's events), so a buffer dropped while NCCL still writes it is freed
//! only after that write.

use std::marker::PhantomData;
use std::sync::Arc;

use collectives::{DType, Element, Memory};
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DriverError, PinnedHostSlice,
};

use crate::error::GpuError;

/// GPU memory: slices and owned buffers are both [`DeviceBuffer`]s.
#[derive(Debug)]
pub enum Device {}

impl Memory for Device {
    type Slice<T: Element> = DeviceBuffer<T>;
    type Owned<T: Element> = DeviceBuffer<T>;
}

/// A buffer's memory: cudarc's own allocation, or memory the program lent
/// ([`crate::lend`]), which is used in place and never freed here.
#[derive(Debug)]
enum Bytes {
    Own(CudaSlice<u8>),
    /// Boxed: a buffer stays as small as cudarc's own slice.
    Lent(Box<crate::sys::LentSlice>),
}

impl std::ops::Deref for Bytes {
    type Target = CudaSlice<u8>;
    fn deref(&self) -> &CudaSlice<u8> {
        match self {
            Bytes::Own(s) => s,
            Bytes::Lent(l) => l,
        }
    }
}

impl std::ops::DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut CudaSlice<u8> {
        match self {
            Bytes::Own(s) => s,
            Bytes::Lent(l) => l,
        }
    }
}

/// `len` elements of `T` in the memory of one GPU.
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    bytes: Bytes,
    len: usize,
    _t: PhantomData<T>,
}

pub(crate) fn cuda(call: &'static str) -> impl FnOnce(DriverError) -> GpuError {
    move |e| GpuError::Cuda {
        call,
        message: e.to_string(),
    }
}

/// A [`DeviceBuffer`] whose element type is known at run time (the engine's
/// queue holds these, as it holds host buffers).
#[derive(Debug)]
pub struct DeviceTensor {
    dtype: DType,
    bytes: Bytes,
    len: usize,
}

impl DeviceTensor {
    pub(crate) fn lent(dtype: DType, lent: crate::sys::LentSlice, len: usize) -> Self {
        DeviceTensor {
            dtype,
            bytes: Bytes::Lent(Box::new(lent)),
            len,
        }
    }

    /// Whether this is the program's lent memory (a collective that
    /// worked in place), rather than a buffer of the engine's.
    pub fn is_lent(&self) -> bool {
        matches!(self.bytes, Bytes::Lent(_))
    }

    /// Copies the elements into `dst` (of the same type and length) on
    /// `dst`'s stream, after the last write of them.
    pub fn copy_into(&self, dst: &mut DeviceTensor) -> Result<(), GpuError> {
        if dst.dtype != self.dtype || dst.len != self.len {
            return Err(GpuError::Usage {
                what: "copying a GPU result out",
                detail: format!(
                    "the result is {} elements of {}, the destination {} of {}",
                    self.len, self.dtype, dst.len, dst.dtype
                ),
            });
        }
        let stream = dst.bytes.stream().clone();
        stream
            .memcpy_dtod(&*self.bytes, &mut *dst.bytes)
            .map_err(cuda("cuMemcpyDtoD"))
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The typed buffer, if it holds `T`; itself back otherwise.
    pub fn into_typed<T: Element>(self) -> Result<DeviceBuffer<T>, DeviceTensor> {
        if self.dtype != T::DTYPE {
            return Err(self);
        }
        Ok(DeviceBuffer {
            bytes: self.bytes,
            len: self.len,
            _t: PhantomData,
        })
    }

    /// The stream the buffer was allocated on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.bytes.stream()
    }
}

impl<T: Element> From<DeviceBuffer<T>> for DeviceTensor {
    fn from(b: DeviceBuffer<T>) -> Self {
        DeviceTensor {
            dtype: T::DTYPE,
            bytes: b.bytes,
            len: b.len,
        }
    }
}

impl<T: Element> DeviceBuffer<T> {
    /// `len` zeroed elements on `stream`'s device.
    pub fn zeros(stream: &Arc<CudaStream>, len: usize) -> Result<Self, GpuError> {
        let bytes = stream
            .alloc_zeros::<u8>(len * std::mem::size_of::<T>())
            .map_err(cuda("cuMemAlloc"))?;
        Ok(Self {
            bytes: Bytes::Own(bytes),
            len,
            _t: PhantomData,
        })
    }

    /// A copy of `host` on `stream`'s device.
    pub fn from_host(stream: &Arc<CudaStream>, host: &[T]) -> Result<Self, GpuError> {
        let bytes = stream
            .clone_htod(bytemuck::cast_slice::<T, u8>(host))
            .map_err(cuda("cuMemcpyHtoD"))?;
        Ok(Self {
            bytes: Bytes::Own(bytes),
            len: host.len(),
            _t: PhantomData,
        })
    }

    /// The elements, copied to the host once the buffer's stream has run
    /// past every use of it (this waits on the stream).
    pub fn to_host(&self) -> Result<Vec<T>, GpuError> {
        let stream = self.bytes.stream().clone();
        let bytes = stream
            .clone_dtoh(&*self.bytes)
            .map_err(cuda("cuMemcpyDtoH"))?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The stream the buffer was allocated on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.bytes.stream()
    }

    /// A new buffer holding elements `range` of this one, copied on `stream`.
    pub fn copy_range(
        &self,
        range: std::ops::Range<usize>,
        stream: &Arc<CudaStream>,
    ) -> Result<DeviceBuffer<T>, GpuError> {
        let mut out = DeviceBuffer::zeros(stream, range.len())?;
        self.copy_out(range.start, &mut out, stream)?;
        Ok(out)
    }

    /// Copies `src` into elements `at..at + src.len()` on `stream`.
    pub fn copy_in(
        &mut self,
        at: usize,
        src: &DeviceBuffer<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<(), GpuError> {
        self.copy_in_range(at, src, 0..src.len, stream)
    }

    /// Copies elements `range` of `src` into elements `at..at +
    /// range.len()` on `stream`.
    pub fn copy_in_range(
        &mut self,
        at: usize,
        src: &DeviceBuffer<T>,
        range: std::ops::Range<usize>,
        stream: &Arc<CudaStream>,
    ) -> Result<(), GpuError> {
        let size = std::mem::size_of::<T>();
        if at + range.len() > self.len || range.end > src.len {
            return Err(GpuError::Usage {
                what: "a copy between GPU buffers",
                detail: format!(
                    "elements {range:?} of {} into {}.. of {}",
                    src.len, at, self.len
                ),
            });
        }
        let from = src.bytes.slice(range.start * size..range.end * size);
        let mut dst = self.bytes.slice_mut(at * size..(at + range.len()) * size);
        stream
            .memcpy_dtod(&from, &mut dst)
            .map_err(cuda("cuMemcpyDtoD"))
    }

    /// Copies elements `at..at + dst.len()` into `dst` on `stream`.
    pub fn copy_out(
        &self,
        at: usize,
        dst: &mut DeviceBuffer<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<(), GpuError> {
        let size = std::mem::size_of::<T>();
        let src = self.bytes.slice(at * size..(at + dst.len) * size);
        stream
            .memcpy_dtod(&src, &mut *dst.bytes)
            .map_err(cuda("cuMemcpyDtoD"))
    }

    /// The device address of element 0 for reading on `stream`; `stream`
    /// first waits for earlier writes of the buffer, and the returned guard,
    /// dropped once the read is issued, makes later users wait for it.
    pub(crate) fn read_ptr<'a>(
        &'a self,
        stream: &'a CudaStream,
    ) -> (u64, cudarc::driver::SyncOnDrop<'a>) {
        self.bytes.device_ptr(stream)
    }

    /// Like [`DeviceBuffer::read_ptr`], for writing.
    pub(crate) fn write_ptr<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (u64, cudarc::driver::SyncOnDrop<'a>) {
        self.bytes.device_ptr_mut(stream)
    }
}

/// Page-locked host memory that GPU data is staged through on its way to
/// and from the host data plane (the two-level allreduce): copies at the
/// bus's speed, and no allocation (nor page faults) per call. It grows to
/// the largest block staged so far.
#[derive(Debug, Default)]
pub(crate) struct HostStage {
    pinned: Option<PinnedHostSlice<u8>>,
}

impl HostStage {
    /// Copies elements `range` of `buf` into the stage, on `buf`'s stream
    /// after every earlier use of it, and hands them to the host once the
    /// copy has run (this waits for it).
    pub(crate) fn fill<T: Element>(
        &mut self,
        buf: &DeviceBuffer<T>,
        range: std::ops::Range<usize>,
    ) -> Result<&mut [T], GpuError> {
        let size = std::mem::size_of::<T>();
        let n = range.len() * size;
        if n == 0 {
            return Ok(&mut []);
        }
        let stream = buf.bytes.stream().clone();
        let pinned = self.room(stream.context(), n)?;
        let view = buf.bytes.slice(range.start * size..range.end * size);
        crate::sys::dtoh_prefix(&stream, &view, pinned).map_err(cuda("cuMemcpyDtoHAsync"))?;
        let bytes = pinned.as_mut_slice().map_err(cuda("cuEventSynchronize"))?;
        bytemuck::try_cast_slice_mut(&mut bytes[..n]).map_err(|e| GpuError::Usage {
            what: "staging GPU data in host memory",
            detail: e.to_string(),
        })
    }

    /// Copies the first `n` staged elements into `buf` from element `at`, on
    /// `stream`, without waiting: the stage is not written again before the
    /// copy has read it.
    pub(crate) fn drain<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        at: usize,
        n: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<(), GpuError> {
        let size = std::mem::size_of::<T>();
        if n == 0 {
            return Ok(());
        }
        let Some(pinned) = &self.pinned else {
            return Err(GpuError::Usage {
                what: "copying staged data back to the GPU",
                detail: "nothing was staged".into(),
            });
        };
        let mut dst = buf.bytes.slice_mut(at * size..(at + n) * size);
        crate::sys::htod_prefix(stream, pinned, &mut dst).map_err(cuda("cuMemcpyHtoDAsync"))
    }

    /// The stage, at least `n` bytes in `ctx`.
    fn room(
        &mut self,
        ctx: &Arc<CudaContext>,
        n: usize,
    ) -> Result<&mut PinnedHostSlice<u8>, GpuError> {
        let pinned = match self.pinned.take() {
            Some(p) if p.len() >= n && p.context() == ctx => p,
            old => {
                // The old one is freed first (after its last copy has run).
                drop(old);
                crate::sys::pinned_zeroed(ctx, n).map_err(cuda("cuMemHostAlloc"))?
            }
        };
        Ok(self.pinned.insert(pinned))
    }
}
