//! Input patterns whose results are exact in every dtype, and their expected
//! values, for the once-per-size correctness check.

use collectives::{DType, ReduceOp};

/// Rank `rank`'s element `i` for a reduction over `n` ranks: products stay at most
/// 2 and sums at most 4n (exact in u8/bf16 for the world sizes one machine runs).
pub(crate) fn reduce_input(n: usize, rank: usize, i: usize, op: ReduceOp) -> f64 {
    match op {
        ReduceOp::Product => 1.0 + f64::from(u8::from(rank == 0 && i.is_multiple_of(3))),
        _ if n > 16 => ((rank + i) % 2) as f64,
        _ => ((rank * 7 + i * 3) % 5) as f64,
    }
}

pub(crate) fn reduce_expected(n: usize, i: usize, op: ReduceOp, dtype: DType) -> f64 {
    let vals = (0..n).map(|r| reduce_input(n, r, i, op));
    match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Average if dtype.is_float() => vals.sum::<f64>() / n as f64,
        ReduceOp::Average => (vals.sum::<f64>() / n as f64).trunc(),
        ReduceOp::Product => vals.product(),
        ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
        ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
    }
}

/// Element `i` of rank `rank`'s contribution to a gather or broadcast.
pub(crate) fn gather_value(rank: usize, i: usize) -> f64 {
    ((rank * 31 + i) % 200) as f64
}

/// Element `i` of what rank `src` sends rank `dst` in an alltoall.
pub(crate) fn a2a_value(src: usize, dst: usize, i: usize) -> f64 {
    ((src * 5 + dst * 3 + i) % 200) as f64
}

/// Exact, except a floating-point average, checked to the dtype's precision.
pub(crate) fn close(got: f64, want: f64, op: ReduceOp, dtype: DType) -> bool {
    let tol = match (op, dtype) {
        (ReduceOp::Average, DType::F16 | DType::BF16) => 2e-2,
        (ReduceOp::Average, DType::F32) => 1e-6,
        (ReduceOp::Average, DType::F64) => 1e-12,
        _ => 0.0,
    };
    (got - want).abs() <= tol * want.abs().max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_values_are_exact_in_small_types() {
        for n in [1, 2, 7, 16, 17, 64] {
            for i in 0..20 {
                assert!(reduce_expected(n, i, ReduceOp::Sum, DType::U8) <= 255.0);
                assert!(reduce_expected(n, i, ReduceOp::Product, DType::U8) <= 2.0);
            }
        }
        // i = 1: ranks contribute 3 and 0; integers truncate the average.
        assert_eq!(reduce_expected(2, 1, ReduceOp::Average, DType::I32), 1.0);
        assert_eq!(reduce_expected(2, 1, ReduceOp::Average, DType::F32), 1.5);
        assert!(close(2.333, 7.0 / 3.0, ReduceOp::Average, DType::F16));
        assert!(!close(2.4, 7.0 / 3.0, ReduceOp::Average, DType::F16));
    }
}
