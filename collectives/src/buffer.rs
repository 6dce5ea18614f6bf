//! [`HostBuffer`]: a tensor's elements in host memory with their type known at
//! run time, so that queues and fusion buffers can hold tensors of any element
//! type without erasing them to `dyn Any`.

use half::{bf16, f16};

use crate::dtype::{DType, Element};

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
