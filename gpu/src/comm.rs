//! [`NcclComm`]: one generation's NCCL communicator, elastic-safe in the way
//! NCCL's user guide prescribes:
//!
//! - it is non-blocking, so no call can hang inside NCCL;
//! - completion is polled (the stream's event and `ncclCommGetAsyncError`)
//!   with a deadline, never waited on with a stream synchronise;
//! - on an error or at the deadline it is aborted, which stops its kernels
//!   whatever its peers do, and every later call fails at once;
//! - every NCCL call on it is made under one mutex, so no call runs while it
//!   is aborted.
//!
//! A dropped communicator is aborted, not finalised (Horovod does the same in
//! elastic mode): a peer may already be gone.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use collectives::{Collectives, Host};
use cudarc::driver::{CudaEvent, CudaStream};
use cudarc::nccl::sys::ncclDataType_t;

use crate::buffer::cuda;
use crate::error::GpuError;
use crate::sys::{self, Call, Progress, RawComm};

/// One rank's NCCL communicator over the ranks of one generation.
#[derive(Debug)]
pub struct NcclComm {
    raw: Mutex<Option<RawComm>>,
    pub(crate) stream: Arc<CudaStream>,
    rank: usize,
    size: usize,
    timeout: Duration,
    pub(crate) options: collectives::CollectiveOptions,
}

/// Polls before a wait starts sleeping between looks.
const EAGER_POLLS: u32 = 256;

/// How long a wait sleeps in short steps before the runtime's timer.
const PATIENT: Duration = Duration::from_millis(250);

impl NcclComm {
    /// The communicator of the world that `host` spans, on `stream`'s GPU:
    /// rank 0 makes NCCL's unique id and `host` broadcasts it. Every rank
    /// calls this at the same point; each wait is bounded by `timeout`.
    pub async fn connect<C: Collectives<Host>>(
        host: &C,
        stream: Arc<CudaStream>,
        timeout: Duration,
    ) -> Result<Self, GpuError> {
        crate::probe()?;
        let mut id = match host.rank() {
            0 => sys::unique_id().map_err(|code| GpuError::Nccl {
                call: "ncclGetUniqueId",
                code,
            })?,
            _ => [0u8; 128],
        };
        host.broadcast(&mut id[..], 0)
            .await
            .map_err(|e| GpuError::Usage {
                what: "sharing NCCL's unique id over the host collectives",
                detail: e.to_string(),
            })?;
        Self::init(stream, host.rank(), host.size(), &id, timeout).await
    }

    /// A communicator of one rank (this process alone).
    pub async fn solo(stream: Arc<CudaStream>, timeout: Duration) -> Result<Self, GpuError> {
        crate::probe()?;
        let id = sys::unique_id().map_err(|code| GpuError::Nccl {
            call: "ncclGetUniqueId",
            code,
        })?;
        Self::init(stream, 0, 1, &id, timeout).await
    }

