//! The fusion buffer: where a fused group's tensors are packed for their one
//! collective. It is kept by the engine across cycles, one host vector per
//! element type, grown to the largest group seen and then reused, so the
//! steady state packs into memory it already has instead of allocating a
//! buffer per group. (A device buffer joins it when tensors can live on a
//! GPU.)

use std::collections::HashMap;

use collectives::{DType, Element, HostBuffer};

/// One reusable vector per element type.
#[derive(Debug, Default)]
pub(super) struct FusionBuffer {
    by_dtype: HashMap<DType, HostBuffer>,
    growths: u64,
}

impl FusionBuffer {
    /// The buffer for `T`, empty, with room for at least `len` elements. Hand
    /// it back with [`FusionBuffer::put_back`] to keep its memory.
    pub(super) fn take<T: Element>(&mut self, len: usize) -> Vec<T> {
        let mut v = self
            .by_dtype
            .remove(&T::DTYPE)
            .and_then(|b| b.into_vec::<T>().ok())
            .unwrap_or_default();
        v.clear();
        if v.capacity() < len {
            self.growths += 1;
            v.reserve_exact(len);
        }
        v
    }

    /// Keeps `v`'s memory for the next group of its element type.
    pub(super) fn put_back<T: Element>(&mut self, v: Vec<T>) {
        self.by_dtype.insert(T::DTYPE, v.into());
    }

    /// How many times a buffer had to be allocated or grown.
    pub(super) fn growths(&self) -> u64 {
        self.growths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_is_reused_once_large_enough() {
        let mut f = FusionBuffer::default();
        let mut v = f.take::<f32>(100);
        v.extend(std::iter::repeat_n(1.0, 100));
        let at = v.as_ptr();
        f.put_back(v);
        for len in [100, 10, 64, 100] {
            let v = f.take::<f32>(len);
            assert!(v.is_empty());
            assert_eq!(v.as_ptr(), at, "reallocated for {len} elements");
            f.put_back(v);
        }
        assert_eq!(f.growths(), 1);
        // Another element type has a buffer of its own.
        let w = f.take::<i64>(8);
        f.put_back(w);
        assert_eq!(f.growths(), 2);
        let v = f.take::<f32>(200);
        assert!(v.capacity() >= 200);
        assert_eq!(f.growths(), 3);
    }
}
