//! Workers' output, forwarded line by line as horovodrun does:
//! `[RANK]<stdout>:line` on elasticrun's stdout, `[RANK]<stderr>:line` on its
//! stderr, optionally prefixed with the time the line arrived, and optionally also
//! written to `DIR/rank.N/stdout` and `DIR/rank.N/stderr` (without prefixes).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

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
    let time = at
        .map(|t| format!("{} ", humantime::format_rfc3339_millis(t)))
        .unwrap_or_default();
    format!("{time}[{rank}]<{}>:", stream.name())
}

/// Where a rank's output also goes, if anywhere.
pub fn rank_file(dir: &Path, rank: usize, stream: Stream) -> PathBuf {
    dir.join(format!("rank.{rank}")).join(stream.name())
}

/// Copies `from` line by line (bytes, not necessarily UTF-8) to elasticrun's own
/// stdout or stderr with the prefix, and to `file` if given. Ends at EOF.
pub async fn forward<R: AsyncRead + Unpin>(
    from: R,
    rank: usize,
    stream: Stream,
    timestamps: bool,
    file: Option<PathBuf>,
) -> std::io::Result<()> {
    let mut file = match file {
        Some(p) => {
            if let Some(dir) = p.parent() {
                tokio::fs::create_dir_all(dir).await?;
            }
            Some(tokio::fs::File::create(p).await?)
        }
        None => None,
    };
    let mut lines = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        if lines.read_until(b'\n', &mut line).await? == 0 {
            break;
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        if let Some(f) = file.as_mut() {
            f.write_all(&line).await?;
        }
        let mut out = prefix(rank, stream, timestamps.then(SystemTime::now)).into_bytes();
        out.extend_from_slice(&line);
        // One write per line so that ranks' lines do not interleave mid-line.
        match stream {
            Stream::Stdout => tokio::io::stdout().write_all(&out).await?,
            Stream::Stderr => tokio::io::stderr().write_all(&out).await?,
        }
    }
    if let Some(mut f) = file {
        f.flush().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
        std::fs::remove_dir_all(dir).unwrap();
    }
}
