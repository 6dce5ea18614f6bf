//! The background engine: collectives submitted asynchronously, negotiated
//! across ranks every cycle, fused, and run in one agreed order.
//!
//! ```text
//!  API (any thread)          engine task (worker runtime), every cycle
//!  allreduce_async ──Submit──> queue ─> RankMsg (bits for cached, names for new)
//!       Handle <─────reply──┐          ─> allgather of every rank's RankMsg
//!                           │          ─> Negotiator::round (pure, same on all ranks)
//!                           └───────── ─> exec: fusion buffer, one collective, unpack
//! ```

mod autotune;
mod cache;
mod config;
mod driver;
mod error;
mod exec;
mod fusion;
mod fusion_buffer;
mod gpu_exec;
#[cfg(feature = "cuda")]
mod gpu_handle;
mod lent;
mod messages;
mod negotiate;
mod pending;
#[cfg(test)]
mod props;
mod tensor;
mod timeline;

use std::marker::PhantomData;

use collectives::{Communicator, Element, GroupCollectives, Host, ReduceOp, Transport};
use tokio::sync::{mpsc, oneshot};

pub use autotune::{AutotuneSetup, TuningMemory};
pub use config::{EngineConfig, Traffic};
use driver::Command;
pub use driver::EngineStats;
pub use error::{EngineError, Internal, Invalid, Mismatch};
#[cfg(feature = "cuda")]
pub use gpu_handle::{DeviceHandle, GpuHandle};
pub use lent::LentHandle;
pub use messages::{Kind, Location, Tuning};
pub use pending::PendingBoard;
pub use tensor::{Output, Storage, Tensor};
pub use timeline::TimelineConfig;

use messages::Request;
use tensor::Submission;

/// What a host submission is: its element type, shape, and (grouped) its
/// members' lengths.
#[derive(Debug)]
struct Place {
    dtype: collectives::DType,
    shape: Vec<usize>,
    parts: Vec<usize>,
}

/// A submission's answer, as it arrives: what [`Handle`] and the GPU handle
/// poll and wait on.
#[derive(Debug)]
pub(crate) struct Reply {
    rx: Option<oneshot::Receiver<Result<Output, EngineError>>>,
    got: Option<Result<Output, EngineError>>,
}

impl Reply {
    fn waiting(rx: oneshot::Receiver<Result<Output, EngineError>>) -> Self {
        Reply {
            rx: Some(rx),
            got: None,
        }
    }

    /// An answer already known (a submission refused up front).
    fn known(r: Result<Output, EngineError>) -> Self {
        Reply {
            rx: None,
            got: Some(r),
        }
    }

    /// Whether the answer is there (then [`Reply::wait`] does not block).
    pub(crate) fn poll(&mut self) -> bool {
        if self.got.is_none()
            && let Some(rx) = self.rx.as_mut()
        {
            match rx.try_recv() {
                Ok(r) => self.got = Some(r),
                Err(oneshot::error::TryRecvError::Empty) => return false,
                Err(oneshot::error::TryRecvError::Closed) => {
                    self.got = Some(Err(EngineError::ShutDown))
                }
            }
        }
        true
    }

    /// The answer, awaited.
    pub(crate) async fn finish(self) -> Result<Output, EngineError> {
        match (self.got, self.rx) {
            (Some(r), _) => r,
            (None, Some(rx)) => rx.await.unwrap_or(Err(EngineError::ShutDown)),
            (None, None) => Err(EngineError::ShutDown),
        }
    }

    /// Blocks for the answer; not from inside an async runtime.
    pub(crate) fn wait(self) -> Result<Output, EngineError> {
        match (self.got, self.rx) {
            (Some(r), _) => r,
            (None, Some(rx)) => rx.blocking_recv().unwrap_or(Err(EngineError::ShutDown)),
            (None, None) => Err(EngineError::ShutDown),
        }
    }
}

/// A submitted collective: [`Handle::poll`] says whether it is done,
/// [`Handle::wait`] blocks for the result.
#[derive(Debug)]
pub struct Handle<T> {
    reply: Reply,
    _t: PhantomData<fn() -> T>,
}

/// A handle whose result is already known (a submission refused up front).
fn failed<T>(e: EngineError) -> Handle<T> {
    Handle {
        reply: Reply::known(Err(e)),
        _t: PhantomData,
    }
}

impl<T: Element> Handle<T> {
    /// Whether the result is ready (then [`Handle::wait`] does not block).
    pub fn poll(&mut self) -> bool {
        self.reply.poll()
    }

    /// Blocks until the collective completes. Must not be called from inside
    /// an async runtime (use [`Handle::finish`] there).
    pub fn wait(self) -> Result<Tensor<T>, EngineError> {
        self.wait_with_splits().map(|(t, _)| t)
    }

    /// [`Handle::wait`], also returning how many elements each rank sent
    /// (alltoall).
    pub fn wait_with_splits(self) -> Result<(Tensor<T>, Vec<usize>), EngineError> {
        host_result(self.reply.wait()?)
    }

    /// The result, awaited: [`Handle::wait`] for async code.
    pub async fn finish(self) -> Result<Tensor<T>, EngineError> {
        host_result(self.reply.finish().await?).map(|(t, _)| t)
    }
}

