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

    /// Takes `data`; hands `each` the pieces complete now, in order, each
    /// with its `\n` or `\r` (a `\r` at the end of `data` is held: a `\n`
    /// may follow in the next read). A piece that lies whole in `data` is
    /// handed over where it lies, without a copy.
    pub(crate) fn push(&mut self, mut data: &[u8], each: &mut impl FnMut(&[u8])) {
        while !data.is_empty() {
            if self.pending.last() == Some(&b'\r') {
                if data[0] == b'\n' {
                    self.pending.push(b'\n');
                    data = &data[1..];
                }
                self.emit(each);
                continue;
            }
            let room = self.max - self.pending.len();
            let window = &data[..data.len().min(room)];
            let Some(i) = window.iter().position(|&b| b == b'\n' || b == b'\r') else {
                self.pending.extend_from_slice(window);
                data = &data[window.len()..];
                if self.pending.len() >= self.max {
                    self.emit(each);
                }
                continue;
            };
            let mut end = i + 1;
            if window[i] == b'\r' {
                match data.get(end) {
                    // Held: the next read may start with its `\n`.
                    None => {
                        self.pending.extend_from_slice(data);
                        return;
                    }
                    Some(b'\n') => end += 1,
                    Some(_) => {}
                }
            }
            if self.pending.is_empty() {
                each(&data[..end]);
            } else {
                self.pending.extend_from_slice(&data[..end]);
                self.emit(each);
            }
            data = &data[end..];
        }
    }

    /// At the end of the output: hands `each` what is held, if anything.
    pub(crate) fn finish(&mut self, each: &mut impl FnMut(&[u8])) {
        self.emit(each);
    }

    fn emit(&mut self, each: &mut impl FnMut(&[u8])) {
        if !self.pending.is_empty() {
            each(&self.pending);
            self.pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(max: usize, chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut s = Splitter::new(max);
        let mut out = Vec::new();
        let mut each = |p: &[u8]| out.push(p.to_vec());
        for c in chunks {
            s.push(c, &mut each);
        }
        s.finish(&mut each);
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
        let mut out: Vec<Vec<u8>> = Vec::new();
        for chunk in line.chunks(100) {
            s.push(chunk, &mut |p| out.push(p.to_vec()));
            assert!(s.pending.len() < 64, "held {} bytes", s.pending.len());
        }
        s.push(b"\n", &mut |p| out.push(p.to_vec()));
        s.finish(&mut |p| out.push(p.to_vec()));
        assert!(out.iter().all(|p| p.len() <= 64));
        let joined: Vec<u8> = out.concat();
        assert_eq!(joined.len(), 1001);
        assert_eq!(joined.last(), Some(&b'\n'));
    }

    /// However the output is cut into reads, the pieces are the same, none
    /// is longer than `max` (a `\r\n` may add its `\n`), and together
    /// they are the output.
    #[test]
    fn reads_cut_anywhere_give_the_same_pieces() {
        let seed = 0x5eed_u64;
        println!("seed {seed:#x}");
        let mut x = seed;
        let mut next = move |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        for _ in 0..500 {
            let len = next(300) as usize;
            let data: Vec<u8> = (0..len)
                .map(|_| [b'a', b'b', b'\n', b'\r'][next(4) as usize])
                .collect();
            let whole = all(16, &[&data]);
            let mut chunks = Vec::new();
            let mut at = 0;
            while at < data.len() {
                let n = (1 + next(40) as usize).min(data.len() - at);
                chunks.push(&data[at..at + n]);
                at += n;
            }
            assert_eq!(
                all(16, &chunks),
                whole,
                "{:?}",
                String::from_utf8_lossy(&data)
            );
            assert_eq!(whole.concat(), data);
            assert!(whole.iter().all(|p| p.len() <= 17));
        }
    }
}
