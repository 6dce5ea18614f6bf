//! Serial references and helpers shared by the collective tests.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

use collectives::{Communicator, Element, ReduceOp, Transport};
use futures::future::join_all;

pub mod grid;
pub mod mesh;

pub const WORLDS: [usize; 5] = [1, 2, 3, 4, 7];

/// Generous bound on one collective in a test; a hang fails the test here.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Lengths: empty, one element, fewer than ranks, not divisible, large.
pub fn lengths(n: usize) -> Vec<usize> {
    let mut v = vec![0, 1, n.saturating_sub(1), 5 * n + 3, 4099];
    v.sort_unstable();
    v.dedup();
    v
}

/// Inputs whose reductions are exact in every dtype: products stay within 2^7,
/// sums within 4 * 7.
pub fn input_value(rank: usize, i: usize, op: ReduceOp) -> f64 {
    match op {
        ReduceOp::Product => 1.0 + f64::from(u8::from((rank + i).is_multiple_of(3))),
        _ => ((rank * 7 + i * 3) % 5) as f64,
    }
}

/// A float whose sum with others depends on the order of the additions
/// (magnitudes from 2^-1 to 2^9 and many mantissa bits), so that reductions
/// in different orders give different bits.
pub fn noisy(rank: usize, i: usize) -> f64 {
    let x = ((rank * 7919 + i * 104_729) % 1_000_003) as f64 / 1_000_003.0;
    (x - 0.5) * f64::from(1 << ((rank + i) % 11))
}

pub fn inputs<T: Element>(n: usize, len: usize, op: ReduceOp) -> Vec<Vec<T>> {
    (0..n)
        .map(|r| {
            (0..len)
                .map(|i| T::from_f64(input_value(r, i, op)))
                .collect()
        })
        .collect()
}

/// Serial reduction in f64 (exact for [`input_value`]), then the average rule of
/// the dtype: division for floats, truncating division for integers.
pub fn reference(n: usize, len: usize, op: ReduceOp, float: bool) -> Vec<f64> {
    (0..len)
        .map(|i| {
            let vals = (0..n).map(|r| input_value(r, i, op));
            match op {
                ReduceOp::Sum => vals.sum(),
                ReduceOp::Average if float => vals.sum::<f64>() / n as f64,
                ReduceOp::Average => (vals.sum::<f64>() / n as f64).trunc(),
                ReduceOp::Product => vals.product(),
                ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
                ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
            }
        })
        .collect()
}

/// Exact for everything except a floating-point average, which is checked to the
/// dtype's precision.
pub fn assert_matches<T: Element>(got: &[T], want: &[f64], op: ReduceOp, ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: length");
    let tol = match (op, T::DTYPE) {
        (ReduceOp::Average, collectives::DType::F16 | collectives::DType::BF16) => 2e-2,
        (ReduceOp::Average, collectives::DType::F32) => 1e-6,
        (ReduceOp::Average, collectives::DType::F64) => 1e-12,
        _ => 0.0,
    };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{ctx}: element {i} is {g}, expected {w}"
        );
    }
}

/// Every rank holds the same bytes.
pub fn assert_identical<T: Element>(per_rank: &[Vec<T>], ctx: &str) {
    for (r, v) in per_rank.iter().enumerate().skip(1) {
        assert!(
            bytemuck::cast_slice::<T, u8>(v) == bytemuck::cast_slice::<T, u8>(&per_rank[0]),
            "{ctx}: rank {r} differs from rank 0"
        );
    }
}

/// Runs `f` on every rank concurrently (in this task) within [`DEADLINE`].
pub async fn on_every_rank<'a, X, R, Fut>(
    comms: &'a [Communicator<X>],
    f: impl FnMut(&'a Communicator<X>) -> Fut,
) -> Vec<R>
where
    X: Transport,
    Fut: Future<Output = R>,
{
    tokio::time::timeout(DEADLINE, join_all(comms.iter().map(f)))
        .await
        .expect("collective did not finish within the deadline")
}

/// Runs a collective that takes each rank's own buffer.
pub async fn with_buffers<'a, X, T, R, Fut>(
    comms: &'a [Communicator<X>],
    bufs: &'a mut [Vec<T>],
    f: impl Fn(&'a Communicator<X>, &'a mut Vec<T>) -> Fut,
) -> Vec<R>
where
    X: Transport,
    Fut: Future<Output = R>,
{
    let futs = comms.iter().zip(bufs.iter_mut()).map(|(c, b)| f(c, b));
    tokio::time::timeout(DEADLINE, join_all(futs))
        .await
        .expect("collective did not finish within the deadline")
}

/// Starts an allreduce of `len` elements on every rank but `victim`, then drops
/// the victim's communicator (as if its process died) while the others wait.
/// Returns the survivors' results and how long they took to finish.
pub async fn allreduce_while_one_dies<X: Transport>(
    mut comms: Vec<Communicator<X>>,
    victim: usize,
    len: usize,
) -> (Vec<collectives::Result<()>>, Duration) {
    let dead = comms.remove(victim);
    let started = std::time::Instant::now();
    let mut bufs = vec![vec![1.0f32; len]; comms.len()];
    let mut survivors = std::pin::pin!(join_all(
        comms
            .iter()
            .zip(bufs.iter_mut())
            .map(|(c, b)| c.allreduce(b, ReduceOp::Sum)),
    ));
    // The victim goes once every survivor has entered the allreduce and waits:
    // one poll of the join runs each of them up to its first wait.
    assert!(
        futures::poll!(survivors.as_mut()).is_pending(),
        "the survivors finished an allreduce without rank {victim}"
    );
    drop(dead);
    let results = tokio::time::timeout(DEADLINE, survivors)
        .await
        .expect("survivors hung after a peer died");
    (results, started.elapsed())
}

pub async fn shutdown_all<X: Transport>(comms: Vec<Communicator<X>>) {
    join_all(comms.into_iter().map(|c| c.into_transport().shutdown())).await;
}

/// Asserts that every survivor's result is `PeerLost` of `rank` in `generation`
/// (not a timeout: the loss was seen, not waited out).
pub fn assert_lost(
    res: Vec<collectives::Result<()>>,
    rank: usize,
    generation: collectives::Generation,
) {
    for r in res {
        match r {
            Err(collectives::CollectiveError::Transport(
                collectives::TransportError::PeerLost {
                    rank: lost,
                    generation: g,
                    ..
                },
            )) if lost == rank && g == generation => {}
            other => panic!("expected PeerLost {{ rank: {rank}, {generation:?} }}, got {other:?}"),
        }
    }
}