    pub(crate) async fn init(
        stream: Arc<CudaStream>,
        rank: usize,
        size: usize,
        id: &[u8; 128],
        timeout: Duration,
    ) -> Result<Self, GpuError> {
        stream
            .context()
            .bind_to_thread()
            .map_err(cuda("cuCtxSetCurrent"))?;
        let (raw, _) = sys::init_rank(size, id, rank).map_err(|code| GpuError::Nccl {
            call: "ncclCommInitRankConfig",
            code,
        })?;
        let comm = Self {
            raw: Mutex::new(Some(raw)),
            stream,
            rank,
            size,
            timeout,
            options: collectives::CollectiveOptions::default(),
        };
        comm.settle("init").await?;
        Ok(comm)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// The stream every collective of this communicator runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn lock(&self) -> MutexGuard<'_, Option<RawComm>> {
        self.raw.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Aborts the communicator (held in `guard`) and returns `err`.
    fn abort_with(&self, guard: &mut MutexGuard<'_, Option<RawComm>>, err: GpuError) -> GpuError {
        if let Some(raw) = guard.take() {
            tracing::warn!(rank = self.rank, %err, "aborting the NCCL communicator");
            self.abort_raw(raw);
        }
        err
    }

    /// `ncclCommAbort`, timed: the survivors of a lost peer wait for it.
    fn abort_raw(&self, raw: RawComm) {
        let start = Instant::now();
        let r = sys::abort(raw);
        let took_ms = start.elapsed().as_millis();
        match r {
            Ok(_) => tracing::info!(rank = self.rank, took_ms, "NCCL communicator aborted"),
            Err(code) => {
                tracing::warn!(rank = self.rank, took_ms, %code, "ncclCommAbort reported an error");
            }
        }
    }

    /// Aborts the communicator now: every call in flight or later fails.
    pub fn abort(&self, why: &str) {
        let mut g = self.lock();
        if let Some(raw) = g.take() {
            tracing::info!(rank = self.rank, why, "aborting the NCCL communicator");
            self.abort_raw(raw);
        }
    }

    /// One look at the communicator's state; `Ok(true)` once nothing of it
    /// is still running.
    fn look(&self, op: &'static str, since: Instant) -> Result<bool, GpuError> {
        let mut g = self.lock();
        let Some(raw) = g.as_ref() else {
            return Err(GpuError::Aborted { op });
        };
        match sys::async_error(raw) {
            Ok(Progress::Done) => Ok(true),
            Ok(Progress::Running) if since.elapsed() < self.timeout => Ok(false),
            Ok(Progress::Running) => {
                let e = GpuError::Timeout {
                    op,
                    after: self.timeout,
                };
                Err(self.abort_with(&mut g, e))
            }
            Err(code) => {
                let e = GpuError::Nccl {
                    call: "ncclCommGetAsyncError",
                    code,
                };
                Err(self.abort_with(&mut g, e))
            }
        }
    }

    /// Waits until the communicator has nothing in progress (a non-blocking
    /// init or call), within the timeout.
    async fn settle(&self, op: &'static str) -> Result<(), GpuError> {
        let since = Instant::now();
        let mut polls = 0;
        while !self.look(op, since)? {
            pause(&mut polls, since).await;
        }
        Ok(())
    }

    /// Issues `calls` (one NCCL group) on the stream and returns an event
    /// recorded after them. Synchronous, so that the callers' pointer guards
    /// never live across an await.
    pub(crate) fn issue(
        &self,
        op: &'static str,
        calls: &[Call],
        dtype: ncclDataType_t,
    ) -> Result<CudaEvent, GpuError> {
        let mut g = self.lock();
        let Some(raw) = g.as_ref() else {
            return Err(GpuError::Aborted { op });
        };
        if let Err(e) = self.stream.context().bind_to_thread() {
            return Err(cuda("cuCtxSetCurrent")(e));
        }
        match sys::enqueue(raw, calls, dtype, self.stream.cu_stream()) {
            Ok(Progress::Done) => {}
            // Non-blocking: the kernels may not be on the stream yet, and
            // the event below must come after them.
            Ok(Progress::Running) => self.launched(op, &mut g)?,
            Err(code) => {
                let e = GpuError::Nccl { call: op, code };
                return Err(if code.is_fatal() {
                    self.abort_with(&mut g, e)
                } else {
                    e
                });
            }
        }
        drop(g);
        self.stream
            .record_event(None)
            .map_err(cuda("cuEventRecord"))
    }

    /// Waits, holding the communicator, until NCCL has put a non-blocking
    /// call's kernels on the stream (it says so through the asynchronous
    /// state), within the timeout. A host-side launch: short.
    fn launched(
        &self,
        op: &'static str,
        g: &mut MutexGuard<'_, Option<RawComm>>,
    ) -> Result<(), GpuError> {
        let since = Instant::now();
        loop {
            let Some(raw) = g.as_ref() else {
                return Err(GpuError::Aborted { op });
            };
            match sys::async_error(raw) {
                Ok(Progress::Done) => return Ok(()),
                Ok(Progress::Running) if since.elapsed() < self.timeout => {
                    std::thread::yield_now();
                }
                Ok(Progress::Running) => {
                    let e = GpuError::Timeout {
                        op,
                        after: self.timeout,
                    };
                    return Err(self.abort_with(g, e));
                }
                Err(code) => {
                    let e = GpuError::Nccl {
                        call: "ncclCommGetAsyncError",
                        code,
                    };
                    return Err(self.abort_with(g, e));
                }
            }
        }
    }

    /// Waits for `event` (recorded after an op's calls), looking at the
    /// communicator's errors meanwhile, within the timeout.
    pub(crate) async fn complete(
        &self,
        op: &'static str,
        event: CudaEvent,
    ) -> Result<(), GpuError> {
        let since = Instant::now();
        let mut polls = 0;
        loop {
            let ready = event.try_is_complete().map_err(cuda("cuEventQuery"))?;
            // Looked at even when ready: a failed peer shows here.
            let settled = self.look(op, since)?;
            if ready && settled {
                return Ok(());
            }
            if ready || since.elapsed() < self.timeout {
                pause(&mut polls, since).await;
                continue;
            }
            let mut g = self.lock();
            let e = GpuError::Timeout {
                op,
                after: self.timeout,
            };
            return Err(self.abort_with(&mut g, e));
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        self.abort("dropped");
    }
}

/// Between two looks: yields to the runtime at first; then sleeps 20 µs at a
/// time, the thread's own sleep (a timer of the runtime wakes only on its
/// millisecond ticks, which added up to a millisecond to every collective
/// that outlasted the yields), yielding after each so other tasks run; past
/// `PATIENT`, on the runtime's timer, so a long wait does not hold a core.
async fn pause(polls: &mut u32, since: Instant) {
    *polls += 1;
    if *polls < EAGER_POLLS {
        tokio::task::yield_now().await;
    } else if since.elapsed() < PATIENT {
        std::thread::sleep(Duration::from_micros(20));
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
}
