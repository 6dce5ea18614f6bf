//! The sweep of sizes (parsed by the shared `bytes` module).

/// `min, min*factor, ...` up to and including `max`.
pub(crate) fn sweep(min: usize, max: usize, factor: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        match s.checked_mul(factor.max(2)) {
            Some(next) => s = next,
            None => break,
        }
    }
    out
}

/// (warm-up, timed) iterations for a size: enough samples for a stable median
/// while a full 4 KiB..256 MiB sweep stays within a few minutes on 2 cores.
pub(crate) fn iterations(bytes: usize, timed: Option<usize>) -> (usize, usize) {
    let (w, k) = match bytes {
        b if b <= 64 << 10 => (20, 200),
        b if b <= 1 << 20 => (10, 50),
        b if b <= 16 << 20 => (3, 15),
        b if b <= 64 << 20 => (2, 7),
        _ => (1, 5),
    };
    match timed {
        Some(k) => ((k / 10).max(1), k.max(1)),
        None => (w, k),
    }
}

/// Warm-up calls of `bytes` that pass a shared-memory ring of `ring_bytes`
/// once: a ring's first pass takes a page fault on each side for every page
/// it writes (the first few hundred 4 KiB allreduces of a pair took 4.8-5.9
/// µs against 1.3-1.4 after), a cost each link pays once in its life and a
/// benchmark of the steady state leaves out, as it leaves out connecting.
pub(crate) fn first_pass(ring_bytes: usize, bytes: usize) -> usize {
    ring_bytes.div_ceil(bytes.max(1)).min(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_doubles_to_max() {
        assert_eq!(sweep(4096, 32768, 2), vec![4096, 8192, 16384, 32768]);
        assert_eq!(sweep(5, 4, 2), Vec::<usize>::new());
        assert_eq!(sweep(1, 100, 10), vec![1, 10, 100]);
    }

    #[test]
    fn explicit_iterations_win() {
        assert_eq!(iterations(4096, None), (20, 200));
        assert_eq!(iterations(4096, Some(30)), (3, 30));
        assert_eq!(iterations(1 << 30, Some(1)), (1, 1));
        assert_eq!(first_pass(1 << 20, 4096), 256);
        assert_eq!(first_pass(1 << 20, 3000), 350);
        assert_eq!(first_pass(1 << 20, 1 << 28), 1);
        assert_eq!(first_pass(0, 4096), 0, "no shared memory, no pass");
        assert_eq!(first_pass(1 << 20, 4), 4096, "bounded");
    }
}
