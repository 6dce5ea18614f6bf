//! The runtime a training program links.
//!
//! [`init`] joins the job `elasticrun` started (or, run on its own, makes a world
//! of one); the returned [`Worker`] (a runtime and the async [`Session`] it
//! blocks on) tells the program its place
//! ([`Session::rank`], [`Session::size`], local and cross ranks) and runs its
//! collectives, blocking or asynchronous ([`Handle`]), through the [`Engine`]:
//! every cycle the ranks negotiate which submitted tensors are ready on all of
//! them, fuse them and run them in one agreed order. [`elastic`] keeps a
//! training loop going while workers come and go; each generation runs on a
//! [`DataPlane`] chosen at run time.

mod affinity;
mod api;
pub mod control_link;
mod data_plane;
pub mod elastic;
pub mod engine;
mod env;
mod error;
mod generation;
#[cfg(feature = "cuda")]
mod gpu_api;
mod hierarchy;
mod join;
mod lookup;
mod optimizer;
#[cfg(feature = "etcd")]
mod pod;
#[cfg(not(feature = "etcd"))]
#[path = "pod_off.rs"]
mod pod;
mod reconnect;
mod rejoin;
mod session;
mod settings;
#[allow(unsafe_code)]
mod sys;
mod worker;

pub use affinity::AffinityError;
pub use api::{GroupHandle, MAX_OBJECT_BYTES};
pub use collectives::{DType, Element, ReduceOp, bf16, f16};
pub use data_plane::DataPlane;
#[cfg(feature = "cuda")]
pub use engine::{DeviceHandle, GpuHandle};
pub use engine::{
    Engine, EngineConfig, EngineError, EngineStats, Handle, Internal, Invalid, LentHandle,
    Mismatch, Planes, Storage, Tensor, TimelineConfig, Tuning, TuningMemory,
};
pub use error::{Error, InitError, ObjectError};
pub use generation::{Endpoints, Place};
#[cfg(feature = "cuda")]
pub use gpu::{DeviceBuffer, DeviceTensor, GpuError};
#[cfg(feature = "cuda")]
pub use gpu_api::DeviceOp;
pub use hierarchy::{CollectivePath, CollectivePaths};
pub use join::Joining;
pub use optimizer::{Compression, DistributedOptimizer, Gradients, OptimizerOptions};
pub use rejoin::RejoinError;
pub use session::Session;
pub use sys::{LendError, LentHost};
pub use worker::{Worker, init};
