//! Byte sizes on the command line ("4096", "16K", "256M", "1GiB"), shared by
//! the example programs.

/// Parses a byte size with an optional binary suffix: K/KB/KiB, M, G (powers of 1024).
pub(crate) fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size such as 4096, 16K or 256M"))?;
    let mult: usize = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size suffix {other:?} in {s:?} (use K, M or G)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
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
