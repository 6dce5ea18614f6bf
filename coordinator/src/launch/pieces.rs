//! Cutting a worker's output into the pieces forwarded one at a time: lines
//! (ending in `\n`, `\r\n` included), progress updates (ending in `\r`, as a
//! progress bar redraws its line: forwarded as they come, so the bar
//! moves), and pieces of at most `max` bytes of a line that is longer,
//! so that elasticrun holds at most `max` bytes of anything a worker prints.
//!
//! ```text
//!  "epoch 1\n"  "\r 10%|#  |"  "\r 20%|## |"  "\n"   400 MB without a newline
//!   └ line       (held: a \r   └ " 10%|#  |\r"  └ " 20%|## |\n"   └ pieces of max bytes
//!                 may end it)
//! ```

/// Splits what a worker writes into forwarded pieces; pure, fed as bytes
/// arrive.
#[derive(Debug)]
pub(crate) struct Splitter {
    pending: Vec<u8>,
    max: usize,
}

impl Splitter {
    /// A splitter cutting lines longer than `max` (at least 2) bytes.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            pending: Vec::new(),
            max: max.max(2),
        }
    }

    /// Takes `data`; returns the pieces complete now, each with its `\n`
    /// or `\r` (a cut piece has neither).
    pub(crate) fn push(&mut self, mut data: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while !data.is_empty() {
            // A `\r` held at the end of the last data: `\r\n` ends a line.
            if self.pending.last() == Some(&b'\r') {
                if data[0] == b'\n' {
                    self.pending.push(b'\n');
                    data = &data[1..];
                }
                self.emit(&mut out);
                continue;
            }
            let room = self.max - self.pending.len();
            let window = &data[..data.len().min(room)];
            match window.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    self.pending.extend_from_slice(&window[..=i]);
                    data = &data[i + 1..];
                    if window[i] == b'\r' {
                        match data.first() {
                            // What follows a `\r` at the very end decides.
                            None => continue,
                            Some(b'\n') => {
                                self.pending.push(b'\n');
                                data = &data[1..];
                            }
                            Some(_) => {}
                        }
                    }
                    self.emit(&mut out);
                }
                None => {
                    self.pending.extend_from_slice(window);
                    data = &data[window.len()..];
                    if self.pending.len() >= self.max {
                        self.emit(&mut out);
                    }
                }
            }
        }
        out
    }

    /// What is left at the end of the output, if anything.
    pub(crate) fn finish(&mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.emit(&mut out);
        out.pop()
    }

    /// Moves the pending piece, if any, to `out`.
    fn emit(&mut self, out: &mut Vec<Vec<u8>>) {
        let piece = std::mem::take(&mut self.pending);
        if !piece.is_empty() {
            out.push(piece);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(max: usize, chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut s = Splitter::new(max);
        let mut out: Vec<Vec<u8>> = chunks.iter().flat_map(|c| s.push(c)).collect();
        out.extend(s.finish());
        out
    }

    fn strs(pieces: &[Vec<u8>]) -> Vec<&str> {
        pieces
            .iter()
            .map(|p| std::str::from_utf8(p).unwrap_or("?"))
            .collect()
    }

    #[test]
    fn lines_and_progress_updates_are_pieces_of_their_own() {
        let out = all(64, &[b"epoch 1\n\r 10%|#", b"  |\r 20%|## |\nend"]);
        assert_eq!(
            strs(&out),
            ["epoch 1\n", "\r", " 10%|#  |\r", " 20%|## |\n", "end"]
        );
    }

    #[test]
    fn crlf_ends_one_line_even_across_reads() {
        assert_eq!(
            strs(&all(64, &[b"a\r\nb\r", b"\nc\r"])),
            ["a\r\n", "b\r\n", "c\r"]
        );
    }

    #[test]
    fn a_long_line_comes_in_bounded_pieces_and_nothing_is_lost() {
        let line = vec![b'x'; 1000];
        let mut s = Splitter::new(64);
        let mut out = Vec::new();
        for chunk in line.chunks(100) {
            out.extend(s.push(chunk));
            assert!(s.pending.len() < 64, "held {} bytes", s.pending.len());
        }
        out.extend(s.push(b"\n"));
        out.extend(s.finish());
        assert!(out.iter().all(|p| p.len() <= 64));
        let joined: Vec<u8> = out.concat();
        assert_eq!(joined.len(), 1001);
        assert_eq!(joined.last(), Some(&b'\n'));
    }
}
