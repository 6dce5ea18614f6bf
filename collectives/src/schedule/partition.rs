//! Splitting a buffer into per-rank blocks and blocks into segments.

use std::ops::Range;

/// `len` elements split into `n` counts that differ by at most one, the larger
/// ones first (rank `i` gets `len / n + (i < len % n)`).
pub fn even_counts(len: usize, n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    (0..n).map(|i| len / n + usize::from(i < len % n)).collect()
}

/// Contiguous ranges, one per count, in order.
pub fn block_ranges(counts: &[usize]) -> Vec<Range<usize>> {
    let mut start = 0;
    counts
        .iter()
        .map(|&c| {
            let r = start..start + c;
            start += c;
            r
        })
        .collect()
}

/// Number of `seg`-element segments in `len` elements (`seg >= 1`).
pub fn segment_count(len: usize, seg: usize) -> usize {
    len.div_ceil(seg.max(1))
}

/// Segment `k` of `block`, segments being `seg` elements (the last may be shorter).
pub fn segment(block: &Range<usize>, seg: usize, k: usize) -> Range<usize> {
    let seg = seg.max(1);
    let start = (block.start + k * seg).min(block.end);
    start..(start + seg).min(block.end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_counts_cover_and_balance() {
        for len in [0, 1, 2, 6, 7, 100, 101] {
            for n in 1..9 {
                let c = even_counts(len, n);
                assert_eq!(c.len(), n);
                assert_eq!(c.iter().sum::<usize>(), len);
                let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
                assert!(hi - lo <= 1, "{len} over {n}: {c:?}");
                assert!(c.windows(2).all(|w| w[0] >= w[1]), "larger first: {c:?}");
            }
        }
    }

    #[test]
    fn segments_tile_a_block() {
        for (block, seg) in [(3..20, 4), (0..0, 3), (5..6, 10), (0..12, 1)] {
            let n = segment_count(block.len(), seg);
            let mut next = block.start;
            for k in 0..n {
                let s = segment(&block, seg, k);
                assert_eq!(s.start, next);
                assert!(!s.is_empty() && s.len() <= seg);
                next = s.end;
            }
            assert_eq!(next, block.end);
        }
    }

    #[test]
    fn ranges_follow_counts() {
        assert_eq!(block_ranges(&[2, 0, 3]), vec![0..2, 2..2, 2..5]);
    }
}
