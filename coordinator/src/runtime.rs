//! The coordinator's Tokio runtime: one thread.
//!
//! The coordinator is a control plane: it waits on sockets, timers,
//! child processes and etcd, and what it computes between two waits is
//! small (a batch's sweep, a frame's encoding). On two threads, or on a
//! worker thread beside the driver on the main one, each message between
//! the driver and a link task crossed threads: a futex wake-up, a task
//! stolen or sent across, counters bouncing between caches. At 10,000
//! workers a reset is about 40,000 such messages, and heartbeats 10,000 a
//! second. On one thread the driver and the link tasks take turns instead.
//! Measured with `swarm --workers 10000` (docs/BENCHMARKS.md, "The
//! coordinator on one thread"): a reset costs about a quarter less CPU,
//! heartbeats a fifth less, and recovery is a quarter shorter.
//!
//! Blocking work stays off it: child processes' output is forwarded by
//! threads of their own (`launch::forwarder`), control connections are
//! accepted by one (`server`), and nothing here blocks in a system call
//! outside Tokio's.

/// The runtime `elasticrun` (and the load generator's coordinator
/// process) runs the coordinator on: Tokio's current-thread scheduler
/// with its I/O and time drivers.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}
