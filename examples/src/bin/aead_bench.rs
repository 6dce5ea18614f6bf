//! aead_bench: what encryption alone costs on this CPU. Seals records in place
//! with ring's AES-128-GCM (the only cipher suite the QUIC data plane offers),
//! one nonce per record as a QUIC stack does, and prints GB/s of plaintext per
//! record size: the ceiling one core's encryption puts on an encrypted data
//! plane, before header protection, packet handling and the socket.
//!
//! ```text
//! aead_bench [SECONDS_PER_SIZE]      (default 1; three rounds, the median shown)
//! ```

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ring::aead::{AES_128_GCM, Aad, LessSafeKey, Nonce, UnboundKey};

/// A full-size QUIC packet's payload on a 1,500-byte path; 8 KiB; 64 KiB.
const RECORDS: [usize; 3] = [1350, 8 << 10, 64 << 10];
const ROUNDS: usize = 3;

fn nonce(n: u64) -> Nonce {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(b)
}

/// Seals `record`-byte records for about `secs`; returns GB/s of plaintext.
fn seal_rate(key: &LessSafeKey, record: usize, secs: Duration) -> Result<f64, String> {
    let mut buf = vec![0x5Au8; record];
    let mut n = 0u64;
    let start = Instant::now();
    loop {
        // Check the clock every 64 records: reading it costs as much as
        // sealing a small record.
        for _ in 0..64 {
            let tag = key
                .seal_in_place_separate_tag(nonce(n), Aad::from([0u8; 16]), &mut buf)
                .map_err(|_| format!("sealing a {record}-byte record failed"))?;
            black_box(&tag);
            n += 1;
        }
        let t = start.elapsed();
        if t >= secs {
            return Ok(n as f64 * record as f64 / t.as_secs_f64() / 1e9);
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn run(secs: Duration) -> Result<(), String> {
    let key = UnboundKey::new(&AES_128_GCM, &[0x42; 16])
        .map_err(|_| "cannot make an AES-128-GCM key".to_owned())?;
    let key = LessSafeKey::new(key);
    println!("# ring AES-128-GCM seal, one core, {secs:?} per size and round, median of {ROUNDS}");
    println!("{:>10} {:>10} {:>12}", "record_B", "GB/s", "ns/record");
    for record in RECORDS {
        let mut rates = Vec::new();
        for _ in 0..ROUNDS {
            rates.push(seal_rate(&key, record, secs)?);
        }
        let gbps = median(rates);
        println!("{record:>10} {gbps:>10.2} {:>12.0}", record as f64 / gbps);
    }
    Ok(())
}

fn main() -> ExitCode {
    let secs = match std::env::args().nth(1).map(|s| s.parse::<f64>()) {
        None => 1.0,
        Some(Ok(s)) if s > 0.0 && s.is_finite() => s,
        Some(_) => {
            eprintln!("usage: aead_bench [SECONDS_PER_SIZE] (a positive number)");
            return ExitCode::from(2);
        }
    };
    match run(Duration::from_secs_f64(secs)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aead_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
