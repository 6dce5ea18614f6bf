//! What `worker_probe --collectives` runs: allreduce and allgather of several
//! lengths and element types, alone and fused, each result checked against
//! the value computed here from every rank's input. Inputs whose sums are
//! exact in any order make the check exact whichever path (flat or
//! hierarchical) the job runs; one average of fractions is checked to f32's
//! rounding.
#![allow(clippy::cast_precision_loss, clippy::cast_possible_wrap)]

use worker::{ReduceOp, Worker};

fn check(what: &str, ok: bool) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what} gave a wrong result"))
    }
}

/// Small integers: every partial sum is exact, in f32 too.
fn int(rank: usize, i: usize) -> i64 {
    ((rank * 7 + i * 3) % 11) as i64
}

/// Fractions whose sums round.
fn fraction(rank: usize, i: usize) -> f32 {
    (((rank * 7919 + i * 104_729) % 1_000_003) as f64 / 1_000_003.0 - 0.5) as f32
}

fn err(e: worker::Error) -> String {
    e.to_string()
}

/// Runs every check; the first wrong result is the error.
pub fn run(w: &Worker) -> Result<(), String> {
    allreduce_alone(w)?;
    average(w)?;
    allreduce_fused(w)?;
    allgather(w)
}

fn allreduce_alone(w: &Worker) -> Result<(), String> {
    let (r, n) = (w.rank(), w.size());
    for len in [1, 7, n + 1, 1000, 100_003] {
        let mut sum: Vec<f32> = (0..len).map(|i| int(r, i) as f32).collect();
        w.allreduce(&mut sum, ReduceOp::Sum).map_err(err)?;
        let mut max: Vec<i64> = (0..len).map(|i| int(r, i) * 1_000_000_007).collect();
        w.allreduce(&mut max, ReduceOp::Max).map_err(err)?;
        for i in 0..len {
            let want_sum: i64 = (0..n).map(|q| int(q, i)).sum();
            let want_max = (0..n).map(|q| int(q, i)).max().unwrap_or(0) * 1_000_000_007;
            check(
                &format!("allreduce of {len} elements"),
                sum[i] == want_sum as f32 && max[i] == want_max,
            )?;
        }
    }
    Ok(())
}

fn average(w: &Worker) -> Result<(), String> {
    let (r, n) = (w.rank(), w.size());
    let len = 50_000;
    let mut avg: Vec<f32> = (0..len).map(|i| fraction(r, i)).collect();
    w.allreduce(&mut avg, ReduceOp::Average).map_err(err)?;
    let tolerance = 4.0 * n as f64 * f64::from(f32::EPSILON);
    check(
        "allreduce average",
        avg.iter().enumerate().all(|(i, &got)| {
            let want = (0..n).map(|q| f64::from(fraction(q, i))).sum::<f64>() / n as f64;
            (f64::from(got) - want).abs() <= tolerance
        }),
    )
}

/// Many tensors in flight at once: the engine fuses them.
fn allreduce_fused(w: &Worker) -> Result<(), String> {
    let (r, n) = (w.rank(), w.size());
    let len = |t: usize| 1 + t * 997;
    let handles: Vec<_> = (0..24)
        .map(|t| {
            let data: Vec<i64> = (0..len(t)).map(|i| int(r, i + t)).collect();
            w.allreduce_async(Some(&format!("fused.{t}")), data, ReduceOp::Sum)
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        let got = h.wait().map_err(err)?.data;
        let want: Vec<i64> = (0..len(t))
            .map(|i| (0..n).map(|q| int(q, i + t)).sum())
            .collect();
        check(&format!("fused allreduce fused.{t}"), got == want)?;
    }
    Ok(())
}

/// Different lengths on every rank (some none), alone and several at once.
fn allgather(w: &Worker) -> Result<(), String> {
    let (r, n) = (w.rank(), w.size());
    let len = |q: usize, t: usize| (q * 5 + t) % 4 * 300;
    let value = |q: usize, t: usize, i: usize| (q * 1_000_000 + t * 10_000 + i) as i64;
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let data: Vec<i64> = (0..len(r, t)).map(|i| value(r, t, i)).collect();
            w.allgather_async(Some(&format!("gather.{t}")), data)
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        let got = h.wait().map_err(err)?.data;
        let want: Vec<i64> = (0..n)
            .flat_map(|q| (0..len(q, t)).map(move |i| value(q, t, i)))
            .collect();
        check(&format!("allgather gather.{t}"), got == want)?;
    }
    let bytes = w.allgather(&vec![r as u8; r % 3]).map_err(err)?;
    let want: Vec<u8> = (0..n).flat_map(|q| vec![q as u8; q % 3]).collect();
    check("allgather of bytes", bytes == want)
}
