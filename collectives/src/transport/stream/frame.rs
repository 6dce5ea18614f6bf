//! Data frames on a TCP connection: a fixed 24-byte little-endian header, then the
//! payload.
//!
//! ```text
//! 0        8        16    20    24
//! +--------+--------+-----+-----+--------------
//! | gen    | op id  | step| len | payload (len bytes)
//! +--------+--------+-----+-----+--------------
//! ```

use crate::error::LossCause;
use crate::tag::{Generation, Tag};

pub(crate) const HEADER_LEN: usize = 24;

pub(crate) fn encode_header(tag: Tag, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&tag.generation.0.to_le_bytes());
    h[8..16].copy_from_slice(&tag.op_id.to_le_bytes());
    h[16..20].copy_from_slice(&tag.step.to_le_bytes());
    h[20..24].copy_from_slice(&len.to_le_bytes());
    h
}

/// Parses a header; a length above `max_payload` is an error before anything is
/// allocated for it.
pub(crate) fn decode_header(
    h: &[u8; HEADER_LEN],
    max_payload: u32,
) -> Result<(Tag, u32), LossCause> {
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&h[i..i + 8]);
        u64::from_le_bytes(a)
    };
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let len = u32_at(20);
    if len > max_payload {
        return Err(LossCause::FrameTooLarge {
            len: len.into(),
            limit: max_payload.into(),
        });
    }
    Ok((Tag::new(Generation(u64_at(0)), u64_at(8), u32_at(16)), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let tag = Tag::new(Generation(5), 77, 3);
        assert_eq!(decode_header(&encode_header(tag, 4), 1024), Ok((tag, 4)));
        assert_eq!(decode_header(&encode_header(tag, 0), 0), Ok((tag, 0)));
    }

    #[test]
    fn oversized_length_is_refused() {
        let h = encode_header(Tag::new(Generation(0), 0, 0), u32::MAX);
        assert_eq!(
            decode_header(&h, 1024),
            Err(LossCause::FrameTooLarge {
                len: u32::MAX.into(),
                limit: 1024
            })
        );
    }
}
