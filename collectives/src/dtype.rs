//! Element types the collectives move and reduce, and [`HostBuffer`]: a
//! tensor's elements in host memory with their type known at run time, so
//! that queues and fusion buffers can hold tensors of any element type
//! without erasing them to `dyn Any`.

use std::fmt;
use std::str::FromStr;

use half::{bf16, f16};

use crate::reduce::{Combine, kernels};

/// The element type of a tensor, as named on the command line and on the wire.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I32,
    I64,
    U8,
}

impl DType {
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U8,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype name that is not one of [`DType::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype {0:?}; expected one of f32, f64, f16, bf16, i32, i64, u8")]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownDType(s.to_owned()))
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A tensor element: plain bytes on the wire, with monomorphised reduction kernels
/// (no per-element dynamic dispatch).
pub trait Element:
    bytemuck::Pod + Send + Sync + PartialEq + fmt::Debug + sealed::Sealed + 'static
{
    const DTYPE: DType;

    /// `dst[i] = dst[i] (op) src[i]` for every `i`; the slices have equal lengths.
    fn combine(dst: &mut [Self], src: &[Self], op: Combine);

    /// Multiplies every element by `factor`. Only called for floating-point types.
    fn scale(buf: &mut [Self], factor: f64);

    /// Integer division by the world size (the integer form of an average).
    fn divide(buf: &mut [Self], n: usize);

    /// Converts a small integer test or fill value.
    fn from_f64(v: f64) -> Self;

    fn to_f64(self) -> f64;

    /// `v` as a [`HostBuffer`] of this type.
    fn into_host(v: Vec<Self>) -> HostBuffer;

    /// The vector inside `b` if it holds this type; `b` back otherwise.
    fn from_host(b: HostBuffer) -> Result<Vec<Self>, HostBuffer>;
}

/// `into_host` and `from_host` for the [`HostBuffer`] variant `$v`.
macro_rules! host_variant {
    ($v:ident) => {
        fn into_host(v: Vec<Self>) -> HostBuffer {
            HostBuffer::$v(v)
        }
        fn from_host(b: HostBuffer) -> Result<Vec<Self>, HostBuffer> {
            match b {
                HostBuffer::$v(v) => Ok(v),
                other => Err(other),
            }
        }
    };
}

macro_rules! native_float {
    ($t:ty, $d:expr, $v:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn combine(dst: &mut [Self], src: &[Self], op: Combine) {
                kernels::float(dst, src, op)
            }
            fn scale(buf: &mut [Self], factor: f64) {
                let f = factor as $t;
                buf.iter_mut().for_each(|x| *x *= f);
            }
            fn divide(buf: &mut [Self], n: usize) {
                Self::scale(buf, 1.0 / n as f64)
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            host_variant!($v);
        }
    };
}

macro_rules! half_float {
    ($t:ty, $d:expr, $v:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn combine(dst: &mut [Self], src: &[Self], op: Combine) {
                kernels::half(dst, src, op)
            }
            fn scale(buf: &mut [Self], factor: f64) {
                kernels::half_scale(buf, factor as f32)
            }
            fn divide(buf: &mut [Self], n: usize) {
                Self::scale(buf, 1.0 / n as f64)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            host_variant!($v);
        }
    };
}

macro_rules! integer {
    ($t:ty, $d:expr, $v:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = $d;
            fn combine(dst: &mut [Self], src: &[Self], op: Combine) {
                kernels::integer(dst, src, op)
            }
            fn scale(_buf: &mut [Self], _factor: f64) {}
            fn divide(buf: &mut [Self], n: usize) {
                // i128 holds every value of every integer dtype and any world size.
                let n = n as i128;
                buf.iter_mut().for_each(|x| *x = (*x as i128 / n) as $t);
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            host_variant!($v);
        }
    };
}

native_float!(f32, DType::F32, F32);
native_float!(f64, DType::F64, F64);
half_float!(f16, DType::F16, F16);
half_float!(bf16, DType::BF16, BF16);
integer!(i32, DType::I32, I32);
integer!(i64, DType::I64, I64);
integer!(u8, DType::U8, U8);

/// Host memory of one element type.
#[derive(Clone, Debug, PartialEq)]
pub enum HostBuffer {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
}

/// Runs `$body` with `$v` bound to the vector inside `$buf`, whatever its type.
macro_rules! each {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            HostBuffer::F32($v) => $body,
            HostBuffer::F64($v) => $body,
            HostBuffer::F16($v) => $body,
            HostBuffer::BF16($v) => $body,
            HostBuffer::I32($v) => $body,
            HostBuffer::I64($v) => $body,
            HostBuffer::U8($v) => $body,
        }
    };
}

impl HostBuffer {
    /// `len` zeros of `dtype`.
    pub fn zeros(dtype: DType, len: usize) -> Self {
        match dtype {
            DType::F32 => HostBuffer::F32(vec![0.0; len]),
            DType::F64 => HostBuffer::F64(vec![0.0; len]),
            DType::F16 => HostBuffer::F16(vec![f16::ZERO; len]),
            DType::BF16 => HostBuffer::BF16(vec![bf16::ZERO; len]),
            DType::I32 => HostBuffer::I32(vec![0; len]),
            DType::I64 => HostBuffer::I64(vec![0; len]),
            DType::U8 => HostBuffer::U8(vec![0; len]),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            HostBuffer::F32(_) => DType::F32,
            HostBuffer::F64(_) => DType::F64,
            HostBuffer::F16(_) => DType::F16,
            HostBuffer::BF16(_) => DType::BF16,
            HostBuffer::I32(_) => DType::I32,
            HostBuffer::I64(_) => DType::I64,
            HostBuffer::U8(_) => DType::U8,
        }
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        each!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vector, if it holds `T`; the buffer back otherwise.
    pub fn into_vec<T: Element>(self) -> Result<Vec<T>, HostBuffer> {
        T::from_host(self)
    }
}

impl<T: Element> From<Vec<T>> for HostBuffer {
    fn from(v: Vec<T>) -> Self {
        T::into_host(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert_eq!("BF16".parse::<DType>().unwrap(), DType::BF16);
        assert!("f8".parse::<DType>().is_err());
    }

    #[test]
    fn sizes_match_rust_types() {
        assert_eq!(DType::F16.size(), std::mem::size_of::<f16>());
        assert_eq!(DType::BF16.size(), std::mem::size_of::<bf16>());
        assert_eq!(DType::I64.size(), std::mem::size_of::<i64>());
    }

    #[test]
    fn integer_divide_handles_worlds_larger_than_the_type() {
        let mut v = [250u8, 7];
        u8::divide(&mut v, 300);
        assert_eq!(v, [0, 0]);
        let mut w = [-9i32, 9];
        i32::divide(&mut w, 2);
        assert_eq!(w, [-4, 4]);
    }

    #[test]
    fn a_vector_comes_back_as_the_type_it_went_in() {
        let b = HostBuffer::from(vec![1.5f32, 2.5]);
        assert_eq!((b.dtype(), b.len()), (DType::F32, 2));
        let b = b.into_vec::<f64>().unwrap_err();
        assert_eq!(b.into_vec::<f32>().unwrap(), vec![1.5, 2.5]);
        for d in DType::ALL {
            let z = HostBuffer::zeros(d, 3);
            assert_eq!((z.dtype(), z.len()), (d, 3));
        }
        assert!(HostBuffer::from(Vec::<u8>::new()).is_empty());
    }
}
