use std::time::Duration;

use super::*;
use crate::launch::output::{Stream, Tap};

/// A terminal the test reads back.
#[derive(Clone, Default)]
struct Shown(Arc<Mutex<Vec<u8>>>);

impl Write for Shown {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shown {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

type Added = (
    std::io::PipeWriter,
    Shown,
    oneshot::Receiver<std::io::Result<()>>,
);

/// A pipe added to `forwarder` as rank `rank`'s stdout: its writing end,
/// what its terminal shows, and how its forwarding ends.
fn add(forwarder: &Forwarder, rank: usize) -> Added {
    add_tapped(forwarder, rank, None)
}

/// [`add`], the pipe's lines shown to `tap`.
fn add_tapped(forwarder: &Forwarder, rank: usize, tap: Option<Arc<dyn Tap>>) -> Added {
    let (from, to) = std::io::pipe().unwrap();
    let shown = Shown::default();
    let (done, ended) = oneshot::channel();
    let forwarding = Forwarding::new(rank, Stream::Stdout, false, None, tap);
    forwarder
        .add(from.into(), forwarding, Box::new(shown.clone()), done)
        .unwrap();
    (to, shown, ended)
}

/// How `ended` ended, within 10 s.
fn end_within(ended: oneshot::Receiver<std::io::Result<()>>, what: &str) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), ended).await })
        .unwrap_or_else(|_| panic!("{what}: not read to its end within 10 s"))
        .expect("the forwarding thread is gone")
}

/// That `ended` ended well, within 10 s.
fn ended_within(ended: oneshot::Receiver<std::io::Result<()>>, what: &str) {
    end_within(ended, what).unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[test]
fn one_thread_forwards_many_pipes_open_at_once_each_to_its_end() {
    let forwarder = Forwarder::start().unwrap();
    let pipes: Vec<_> = (0..40).map(|rank| add(&forwarder, rank)).collect();
    // Each pipe written in two reads' worth, the last line unended, the
    // pipes interleaved.
    for (rank, (to, _, _)) in pipes.iter().enumerate() {
        writeln!(&*to, "first of {rank}").unwrap();
    }
    for (rank, (to, _, _)) in pipes.iter().enumerate() {
        write!(&*to, "second of {rank}\nno newline").unwrap();
    }
    for (rank, (to, shown, ended)) in pipes.into_iter().enumerate() {
        drop(to);
        ended_within(ended, &format!("rank {rank}'s pipe"));
        assert_eq!(
            shown.text(),
            format!(
                "[{rank}]<stdout>:first of {rank}\n[{rank}]<stdout>:second of {rank}\n[{rank}]<stdout>:no newline\n"
            )
        );
    }
}

#[test]
fn a_silent_open_pipe_holds_no_other_up() {
    let forwarder = Forwarder::start().unwrap();
    let (_silent, silent_shown, mut silent_ended) = add(&forwarder, 0);
    let (to, shown, ended) = add(&forwarder, 1);
    writeln!(&to, "hello").unwrap();
    drop(to);
    ended_within(ended, "the talking pipe");
    assert_eq!(shown.text(), "[1]<stdout>:hello\n");
    assert!(
        silent_ended.try_recv().is_err(),
        "the silent pipe has not ended"
    );
    assert_eq!(silent_shown.text(), "");
}

#[test]
fn a_worker_printing_without_pause_shares_the_thread() {
    let forwarder = Forwarder::start().unwrap();
    let (busy, busy_shown, busy_ended) = add(&forwarder, 0);
    let (quiet, quiet_shown, quiet_ended) = add(&forwarder, 1);
    // The busy one writes 8 MiB on a thread of its own (a pipe holds 64
    // KiB: it blocks until the forwarder reads), the quiet one a line.
    let line = "x".repeat(1023);
    let writer = std::thread::spawn(move || {
        for _ in 0..8192 {
            writeln!(&busy, "{line}").unwrap();
        }
    });
    writeln!(&quiet, "still here").unwrap();
    drop(quiet);
    ended_within(quiet_ended, "the quiet pipe");
    assert_eq!(quiet_shown.text(), "[1]<stdout>:still here\n");
    writer.join().unwrap();
    ended_within(busy_ended, "the busy pipe");
    let text = busy_shown.text();
    assert_eq!(text.lines().count(), 8192);
    assert!(text.lines().all(|l| l.len() == "[0]<stdout>:".len() + 1023));
}

/// A tap with a bug: it panics at the first line.
#[derive(Debug)]
struct Broken;

impl Tap for Broken {
    fn line(&self, _: &[u8]) {
        panic!("a tap with a bug");
    }

    fn ended(&self) {}
}

#[test]
fn a_panic_forwarding_one_pipe_ends_that_pipe_only() {
    let forwarder = Forwarder::start().unwrap();
    let (to, _, ended) = add_tapped(&forwarder, 0, Some(Arc::new(Broken)));
    writeln!(&to, "boom").unwrap();
    let got = end_within(ended, "the broken pipe");
    assert!(got.is_err(), "the broken pipe ends with an error");
    // The same thread goes on with the next pipe.
    let (next, shown, next_ended) = add(&forwarder, 1);
    writeln!(&next, "after").unwrap();
    drop(next);
    ended_within(next_ended, "the pipe after the panic");
    assert_eq!(shown.text(), "[1]<stdout>:after\n");
}

#[test]
fn a_dropped_forwarder_still_forwards_its_pipes_to_their_end() {
    let forwarder = Forwarder::start().unwrap();
    let (to, shown, ended) = add(&forwarder, 2);
    drop(forwarder);
    // Its pipe is still forwarded to its end.
    writeln!(&to, "last words").unwrap();
    drop(to);
    ended_within(ended, "the pipe of a dropped forwarder");
    assert_eq!(shown.text(), "[2]<stdout>:last words\n");
}

#[test]
fn the_thread_ends_once_its_door_is_closed_and_its_pipes_have_ended() {
    let (woken, wake) = std::io::pipe().unwrap();
    nonblocking(woken.as_fd()).unwrap();
    let added = Arc::new(Mutex::new(Vec::new()));
    let theirs = Arc::clone(&added);
    let thread = std::thread::spawn(move || run(&theirs, &woken));
    drop(wake);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !thread.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the thread ended within 10 s of its door closing"
        );
        std::thread::yield_now();
    }
    thread.join().unwrap();
}
