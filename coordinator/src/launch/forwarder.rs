//! The threads that forward every worker's output: one a core (up to
//! four), started together and kept for the coordinator's life whatever the
//! number of pipes, a worker's pipes given to one by its rank. Each waits on
//! its pipes with poll(2) until one has something to read (or has ended).
//! A thread per pipe made the coordinator's memory grow with every worker
//! started (each new thread took a malloc arena, its buffers and its
//! stack); a pool of threads, one per pipe open at once, still grew each
//! time a replacement's pipes opened before a killed worker's were read to
//! their end, and held a thread for every pipe of a job's workers (two per
//! worker, thousands at scale).

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use tokio::sync::oneshot;

use super::output::{Buffers, Forwarding, READ_CHUNK};

/// Reads of one pipe in a turn of the loop at most, so that a worker
/// printing without pause does not hold the others' output up.
const READS_A_TURN: usize = 4;

/// The stack of a forwarding thread: its buffers are on the heap.
const STACK: usize = 256 << 10;

/// Where one pipe's lines go, and who hears how it ended.
pub(super) type Terminal = Box<dyn Write + Send>;

/// One pipe being forwarded.
struct Pipe {
    from: File,
    forwarding: Forwarding,
    terminal: Terminal,
    done: oneshot::Sender<std::io::Result<()>>,
}

/// A forwarding thread's door: pipes are handed to it here.
pub(super) struct Forwarder {
    added: Arc<Mutex<Vec<Pipe>>>,
    /// Written to (a byte) to wake the thread for a pipe added.
    wake: std::io::PipeWriter,
}

/// The most forwarding threads: one a core up to this many, all started
/// together when first needed, so their number never grows with the job.
const MOST_THREADS: usize = 4;

/// The forwarding thread of the coordinator's for rank `rank`'s pipes
/// (both of a worker's on one thread, the workers spread over them).
pub(super) fn forwarder(rank: usize) -> std::io::Result<&'static Forwarder> {
    static ALL: OnceLock<Result<Vec<Forwarder>, String>> = OnceLock::new();
    let all = ALL
        .get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..cores.min(MOST_THREADS))
                .map(|_| Forwarder::start())
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| std::io::Error::other(format!("no output forwarding thread: {e}")))?;
    Ok(&all[rank % all.len()])
}

impl Forwarder {
    /// Starts a forwarding thread of its own.
    pub(super) fn start() -> std::io::Result<Forwarder> {
        let (woken, wake) = std::io::pipe()?;
        nonblocking(woken.as_fd())?;
        nonblocking(wake.as_fd())?;
        let added = Arc::new(Mutex::new(Vec::new()));
        let theirs = Arc::clone(&added);
        std::thread::Builder::new()
            .name("output".into())
            .stack_size(STACK)
            .spawn(move || run(&theirs, &woken))?;
        Ok(Forwarder { added, wake })
    }

    /// Forwards `from` through `forwarding` to `terminal` until its end;
    /// `done` hears how it ended.
    pub(super) fn add(
        &self,
        from: OwnedFd,
        forwarding: Forwarding,
        terminal: Terminal,
        done: oneshot::Sender<std::io::Result<()>>,
    ) -> std::io::Result<()> {
        nonblocking(from.as_fd())?;
        let pipe = Pipe {
            from: File::from(from),
            forwarding,
            terminal,
            done,
        };
        self.added
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(pipe);
        match (&self.wake).write(&[1]) {
            // Full: the thread has wake-ups to read already.
            Err(e) if e.kind() != ErrorKind::WouldBlock => Err(e),
            _ => Ok(()),
        }
    }
}

fn nonblocking(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// The forwarding thread: takes in the pipes added, waits until one has
/// something, forwards what it has, and ends those that ended.
fn run(added: &Mutex<Vec<Pipe>>, woken: &std::io::PipeReader) {
    // The door closes when its `Forwarder` is dropped (never, for the
    // coordinator's own): the thread then ends with its last pipe.
    let mut door = Some(woken);
    let mut pipes: Vec<Pipe> = Vec::new();
    let mut ready: Vec<bool> = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut bufs = Buffers::default();
    loop {
        for mut pipe in added
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            pipe.forwarding.start();
            pipes.push(pipe);
        }
        if door.is_none() && pipes.is_empty() {
            return;
        }
        match wait(door, &pipes, &mut ready) {
            Ok(true) => {}
            Ok(false) => door = None,
            Err(e) => {
                // poll(2) fails only for want of memory or past the limit
                // of open files; a pause keeps an error that stays from
                // spinning the thread.
                tracing::error!("waiting on the workers' output: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        }
        // From the last, so that removing one moves none still to serve.
        for i in (0..pipes.len()).rev() {
            if !ready[i] {
                continue;
            }
            let pipe = &mut pipes[i];
            let ended = match catch_unwind(AssertUnwindSafe(|| serve(pipe, &mut chunk, &mut bufs)))
            {
                Ok(None) => continue,
                Ok(Some(ended)) => ended,
                // A bug met forwarding one pipe ends that pipe, not the
                // thread and every other pipe on it.
                Err(_) => Err(std::io::Error::other("forwarding this output panicked")),
            };
            let Pipe {
                forwarding, done, ..
            } = pipes.swap_remove(i);
            let _ = catch_unwind(AssertUnwindSafe(|| forwarding.end()));
            bufs.reset();
            let _ = done.send(ended);
        }
    }
}

/// Waits until the door (the wake-up pipe) or one of `pipes` has
/// something (data, its end or an error), reading the wake-ups; `ready`
/// says which pipes. Whether the door is still open.
fn wait(
    door: Option<&std::io::PipeReader>,
    pipes: &[Pipe],
    ready: &mut Vec<bool>,
) -> std::io::Result<bool> {
    let mut fds = Vec::with_capacity(pipes.len() + 1);
    fds.extend(door.map(|d| PollFd::new(d.as_fd(), PollFlags::POLLIN)));
    let first = fds.len();
    fds.extend(
        pipes
            .iter()
            .map(|p| PollFd::new(p.from.as_fd(), PollFlags::POLLIN)),
    );
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => break,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    ready.clear();
    ready.extend(fds[first..].iter().map(|f| f.any().unwrap_or(true)));
    let Some(door) = door.filter(|_| fds[0].any().unwrap_or(false)) else {
        return Ok(door.is_some());
    };
    let mut sink = [0u8; 64];
    loop {
        match (&*door).read(&mut sink) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Ok(true),
        }
    }
}

/// Reads what `pipe` has, up to [`READS_A_TURN`] reads, and forwards it;
/// how it ended, if it did.
fn serve(pipe: &mut Pipe, chunk: &mut [u8], bufs: &mut Buffers) -> Option<std::io::Result<()>> {
    let Pipe {
        from,
        forwarding,
        terminal,
        ..
    } = pipe;
    forwarding.pump(from, chunk, bufs, &mut **terminal, READS_A_TURN)
}

#[cfg(test)]
#[path = "forwarder_tests.rs"]
mod tests;