/// A host tensor of `T` from an engine's answer, and the splits.
fn host_result<T: Element>(out: Output) -> Result<(Tensor<T>, Vec<usize>), EngineError> {
    let data = out
        .data
        .into_host::<T>()
        .map_err(|held| Internal::ElementType {
            name: String::from("(a result)"),
            held: held.dtype(),
            wanted: T::DTYPE,
        })?;
    Ok((
        Tensor {
            data,
            shape: out.shape,
        },
        out.splits,
    ))
}

/// The two communicators an engine runs on: `data` carries the tensors (any
/// [`Collectives`](collectives::Collectives) backend; today a host [`Communicator`]);
/// `negotiation` carries the ranks' messages of every cycle, always in host
/// memory, so that the data plane can be one that moves device buffers.
/// They may share one transport if their op ids differ
/// ([`collectives::OpSpace`]); both must have the same ranks.
#[derive(Debug)]
pub struct Planes<D, H> {
    pub data: D,
    pub negotiation: Communicator<H>,
}

/// The API side of a running engine.
#[derive(Debug)]
pub struct Engine {
    tx: mpsc::UnboundedSender<Command>,
    task: tokio::task::JoinHandle<EngineStats>,
    pending: PendingBoard,
}

impl Engine {
    /// Starts the engine on `rt`; `on_finish` gets the communicators back
    /// when it stops (to shut the transports down cleanly).
    pub fn start<D, H, F, Fut>(
        rt: &tokio::runtime::Handle,
        planes: Planes<D, H>,
        cfg: EngineConfig,
        on_finish: F,
    ) -> Engine
    where
        D: GroupCollectives<Host> + 'static,
        H: Transport + 'static,
        F: FnOnce(Planes<D, H>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = rt.spawn(async move {
            let (planes, stats) = driver::run(planes, cfg, rx).await;
            on_finish(planes).await;
            stats
        });
        Engine {
            tx,
            task,
            pending: PendingBoard::default(),
        }
    }

    /// Says (on the returned channel) once this engine has taken everything
    /// submitted before the call and sleeps with no timer of its own: only a
    /// submission, a command or another rank's round can wake it then. For
    /// tests of what wakes an engine; the channel closes unanswered if the
    /// engine stops first.
    pub fn parked(&self) -> std::sync::mpsc::Receiver<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = self.tx.send(Command::WhenParked(tx));
        rx
    }

    /// Stops the engine at once, with no goodbye to the other ranks (a
    /// session dropped: the process crashed, as far as they can tell).
    pub(crate) fn abort_handle(&self) -> tokio::task::AbortHandle {
        self.task.abort_handle()
    }

    /// The tensors submitted here and not finished (for heartbeats).
    pub fn pending(&self) -> PendingBoard {
        self.pending.clone()
    }

    /// Submits `data` (already checked) for `kind` under `name`.
    pub fn submit<T: Element>(
        &self,
        name: String,
        kind: Kind,
        data: Tensor<T>,
        splits: Vec<usize>,
        parts: Vec<usize>,
    ) -> Handle<T> {
        let at = Place {
            dtype: T::DTYPE,
            shape: data.shape,
            parts,
        };
        Handle {
            reply: self.submit_storage(name, kind, at, data.data.into(), splits),
            _t: PhantomData,
        }
    }

    /// Submits `data` for `kind` under `name`; the reply to wait on.
    fn submit_storage(
        &self,
        name: String,
        kind: Kind,
        at: Place,
        data: Storage,
        splits: Vec<usize>,
    ) -> Reply {
        let (reply, rx) = oneshot::channel();
        let entry = self.pending.enter(&name, std::time::Instant::now());
        let req = Request {
            name,
            kind,
            dtype: at.dtype,
            shape: at.shape,
            parts: at.parts,
            place: Location::Host,
        };
        let local = Submission {
            req,
            data,
            splits,
            reply,
            submitted: std::time::Instant::now(),
            _pending: entry,
        };
        match self.tx.send(Command::Submit(local)) {
            Ok(()) => Reply::waiting(rx),
            Err(_) => Reply::known(Err(EngineError::ShutDown)),
        }
    }

    /// Tells the other ranks this one has no more data and waits until every
    /// rank has said so; meanwhile this rank takes part in their allreduces
    /// (as zeros; averages divide by the ranks that contributed) and
    /// allgathers (with no rows). Returns the rank that joined last. Blocks:
    /// call it outside an async runtime.
    pub fn join(&self) -> Result<usize, EngineError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Command::Join(reply))
            .map_err(|_| EngineError::ShutDown)?;
        rx.blocking_recv().unwrap_or(Err(EngineError::ShutDown))
    }

    /// Switches every rank's engine to `t` at the end of the same round (the
    /// autotuner's hook). Only rank 0's call has an effect: the values travel
    /// in its negotiation message, so that ranks never disagree on a fusion
    /// plan or on the cache.
    pub fn retune(&self, t: Tuning) {
        let _ = self.tx.send(Command::Retune(t));
    }

    /// Asks every rank's engine to stop and waits for this one; returns its
    /// counters.
    pub async fn shutdown(self) -> Result<EngineStats, EngineError> {
        let _ = self.tx.send(Command::Shutdown);
        self.task
            .await
            .map_err(|e| Internal::Task { why: e.to_string() }.into())
    }
}

/// A submission refused by the API's checks.
pub fn refuse<T>(why: Invalid) -> Handle<T> {
    failed(why.into())
}

/// `op` as Horovod names it in generated tensor names.
pub fn op_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Average => "average",
        ReduceOp::Min => "min",
        ReduceOp::Max => "max",
        ReduceOp::Product => "product",
    }
}
