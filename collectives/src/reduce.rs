//! Reduction operators and the kernels that apply them.
//!
//! Each kernel is a tight loop over two slices, monomorphised per element type, with
//! the operator matched once outside the loop so that the compiler vectorises it.
//! `f16`/`bf16` are widened to `f32` in blocks, combined, and rounded back once.

use std::fmt;
use std::str::FromStr;

/// The reduction a collective applies.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum ReduceOp {
    Sum,
    /// Sum, then divide by the world size (integer division for integer types).
    Average,
    Min,
    Max,
    Product,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Average,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Product,
    ];

    /// The pairwise operator applied while reducing.
    pub fn combine(self) -> Combine {
        match self {
            ReduceOp::Sum | ReduceOp::Average => Combine::Sum,
            ReduceOp::Min => Combine::Min,
            ReduceOp::Max => Combine::Max,
            ReduceOp::Product => Combine::Product,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Average => "average",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Product => "product",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reduce-op name that is not one of [`ReduceOp::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown reduce op {0:?}; expected one of sum, average, min, max, product")]
pub struct UnknownReduceOp(pub String);

impl FromStr for ReduceOp {
    type Err = UnknownReduceOp;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownReduceOp(s.to_owned()))
    }
}

/// A commutative, associative pairwise operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combine {
    Sum,
    Min,
    Max,
    Product,
}

pub(crate) mod kernels {
    use half::slice::HalfFloatSliceExt;

    use super::Combine;

    #[inline(always)]
    fn zip_apply<T: Copy>(dst: &mut [T], src: &[T], f: impl Fn(T, T) -> T) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = f(*d, *s);
        }
    }

    pub(crate) trait Float:
        Copy + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self>
    {
        fn min(self, o: Self) -> Self;
        fn max(self, o: Self) -> Self;
    }

    impl Float for f32 {
        fn min(self, o: Self) -> Self {
            f32::min(self, o)
        }
        fn max(self, o: Self) -> Self {
            f32::max(self, o)
        }
    }

    impl Float for f64 {
        fn min(self, o: Self) -> Self {
            f64::min(self, o)
        }
        fn max(self, o: Self) -> Self {
            f64::max(self, o)
        }
    }

    pub(crate) fn float<T: Float>(dst: &mut [T], src: &[T], op: Combine) {
        match op {
            Combine::Sum => zip_apply(dst, src, |a, b| a + b),
            Combine::Product => zip_apply(dst, src, |a, b| a * b),
            Combine::Min => zip_apply(dst, src, T::min),
            Combine::Max => zip_apply(dst, src, T::max),
        }
    }

    pub(crate) trait Integer: Copy + Ord {
        fn wrapping_add(self, o: Self) -> Self;
        fn wrapping_mul(self, o: Self) -> Self;
    }

    macro_rules! integer_impl {
        ($($t:ty),*) => {$(
            impl Integer for $t {
                fn wrapping_add(self, o: Self) -> Self {
                    <$t>::wrapping_add(self, o)
                }
                fn wrapping_mul(self, o: Self) -> Self {
                    <$t>::wrapping_mul(self, o)
                }
            }
        )*};
    }
    integer_impl!(i32, i64, u8);

    pub(crate) fn integer<T: Integer>(dst: &mut [T], src: &[T], op: Combine) {
        match op {
            Combine::Sum => zip_apply(dst, src, T::wrapping_add),
            Combine::Product => zip_apply(dst, src, T::wrapping_mul),
            Combine::Min => zip_apply(dst, src, Ord::min),
            Combine::Max => zip_apply(dst, src, Ord::max),
        }
    }

    /// Elements widened per block: large enough to amortise the loop, small enough
    /// to stay in L1 (2 x 4 KiB of f32).
    const HALF_BLOCK: usize = 1024;

    pub(crate) fn half<H>(dst: &mut [H], src: &[H], op: Combine)
    where
        [H]: HalfFloatSliceExt,
    {
        let mut a = [0f32; HALF_BLOCK];
        let mut b = [0f32; HALF_BLOCK];
        for (d, s) in dst.chunks_mut(HALF_BLOCK).zip(src.chunks(HALF_BLOCK)) {
            let n = d.len();
            d.convert_to_f32_slice(&mut a[..n]);
            s.convert_to_f32_slice(&mut b[..n]);
            float(&mut a[..n], &b[..n], op);
            d.convert_from_f32_slice(&a[..n]);
        }
    }

    pub(crate) fn half_scale<H>(buf: &mut [H], factor: f32)
    where
        [H]: HalfFloatSliceExt,
    {
        let mut a = [0f32; HALF_BLOCK];
        for d in buf.chunks_mut(HALF_BLOCK) {
            let n = d.len();
            d.convert_to_f32_slice(&mut a[..n]);
            a[..n].iter_mut().for_each(|x| *x *= factor);
            d.convert_from_f32_slice(&a[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;
    use crate::dtype::Element;

    fn check<T: Element>(a: &[f64], b: &[f64], op: Combine, want: &[f64]) {
        let mut d: Vec<T> = a.iter().map(|&v| T::from_f64(v)).collect();
        let s: Vec<T> = b.iter().map(|&v| T::from_f64(v)).collect();
        T::combine(&mut d, &s, op);
        let got: Vec<f64> = d.iter().map(|v| v.to_f64()).collect();
        assert_eq!(got, want, "{} {op:?}", T::DTYPE);
    }

    fn all_types(a: &[f64], b: &[f64], op: Combine, want: &[f64]) {
        check::<f32>(a, b, op, want);
        check::<f64>(a, b, op, want);
        check::<f16>(a, b, op, want);
        check::<bf16>(a, b, op, want);
        check::<i32>(a, b, op, want);
        check::<i64>(a, b, op, want);
        check::<u8>(a, b, op, want);
    }

    #[test]
    fn each_combine_on_each_type() {
        let a = [1.0, 7.0, 3.0, 0.0];
        let b = [2.0, 5.0, 3.0, 9.0];
        all_types(&a, &b, Combine::Sum, &[3.0, 12.0, 6.0, 9.0]);
        all_types(&a, &b, Combine::Product, &[2.0, 35.0, 9.0, 0.0]);
        all_types(&a, &b, Combine::Min, &[1.0, 5.0, 3.0, 0.0]);
        all_types(&a, &b, Combine::Max, &[2.0, 7.0, 3.0, 9.0]);
    }

    #[test]
    fn half_kernels_cross_block_boundaries() {
        let n = 2500;
        let mut d: Vec<f16> = (0..n).map(|i| f16::from_f64((i % 50) as f64)).collect();
        let s: Vec<f16> = (0..n).map(|i| f16::from_f64((i % 7) as f64)).collect();
        f16::combine(&mut d, &s, Combine::Sum);
        for (i, v) in d.iter().enumerate() {
            assert_eq!(v.to_f64(), ((i % 50) + (i % 7)) as f64, "index {i}");
        }
    }

    #[test]
    fn integer_sum_wraps_instead_of_panicking() {
        let mut d = [250u8];
        u8::combine(&mut d, &[10], Combine::Sum);
        assert_eq!(d, [4]);
    }

    #[test]
    fn op_names_parse() {
        for op in ReduceOp::ALL {
            assert_eq!(op.name().parse::<ReduceOp>().unwrap(), op);
        }
        assert!("mean".parse::<ReduceOp>().is_err());
    }
}
