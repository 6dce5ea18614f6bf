//! The threads that forward workers' output: kept for the coordinator's
//! life and reused, one job (a pipe read to its end) at a time. A thread
//! per pipe that ended with it made glibc's heap grow with every worker
//! started (each new thread took a malloc arena, its read buffer and its
//! stack, and a replacement's threads starting before the killed worker's
//! had ended raised the count of arenas for good): now the threads, their
//! arenas and their buffers are those of the most pipes ever open at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};

/// One pipe's forwarding, run to its end on a thread of a [`Pool`].
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The stack of a forwarding thread: it holds a read buffer on the heap and
/// little else.
const STACK: usize = 256 << 10;

/// Threads that run jobs and wait for the next.
#[derive(Debug, Default)]
pub(super) struct Pool {
    /// The threads waiting for a job, each by its own channel.
    idle: Mutex<Vec<Sender<Job>>>,
    made: AtomicUsize,
}

/// The coordinator's forwarding threads.
pub(super) fn forwarders() -> &'static Arc<Pool> {
    static POOL: std::sync::OnceLock<Arc<Pool>> = std::sync::OnceLock::new();
    POOL.get_or_init(Arc::default)
}

impl Pool {
    /// Runs `job` on an idle thread, or on a new one if none is idle.
    pub(super) fn run(self: &Arc<Self>, job: Job) -> std::io::Result<()> {
        let mut job = job;
        loop {
            let idle = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let Some(tx) = idle else { break };
            match tx.send(job) {
                Ok(()) => return Ok(()),
                // That thread is gone (its job panicked): try another.
                Err(back) => job = back.0,
            }
        }
        let (tx, rx) = channel::<Job>();
        tx.send(job)
            .map_err(|_| std::io::Error::other("a new thread's channel closed"))?;
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let pool = Arc::clone(self);
        std::thread::Builder::new()
            .name(format!("output-{n}"))
            .stack_size(STACK)
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                    pool.idle
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(tx.clone());
                }
            })?;
        Ok(())
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.lock().map_or(0, |i| i.len())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn wait_until(what: &str, ok: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok() {
            assert!(Instant::now() < deadline, "{what} within 10 s");
            std::thread::yield_now();
        }
    }

    #[test]
    fn threads_are_made_for_jobs_at_once_and_reused_after() {
        let pool = Arc::new(Pool::default());
        let (done, finished) = channel();
        // Three at once: three threads.
        let (go, gate) = channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        for _ in 0..3 {
            let (gate, done) = (Arc::clone(&gate), done.clone());
            pool.run(Box::new(move || {
                let _ = gate.lock().map(|g| g.recv_timeout(Duration::from_secs(10)));
                let _ = done.send(());
            }))
            .unwrap();
        }
        for _ in 0..3 {
            go.send(()).unwrap();
            finished.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        wait_until("three idle threads", || pool.idle() == 3);
        // Twenty more, one after another: no new thread.
        for _ in 0..20 {
            let done = done.clone();
            pool.run(Box::new(move || {
                let _ = done.send(());
            }))
            .unwrap();
            finished.recv_timeout(Duration::from_secs(10)).unwrap();
            wait_until("the thread back", || pool.idle() == 3);
        }
        assert_eq!(pool.made.load(Ordering::Relaxed), 3);
    }
}
