//! latfloor: the latency floor of this machine under the small collectives.
//! Times ping-pongs between two threads and prints half a round trip (the
//! one-way latency), median of five rounds:
//!
//! - over a shared cache line: each side spins on a counter the other
//!   writes, the least a message between two ranks sharing memory costs;
//! - over loopback TCP (`TCP_NODELAY`), 4 bytes and 4 KiB: each side either
//!   spins on non-blocking reads (as a looking link does) or blocks in
//!   `read` (as a sleeping one does).
//!
//! ```text
//! latfloor [ROUND_TRIPS]      (default 20000 per round)
//! ```

use std::hint::spin_loop;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const ROUNDS: usize = 5;

/// Two counters on their own cache lines: one written by each side.
#[repr(C, align(128))]
struct Line(AtomicU64);

/// Half a round trip over a shared cache line, in µs.
fn cache_line(trips: u64) -> f64 {
    let lines = Arc::new([Line(AtomicU64::new(0)), Line(AtomicU64::new(0))]);
    let echo = lines.clone();
    let peer = std::thread::spawn(move || {
        for i in 1..=trips {
            while echo[0].0.load(Ordering::Acquire) != i {
                spin_loop();
            }
            echo[1].0.store(i, Ordering::Release);
        }
    });
    let t = Instant::now();
    for i in 1..=trips {
        lines[0].0.store(i, Ordering::Release);
        while lines[1].0.load(Ordering::Acquire) != i {
            spin_loop();
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / trips as f64 / 2.0;
    let _ = peer.join();
    us
}

/// Reads exactly `buf.len()` bytes, spinning on non-blocking reads if `spin`.
fn read_all(s: &mut TcpStream, buf: &mut [u8], spin: bool) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if spin && e.kind() == ErrorKind::WouldBlock => spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A connected pair of loopback sockets, non-blocking if `spin`.
fn tcp_pair(spin: bool) -> std::io::Result<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let a = TcpStream::connect(l.local_addr()?)?;
    let (b, _) = l.accept()?;
    for s in [&a, &b] {
        s.set_nodelay(true)?;
        s.set_nonblocking(spin)?;
    }
    Ok((a, b))
}

/// Writes all of `buf`, waiting out a full send buffer.
fn write_all(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut sent = 0;
    while sent < buf.len() {
        match s.write(&buf[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Half a round trip of `bytes` over loopback TCP, in µs.
fn tcp(trips: u64, bytes: usize, spin: bool) -> std::io::Result<f64> {
    let (mut a, mut b) = tcp_pair(spin)?;
    let peer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; bytes];
        for _ in 0..trips {
            read_all(&mut b, &mut buf, spin)?;
            write_all(&mut b, &buf)?;
        }
        Ok(())
    });
    let mut buf = vec![1u8; bytes];
    let t = Instant::now();
    for _ in 0..trips {
        write_all(&mut a, &buf)?;
        read_all(&mut a, &mut buf, spin)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / trips as f64 / 2.0;
    peer.join()
        .map_err(|_| std::io::Error::other("the echoing thread panicked"))??;
    Ok(us)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let trips = match std::env::args().nth(1).map(|a| a.parse::<u64>()) {
        None => 20_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("latfloor: ROUND_TRIPS must be a positive whole number");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "# latfloor: one-way latency (half a round trip), median of {ROUNDS} rounds of {trips}"
    );
    let line = median((0..ROUNDS).map(|_| cache_line(trips)).collect());
    println!("{:<34} {:>8.3} us", "cache line", line);
    for (bytes, spin) in [(4, true), (4096, true), (4, false), (4096, false)] {
        let how = if spin { "spinning" } else { "blocking" };
        let runs: std::io::Result<Vec<f64>> =
            (0..ROUNDS).map(|_| tcp(trips, bytes, spin)).collect();
        match runs {
            Ok(r) => println!(
                "{:<34} {:>8.3} us",
                format!("loopback TCP {bytes} B, {how}"),
                median(r)
            ),
            Err(e) => {
                eprintln!("latfloor: loopback TCP: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
