//! Reading the text files a user names (a hostfile, the config file, a
//! secret file), bounded: one pointed at `/dev/zero` or a log is an error
//! naming it, not gigabytes read into memory.

use std::io::Read;
use std::path::Path;

/// The largest hostfile or config file read: far beyond any real one.
pub const MAX_TEXT_FILE: u64 = 16 << 20;

/// The text of the file at `path`, at most `max` bytes of UTF-8; a larger
/// file, or one that is not text, is an `InvalidData` error saying so.
pub fn read_text(path: &Path, max: u64) -> std::io::Result<String> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(invalid(format!("larger than the {max} bytes allowed")));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        invalid(format!("not UTF-8 text (byte {at})"))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_file_past_the_limit_or_not_text_is_refused() {
        let dir = std::env::temp_dir().join(format!("elasticrun-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("hosts");
        std::fs::write(&p, "a:2\nb:1\n").unwrap();
        assert_eq!(read_text(&p, 8).unwrap(), "a:2\nb:1\n");
        let e = read_text(&p, 7).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "larger than the 7 bytes allowed");
        std::fs::write(&p, b"a:2\n\xff\n").unwrap();
        assert_eq!(
            read_text(&p, 8).unwrap_err().to_string(),
            "not UTF-8 text (byte 4)"
        );
        // An endless file ends at the limit.
        let e = read_text(Path::new("/dev/zero"), MAX_TEXT_FILE).unwrap_err();
        assert!(e.to_string().starts_with("larger than"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
