//! membench: the memory-bandwidth ceiling under the host collectives. Times
//! a copy (`dst.copy_from_slice(src)`) and an element-wise `a += b` over f32
//! at 1 MiB (in cache), 16 MiB and 256 MiB (mostly or wholly in DRAM), one
//! thread, and prints GB/s of buffer per second: bytes copied, or bytes of
//! `a` reduced. A shared-memory collective moves each byte at least once
//! through a copy and once through a reduction, so these bound it.
//!
//! ```text
//! membench [SECONDS_PER_CASE]      (default 0.5; five rounds, the median shown)
//! ```

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [1 << 20, 16 << 20, 256 << 20];
const ROUNDS: usize = 5;

/// Runs `op` for about `secs`; returns GB/s of `bytes` per call.
fn rate(bytes: usize, secs: Duration, mut op: impl FnMut()) -> f64 {
    op();
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < secs {
        op();
        calls += 1;
    }
    (bytes as f64 * calls as f64) / start.elapsed().as_secs_f64() / 1e9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn add(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += *y;
    }
}

fn main() -> ExitCode {
    let secs = match std::env::args().nth(1).map(|s| s.parse::<f64>()) {
        None => 0.5,
        Some(Ok(s)) if s > 0.0 && s.is_finite() => s,
        Some(_) => {
            eprintln!("usage: membench [SECONDS_PER_CASE]");
            return ExitCode::from(2);
        }
    };
    let secs = Duration::from_secs_f64(secs);
    println!("{:>12}  {:>12}  {:>12}", "bytes", "copy_GB/s", "add_GB/s");
    for bytes in SIZES {
        let n = bytes / 4;
        let src = vec![1.0f32; n];
        let mut dst = vec![0.0f32; n];
        let mut copy = Vec::new();
        let mut sum = Vec::new();
        for _ in 0..ROUNDS {
            copy.push(rate(bytes, secs, || {
                dst.copy_from_slice(black_box(&src));
                black_box(&dst);
            }));
            sum.push(rate(bytes, secs, || {
                add(black_box(&mut dst), black_box(&src));
            }));
        }
        println!("{bytes:>12}  {:>12.2}  {:>12.2}", median(copy), median(sum));
    }
    ExitCode::SUCCESS
}
