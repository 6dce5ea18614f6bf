//! Workers' output, forwarded line by line as horovodrun does:
//! `[RANK]<stdout>:line` on elasticrun's stdout, `[RANK]<stderr>:line` on its
//! stderr, optionally prefixed with the time the line arrived, and optionally also
//! written to `DIR/rank.N/stdout` and `DIR/rank.N/stderr` (without prefixes).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::task::JoinHandle;

use super::pieces::Splitter;

/// The most of one line elasticrun holds before forwarding it: a longer
/// line is forwarded in pieces this long.
const MAX_PIECE: usize = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// The prefix of one forwarded line.
pub fn prefix(rank: usize, stream: Stream, at: Option<SystemTime>) -> String {
    let time = at.map(stamp).unwrap_or_default();
    format!("{time}[{rank}]<{}>:", stream.name())
}

/// `2023-11-14T22:13:20.123Z `: the time in front of a line, forwarded or
/// elasticrun's own, with `--prefix-output-with-timestamp`.
pub fn stamp(at: SystemTime) -> String {
    format!("{} ", humantime::format_rfc3339_millis(at))
}

/// Where a rank's output also goes, if anywhere.
pub fn rank_file(dir: &Path, rank: usize, stream: Stream) -> PathBuf {
    dir.join(format!("rank.{rank}")).join(stream.name())
}

/// Forwards a worker's pipe `from` on one of the coordinator's forwarding
/// threads (`launch/forwarder.rs`: a few for every worker's pipes, each
/// woken by poll(2) when one of its pipes has something), reading and
/// writing with plain calls as `cat` does; no wake-up of the coordinator's
/// runtime and no hand-off to its blocking pool on the way (they made it
/// 3-5 times slower than `cat`). The handle ends when the pipe is read to its end.
pub fn spawn_forward(
    from: OwnedFd,
    rank: usize,
    stream: Stream,
    timestamps: bool,
    file: Option<PathBuf>,
    tap: Option<Arc<dyn Tap>>,
) -> JoinHandle<std::io::Result<()>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let forwarding = Forwarding::new(rank, stream, timestamps, file, tap);
    let added = super::forwarder::forwarder(rank)
        .and_then(|f| f.add(from, forwarding, Box::new(Terminal(stream)), tx));
    tokio::spawn(async move {
        added?;
        rx.await.unwrap_or_else(|_| {
            Err(std::io::Error::other(
                "the output forwarding thread ended early",
            ))
        })
    })
}

/// Shown the start of every line a worker's stream carries, and told when
/// the stream has ended (read to its end, or failed).
pub trait Tap: Send + Sync + std::fmt::Debug {
    /// The first [`TAP_HEAD`] bytes (or fewer) of a line.
    fn line(&self, head: &[u8]);
    fn ended(&self);
}

/// How much of each line a [`Tap`] sees.
pub const TAP_HEAD: usize = 80;

/// Shows `tap` the start of each line `data` ends, keeping the start of
/// the line it does not end in `head`; `data` empty (the stream's end)
/// shows what `head` holds, if anything.
fn tap_lines(tap: &dyn Tap, head: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() && !head.is_empty() {
        tap.line(head);
        head.clear();
    }
    for &b in data {
        if b == b'\n' {
            tap.line(head);
            head.clear();
        } else if head.len() < TAP_HEAD {
            head.push(b);
        }
    }
}

/// Elasticrun's own stdout or stderr, written a whole buffer at a time
/// under its lock, so that ranks' lines do not interleave mid-line with
/// each other or with elasticrun's own.
struct Terminal(Stream);

