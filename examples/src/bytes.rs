//! Byte sizes on the command line ("4096", "16K", "256M", "1GiB"), shared by
//! the example programs.

/// Parses a byte size with an optional binary suffix: K/KB/KiB, M, G (powers of 1024).
pub(crate) fn parse_bytes(s: &str) -> Result<usize, String> {
    let n = parse_size::Config::new()
        .with_binary()
        .parse_size(s.trim())
        .map_err(|e| {
            format!("{s:?} is not a size: a number with an optional K, M or G suffix, such as 4096, 16K or 256M ({e})")
        })?;
    usize::try_from(n).map_err(|_| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("16K"), Ok(16 << 10));
        assert_eq!(parse_bytes("256M"), Ok(256 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("8kb"), Ok(8192));
        for bad in ["12Q", "M", "", "-4K"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
