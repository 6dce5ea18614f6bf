//! A user's value quoted in an error message, cut to a bounded prefix: a
//! 50 MB bad value is named by its start and its length, not printed whole.

use std::fmt;

/// How many characters of a value an error message shows.
pub(crate) const SHOWN: usize = 60;

/// `value` as an error message quotes it: `"4x"`, or for a long one
/// `"abcd…" (52428800 bytes)`.
#[derive(Clone, Copy, Debug)]
pub struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        match s.char_indices().nth(SHOWN) {
            None => write!(f, "{s:?}"),
            Some((cut, _)) => {
                let head = format!("{:?}", &s[..cut]);
                let head = head.strip_suffix('"').unwrap_or(&head);
                write!(f, "{head}…\" ({} bytes)", s.len())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_quoted_whole_and_long_ones_cut() {
        assert_eq!(Quoted("4x").to_string(), r#""4x""#);
        assert_eq!(Quoted("a\"b").to_string(), r#""a\"b""#);
        let long = "é".repeat(10_000);
        let shown = Quoted(&long).to_string();
        assert_eq!(shown, format!("\"{}…\" (20000 bytes)", "é".repeat(SHOWN)));
    }
}
