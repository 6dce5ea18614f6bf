//! elasticrun's GPU path (docs/gpu.md): tensors in GPU memory
//! ([`DeviceBuffer`]) and NCCL collectives on them ([`NcclComm`], a
//! [`collectives::Collectives`] backend for [`Device`] memory), through
//! cudarc. All of it is behind the cargo feature `cuda`; without it this
//! crate only says so ([`probe`] returns [`GpuError::NotBuilt`]), and with
//! it on a machine without a GPU, [`probe`] names what is missing instead
//! of letting cudarc panic.

mod error;

pub use error::{GpuError, NcclCode};

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
mod buffer;
#[cfg(feature = "cuda")]
mod comm;
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
mod sys;
#[cfg(feature = "cuda")]
mod two_level;

#[cfg(feature = "cuda")]
pub use buffer::{Device, DeviceBuffer, DeviceTensor};
#[cfg(feature = "cuda")]
pub use comm::NcclComm;
#[cfg(feature = "cuda")]
pub use cudarc;
#[cfg(feature = "cuda")]
pub use two_level::TwoLevel;

/// What this machine offers the GPU path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// GPUs the CUDA driver sees.
    pub devices: usize,
    /// The NCCL found, as `NCCL_VERSION_CODE` (2.21.5 is 22105).
    pub nccl_version: i32,
}

/// Whether this build was made with the `cuda` feature.
pub const BUILT: bool = cfg!(feature = "cuda");

/// Checks, without panicking, that the CUDA driver, at least one GPU and a
/// recent enough NCCL are there.
pub fn probe() -> Result<GpuInfo, GpuError> {
    #[cfg(feature = "cuda")]
    {
        probe_cuda()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(GpuError::NotBuilt)
    }
}

/// The probe's answer as one line: what there is, or why there is none.
pub fn describe() -> String {
    match probe() {
        Ok(i) => format!(
            "{} GPU(s), NCCL {}.{}.{}",
            i.devices,
            i.nccl_version / 10000,
            i.nccl_version / 100 % 100,
            i.nccl_version % 100
        ),
        Err(e) => e.to_string(),
    }
}

#[cfg(feature = "cuda")]
fn probe_cuda() -> Result<GpuInfo, GpuError> {
    if !sys::driver_present() {
        return Err(GpuError::NoDriver);
    }
    let count = cudarc::driver::CudaContext::device_count().map_err(buffer::cuda("cuInit"))?;
    let devices = usize::try_from(count).unwrap_or(0);
    if devices == 0 {
        return Err(GpuError::NoDevice {
            ordinal: 0,
            count: 0,
        });
    }
    sys::nccl_library().map_err(|tried| GpuError::NoNccl { tried })?;
    let nccl_version = sys::version().map_err(|code| GpuError::Nccl {
        call: "ncclGetVersion",
        code,
    })?;
    if nccl_version < sys::CONFIG_VERSION {
        return Err(GpuError::NcclTooOld {
            found: nccl_version,
            needed: sys::CONFIG_VERSION,
        });
    }
    Ok(GpuInfo {
        devices,
        nccl_version,
    })
}

/// A stream on GPU `ordinal`, once [`probe`] has found it.
#[cfg(feature = "cuda")]
pub fn stream_on(ordinal: usize) -> Result<std::sync::Arc<cudarc::driver::CudaStream>, GpuError> {
    let info = probe()?;
    if ordinal >= info.devices {
        return Err(GpuError::NoDevice {
            ordinal,
            count: info.devices,
        });
    }
    context(ordinal)?
        .new_stream()
        .map_err(buffer::cuda("cuStreamCreate"))
}

/// The primary context of GPU `ordinal` (the one PyTorch's runtime uses),
/// one `CudaContext` per device for the process: cudarc synchronises the
/// device the first time a context makes a second stream, which then
/// happens once.
#[cfg(feature = "cuda")]
pub fn context(ordinal: usize) -> Result<std::sync::Arc<cudarc::driver::CudaContext>, GpuError> {
    use std::sync::{Arc, Mutex, PoisonError};
    static CONTEXTS: Mutex<Vec<(usize, Arc<cudarc::driver::CudaContext>)>> = Mutex::new(Vec::new());
    let mut all = CONTEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, c)) = all.iter().find(|(o, _)| *o == ordinal) {
        return Ok(c.clone());
    }
    if !sys::driver_present() {
        return Err(GpuError::NoDriver);
    }
    let ctx = cudarc::driver::CudaContext::new(ordinal)
        .map_err(buffer::cuda("cuDevicePrimaryCtxRetain"))?;
    all.push((ordinal, ctx.clone()));
    Ok(ctx)
}

/// The NCCL library this process uses (its path, or the name the loader
/// found it by), opened on first use; `None` where there is none.
#[cfg(feature = "cuda")]
pub fn nccl_library() -> Option<&'static str> {
    sys::nccl_library().ok()
}

#[cfg(feature = "cuda")]
pub use sys::{NCCL_LIBRARY_VAR, Owner, lend};

/// A new stream on the GPU that `like` runs on: where a communicator for
/// buffers allocated on `like` works.
#[cfg(feature = "cuda")]
pub fn stream_beside(
    like: &std::sync::Arc<cudarc::driver::CudaStream>,
) -> Result<std::sync::Arc<cudarc::driver::CudaStream>, GpuError> {
    like.context()
        .new_stream()
        .map_err(buffer::cuda("cuStreamCreate"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_answers_without_panicking() {
        // On a machine without a GPU (or a build without the feature) the
        // answer is a typed error; with one, the devices it found.
        match probe() {
            Ok(info) => assert!(info.devices > 0 && info.nccl_version >= 21700),
            Err(e) => {
                println!("no GPU path here: {e}");
                assert!(matches!(
                    e,
                    GpuError::NotBuilt
                        | GpuError::NoDriver
                        | GpuError::NoDevice { .. }
                        | GpuError::NoNccl { .. }
                        | GpuError::NcclTooOld { .. }
                ));
                assert_eq!(BUILT, !matches!(e, GpuError::NotBuilt));
            }
        }
        assert!(!describe().is_empty());
    }
}