impl Write for Terminal {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self.0 {
            Stream::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(buf)?;
                out.flush()
            }
            Stream::Stderr => std::io::stderr().lock().write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One pipe's forwarding between reads: where its lines go, and the start
/// of a line not yet ended. It copies the pipe line by line (bytes, not
/// necessarily UTF-8) to the terminal (elasticrun's own stdout or stderr)
/// with the prefix, and to the rank file if given (created 0600 when the
/// forwarding starts): a progress update (a line ended by `\r`) as it comes,
/// a line longer than `MAX_PIECE` (64 KiB) in pieces of that size
/// (`launch/pieces.rs`). What one read brought goes out in one write to
/// each place, whole lines only. The pipe is read to its end whatever
/// happens to the copies: a file that cannot be opened or written (a full
/// disk) is reported once and dropped, the terminal keeps getting the
/// lines; a terminal that is gone (a closed pipe) stops getting them. So a
/// worker never finds its output pipe closed under it.
pub(super) struct Forwarding {
    rank: usize,
    stream: Stream,
    timestamps: bool,
    /// The rank file, to be opened when the forwarding starts.
    path: Option<PathBuf>,
    file: Option<RankFile>,
    to_terminal: bool,
    splitter: Splitter,
    /// The tap, and the start of the line it has not been shown yet.
    tap: Option<(Arc<dyn Tap>, Vec<u8>)>,
}

impl Forwarding {
    pub(super) fn new(
        rank: usize,
        stream: Stream,
        timestamps: bool,
        path: Option<PathBuf>,
        tap: Option<Arc<dyn Tap>>,
    ) -> Self {
        Forwarding {
            rank,
            stream,
            timestamps,
            path,
            file: None,
            to_terminal: true,
            splitter: Splitter::new(MAX_PIECE),
            tap: tap.map(|t| (t, Vec::with_capacity(TAP_HEAD))),
        }
    }

    /// Opens the rank file, if there is one (on the forwarding thread: it
    /// may make directories).
    pub(super) fn start(&mut self) {
        self.file = self.path.take().and_then(RankFile::open);
    }

    /// Forwards what one read of the pipe brought; `data` empty is the
    /// pipe's end (the last piece then gets the newline the worker did not
    /// print). `bufs` are the forwarding thread's, empty between calls.
    pub(super) fn feed(&mut self, data: &[u8], bufs: &mut Buffers, terminal: &mut dyn Write) {
        if let Some((tap, head)) = &mut self.tap {
            tap_lines(tap.as_ref(), head, data);
        }
        let prefix = prefix(
            self.rank,
            self.stream,
            self.timestamps.then(SystemTime::now),
        );
        let Buffers { shown, raw } = bufs;
        let (to_file, to_terminal) = (self.file.is_some(), self.to_terminal);
        let mut each = |piece: &[u8]| {
            if to_file {
                raw.extend_from_slice(piece);
            }
            if to_terminal {
                show(shown, &prefix, piece);
            }
        };
        if data.is_empty() {
            self.splitter.finish(&mut |p| match p.last() {
                Some(b'\n') => each(p),
                _ => each(&[p, b"\n"].concat()),
            });
        } else {
            self.splitter.push(data, &mut each);
        }
        if let Some(f) = self.file.as_mut()
            && !raw.is_empty()
            && !f.write(raw, self.rank)
        {
            self.file = None;
        }
        if to_terminal && !shown.is_empty() {
            self.to_terminal = terminal.write_all(shown).is_ok();
        }
        shown.clear();
        raw.clear();
    }

