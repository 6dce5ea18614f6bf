//! Workers' output, forwarded line by line as horovodrun does:
//! `[RANK]<stdout>:line` on elasticrun's stdout, `[RANK]<stderr>:line` on its
//! stderr, optionally prefixed with the time the line arrived, and optionally also
//! written to `DIR/rank.N/stdout` and `DIR/rank.N/stderr` (without prefixes).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::pieces::Splitter;

/// The most of one line elasticrun holds before forwarding it: a longer
/// line is forwarded in pieces this long.
const MAX_PIECE: usize = 64 << 10;
/// How much of a worker's pipe is read at once.
const READ_CHUNK: usize = 64 << 10;

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

/// Copies `from` line by line (bytes, not necessarily UTF-8) to elasticrun's own
/// stdout or stderr with the prefix, and to `file` if given (created 0600):
/// a progress update (a line ended by `\r`) as it comes, a line longer
/// than `MAX_PIECE` (64 KiB) in pieces of that size (`launch/pieces.rs`).
/// Reads to EOF whatever happens to the copies: a file that cannot be opened
/// or written (a full disk) is reported once and dropped, the terminal keeps
/// getting the lines; a terminal that is gone (a closed pipe) stops getting
/// them. So a worker never finds its output pipe closed under it. Only a
/// failure to read the worker's pipe is returned.
pub async fn forward<R: AsyncRead + Unpin>(
    from: R,
    rank: usize,
    stream: Stream,
    timestamps: bool,
    file: Option<PathBuf>,
) -> std::io::Result<()> {
    let mut file = match file {
        Some(p) => RankFile::open(p).await,
        None => None,
    };
    let mut terminal = true;
    let mut from = from;
    let mut splitter = Splitter::new(MAX_PIECE);
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let n = from.read(&mut chunk).await?;
        let pieces = if n == 0 {
            splitter_end(&mut splitter)
        } else {
            splitter.push(&chunk[..n])
        };
        // What one read brought goes out in one write to each place, whole
        // lines only (a write per line cost a system call and thread
        // wake-ups each: 40 times slower than `cat`).
        if let Some(f) = file.as_mut()
            && !pieces.is_empty()
            && !f.write(&pieces.concat(), rank).await
        {
            file = None;
        }
        if terminal && !pieces.is_empty() {
            let out = prefixed(
                &pieces,
                prefix(rank, stream, timestamps.then(SystemTime::now)),
            );
            terminal = out.is_empty() || to_terminal(stream, &out).await.is_ok();
        }
        if n == 0 {
            break;
        }
    }
    if let Some(f) = file {
        f.close(rank).await;
    }
    Ok(())
}

/// `pieces` as the terminal shows them, each after `prefix` and ended by
/// its own `\n` or `\r` (a newline for a cut one); a lone `\r` (a
/// progress bar about to redraw) says nothing there, where each piece
/// starts a line of its own.
fn prefixed(pieces: &[Vec<u8>], prefix: String) -> Vec<u8> {
    let mut out = Vec::with_capacity(pieces.iter().map(|p| p.len() + prefix.len() + 1).sum());
    for piece in pieces.iter().filter(|p| p.as_slice() != b"\r") {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(piece);
        if !piece.ends_with(b"\n") && !piece.ends_with(b"\r") {
            out.push(b'\n');
        }
    }
    out
}

/// The last piece of a worker's output, ended by a newline it did not
/// print.
fn splitter_end(splitter: &mut Splitter) -> Vec<Vec<u8>> {
    let rest = splitter.finish();
    rest.map(|mut p| {
        if !p.ends_with(b"\n") {
            p.push(b'\n');
        }
        p
    })
    .into_iter()
    .collect()
}

/// Writes one forwarded line to elasticrun's stdout or stderr, whole, and
/// waits until it is written: tokio hands a write to a blocking thread and
/// returns before it is done, so a line not waited for could be overtaken by
/// the rank's next one.
async fn to_terminal(stream: Stream, line: &[u8]) -> std::io::Result<()> {
    // One write per line so that ranks' lines do not interleave mid-line.
    match stream {
        Stream::Stdout => {
            let mut out = tokio::io::stdout();
            out.write_all(line).await?;
            out.flush().await
        }
        Stream::Stderr => {
            let mut err = tokio::io::stderr();
            err.write_all(line).await?;
            err.flush().await
        }
    }
}

/// A rank's output file.
struct RankFile {
    path: PathBuf,
    file: tokio::fs::File,
}

impl RankFile {
    /// Creates `path` (and its directory), readable by the owner only; an
    /// error is reported and means no file.
    async fn open(path: PathBuf) -> Option<RankFile> {
        match create_private(&path).await {
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

    /// Whether the line was written; a failure is reported here, once.
    async fn write(&mut self, line: &[u8], rank: usize) -> bool {
        match self.file.write_all(line).await {
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

    async fn close(mut self, rank: usize) {
        if let Err(e) = self.file.flush().await {
            tracing::error!("cannot write {} (rank {rank}): {e}", self.path.display());
        }
    }
}

/// Creates (truncates) `path` with mode 0600, its directory as needed.
async fn create_private(path: &Path) -> std::io::Result<tokio::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir).await?;
    }
    tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .await
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

    #[tokio::test]
    async fn forwarding_writes_the_file_without_prefixes() {
        let dir =
            std::env::temp_dir().join(format!("elasticrun-output-test-{}", std::process::id()));
        let path = rank_file(&dir, 5, Stream::Stdout);
        let input: &[u8] = b"one\ntwo\nno newline";
        forward(input, 5, Stream::Stdout, false, Some(path.clone()))
            .await
            .unwrap();
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
    #[tokio::test]
    async fn progress_updates_and_long_lines_reach_the_file_unchanged() {
        let dir =
            std::env::temp_dir().join(format!("elasticrun-output-pieces-{}", std::process::id()));
        let path = rank_file(&dir, 1, Stream::Stderr);
        let mut input = b"\r 10%|#  |\r 20%|## |\r100%|###|\n".to_vec();
        input.extend(vec![b'y'; 3 * MAX_PIECE + 5]);
        input.extend(b"\r\ndone\n");
        forward(&input[..], 1, Stream::Stderr, false, Some(path.clone()))
            .await
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), input);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A file that cannot be written (here: its directory is a file) costs
    /// the file, not the pipe: every line is still read.
    #[tokio::test]
    async fn an_unwritable_file_still_drains_the_pipe() {
        let dir =
            std::env::temp_dir().join(format!("elasticrun-output-bad-{}", std::process::id()));
        std::fs::write(&dir, b"not a directory").unwrap();
        let (mut tx, rx) = tokio::io::duplex(64);
        let lines = 200;
        let writer = tokio::spawn(async move {
            for i in 0..lines {
                tx.write_all(format!("line {i}\n").as_bytes()).await?;
            }
            Ok::<_, std::io::Error>(())
        });
        let path = rank_file(&dir, 0, Stream::Stdout);
        let fwd = forward(rx, 0, Stream::Stdout, false, Some(path));
        tokio::time::timeout(Duration::from_secs(60), fwd)
            .await
            .expect("the forwarder did not reach EOF")
            .unwrap();
        writer.await.unwrap().expect("the worker's writes failed");
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