    /// Reads `from` into `chunk` and forwards what it brings, up to `most`
    /// reads, fewer once a read does not fill the chunk (the pipe then most
    /// likely empty) or finds nothing to read yet; how the pipe ended, if it
    /// did (only a failure to read it is an error).
    pub(super) fn pump(
        &mut self,
        from: &mut impl std::io::Read,
        chunk: &mut [u8],
        bufs: &mut Buffers,
        terminal: &mut dyn Write,
        most: usize,
    ) -> Option<std::io::Result<()>> {
        use std::io::ErrorKind;
        for _ in 0..most {
            match from.read(chunk) {
                Ok(0) => {
                    self.feed(&[], bufs, terminal);
                    return Some(Ok(()));
                }
                Ok(n) => {
                    self.feed(&chunk[..n], bufs, terminal);
                    if n < chunk.len() {
                        return None;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    /// The pipe has ended (read to its end, or failed): the rank file is
    /// flushed and the tap told.
    pub(super) fn end(self) {
        if let Some(f) = self.file {
            f.close(self.rank);
        }
        if let Some((tap, _)) = &self.tap {
            tap.ended();
        }
    }
}

/// Copies `from` to its end through a [`Forwarding`], as the forwarding
/// thread does a pipe: what the tests drive. Only a failure to read `from`
/// is returned.
#[cfg(test)]
fn forward(
    mut from: impl std::io::Read,
    rank: usize,
    stream: Stream,
    timestamps: bool,
    file: Option<PathBuf>,
    terminal: &mut impl Write,
) -> std::io::Result<()> {
    let mut forwarding = Forwarding::new(rank, stream, timestamps, file, None);
    forwarding.start();
    let (mut chunk, mut bufs) = (vec![0; READ_CHUNK], Buffers::default());
    let result = loop {
        if let Some(ended) = forwarding.pump(&mut from, &mut chunk, &mut bufs, terminal, 1) {
            break ended;
        }
    };
    forwarding.end();
    result
}

/// The forwarding thread's buffers: what one read brings for the terminal
/// and for the rank file.
#[derive(Default)]
pub(super) struct Buffers {
    shown: Vec<u8>,
    raw: Vec<u8>,
}

impl Buffers {
    /// Empties them (they are, but after a panic) and gives back what one
    /// huge line made them hold.
    pub(super) fn reset(&mut self) {
        self.shown.clear();
        self.raw.clear();
        self.shown.shrink_to(KEPT);
        self.raw.shrink_to(KEPT);
    }
}

/// How much of a worker's pipe is read at once.
pub(super) const READ_CHUNK: usize = 64 << 10;

/// The most of its output buffers' capacity the forwarding thread keeps
/// from one pipe's end to the next.
const KEPT: usize = 2 * READ_CHUNK;

/// Appends `piece` as the terminal shows it: after `prefix` and ended by
/// its own `\n` or `\r` (a newline for a cut one); a lone `\r` (a progress
/// bar about to redraw) says nothing there, where each piece starts a line
/// of its own.
fn show(out: &mut Vec<u8>, prefix: &str, piece: &[u8]) {
    if piece == b"\r" {
        return;
    }
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(piece);
    if !piece.ends_with(b"\n") && !piece.ends_with(b"\r") {
        out.push(b'\n');
    }
}

/// A rank's output file.
struct RankFile {
    path: PathBuf,
    file: std::fs::File,
}

impl RankFile {
    /// Creates `path` (and its directory), readable by the owner only; an
    /// error is reported and means no file.
    fn open(path: PathBuf) -> Option<RankFile> {
        match create_private(&path) {
            Ok(file) => Some(RankFile { path, file }),
            Err(e) => {
                tracing::error!(
                    "cannot write {}: {e}; the output stays on the terminal",
                    path.display()
                );
                None
            }
        }
    }

    /// Whether the lines were written; a failure is reported here, once.
    fn write(&mut self, lines: &[u8], rank: usize) -> bool {
        match self.file.write_all(lines) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(
                    "cannot write {}: {e}; rank {rank}'s further output goes to the terminal only",
                    self.path.display()
                );
                false
            }
        }
    }

    fn close(mut self, rank: usize) {
        if let Err(e) = self.file.flush() {
            tracing::error!("cannot write {} (rank {rank}): {e}", self.path.display());
        }
    }
}

/// Creates (truncates) `path` with mode 0600, its directory as needed.
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Checks, before any worker starts, that the job's output directory can be
/// made and written: creates it and a probe file in it.
pub fn check_dir(dir: &Path) -> Result<(), OutputError> {
    let fail = |e: std::io::Error| OutputError {
        what: "output directory",
        path: dir.to_owned(),
        why: e,
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".elasticrun-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Checks, before any worker starts, that a file a worker will write (the
/// timeline) can be: opened for writing if it exists (not truncated), else
/// created in its directory and removed again.
pub fn check_file(what: &'static str, path: &Path) -> Result<(), OutputError> {
    let fail = |e: std::io::Error| OutputError {
        what,
        path: path.to_owned(),
        why: e,
    };
    if path.exists() {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(fail);
    }
    std::fs::File::create(path).map_err(fail)?;
    std::fs::remove_file(path).map_err(fail)
}

/// A file or directory of the job's output cannot be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the {what} {}: {why}", path.display())]
pub struct OutputError {
    pub what: &'static str,
    pub path: PathBuf,
    pub why: std::io::Error,
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn horovodrun_prefixes() {
        assert_eq!(prefix(3, Stream::Stdout, None), "[3]<stdout>:");
        assert_eq!(prefix(0, Stream::Stderr, None), "[0]<stderr>:");
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(
            prefix(1, Stream::Stdout, Some(t)),
            "2023-11-14T22:13:20.123Z [1]<stdout>:"
        );
    }

    #[test]
    fn rank_files() {
        assert_eq!(
            rank_file(Path::new("out"), 2, Stream::Stderr),
            PathBuf::from("out/rank.2/stderr")
        );
    }

    #[test]
    fn forwarding_writes_the_file_without_prefixes() {
        let dir =
            std::env::temp_dir().join(format!("elasticrun-output-test-{}", std::process::id()));
        let path = rank_file(&dir, 5, Stream::Stdout);
        let input: &[u8] = b"one\ntwo\nno newline";
        let mut shown = Vec::new();
        forward(
            input,
            5,
            Stream::Stdout,
            false,
            Some(path.clone()),
            &mut shown,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(shown).unwrap(),
            "[5]<stdout>:one\n[5]<stdout>:two\n[5]<stdout>:no newline\n"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "one\ntwo\nno newline\n"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Progress updates and the pieces of a long line reach the file as
    /// they came, whole, and a long line is never held whole.
    #[test]
    fn progress_updates_and_long_lines_reach_the_file_unchanged() {
        let dir =
            std::env::temp_dir().join(format!("elasticrun-output-pieces-{}", std::process::id()));
        let path = rank_file(&dir, 1, Stream::Stderr);
        let mut input = b"\r 10%|#  |\r 20%|## |\r100%|###|\n".to_vec();
        input.extend(vec![b'y'; 3 * MAX_PIECE + 5]);
        input.extend(b"\r\ndone\n");
        let mut shown = Vec::new();
        forward(
            &input[..],
            1,
            Stream::Stderr,
            false,
            Some(path.clone()),
            &mut shown,
        )
        .unwrap();
        let prefixed = shown
            .split(|&b| b == b'\n' || b == b'\r')
            .filter(|l| !l.is_empty());
        assert!(prefixed.into_iter().all(|l| l.starts_with(b"[1]<stderr>:")));
        assert_eq!(std::fs::read(&path).unwrap(), input);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A file that cannot be written (here: its directory is a file) costs
    /// the file, not the pipe: every line is still read.
    #[test]
    fn an_unwritable_file_still_drains_the_pipe() {
        let dir =
            std::env::temp_dir().join(format!("elasticrun-output-bad-{}", std::process::id()));
        std::fs::write(&dir, b"not a directory").unwrap();
        let input: String = (0..200).map(|i| format!("line {i}\n")).collect();
        let path = rank_file(&dir, 0, Stream::Stdout);
        let mut shown = Vec::new();
        forward(
            input.as_bytes(),
            0,
            Stream::Stdout,
            false,
            Some(path),
            &mut shown,
        )
        .unwrap();
        assert_eq!(
            shown.split(|&b| b == b'\n').count(),
            201,
            "every line shown"
        );
        assert!(check_dir(&dir).is_err());
        std::fs::remove_file(dir).unwrap();
    }

    #[test]
    fn an_output_directory_is_checked_before_the_job() {
        let base =
            std::env::temp_dir().join(format!("elasticrun-output-check-{}", std::process::id()));
        let ok = base.join("a/b");
        check_dir(&ok).unwrap();
        assert!(ok.is_dir());
        std::fs::write(base.join("file"), b"x").unwrap();
        let e = check_dir(&base.join("file/sub")).unwrap_err();
        assert!(e.to_string().contains("output directory"), "{e}");
        assert!(e.to_string().contains("file/sub"), "{e}");
        let t = base.join("timeline.json");
        check_file("timeline file", &t).unwrap();
        assert!(!t.exists(), "the probe stayed behind");
        let e = check_file("timeline file", &base.join("missing/t.json")).unwrap_err();
        assert!(
            e.to_string().starts_with("cannot write the timeline file"),
            "{e}"
        );
        std::fs::remove_dir_all(base).unwrap();
    }
}
