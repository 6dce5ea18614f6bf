//! Buffers reused from one training step to the next. A submission copies
//! its arrays into a buffer of the engine's, and the result comes back in
//! that buffer as a new numpy array; once Python drops that array (the next
//! step's `zero_grad()`, say) the buffer returns here, still mapped, so the
//! next step's copy writes into memory the process already has instead of
//! fresh pages that the kernel must fault in and zero (a large allocation
//! is mapped anew by malloc each time, or trimmed away behind it).
//!
//! Only buffers of at least [`MIN_POOLED_BYTES`] are kept, and at most
//! [`MAX_POOLED_BYTES`] in all; a request takes the smallest free buffer that
//! holds it without wasting more than half of it.

use std::sync::{Mutex, PoisonError};

use half::f16;

/// Smaller buffers come from malloc's free lists at no such cost.
const MIN_POOLED_BYTES: usize = 64 * 1024;

/// The most free memory the pool holds on to.
pub(crate) const MAX_POOLED_BYTES: usize = 1 << 30;

/// Free buffers of each element type, and what the pool has done.
#[derive(Debug)]
pub(crate) struct Shelves {
    f32: Vec<Vec<f32>>,
    f64: Vec<Vec<f64>>,
    f16: Vec<Vec<f16>>,
    i32: Vec<Vec<i32>>,
    i64: Vec<Vec<i64>>,
    u8: Vec<Vec<u8>>,
    /// Bytes of capacity on the shelves.
    held: usize,
    /// Requests served from a shelf, and those that allocated.
    reused: u64,
    allocated: u64,
}

static SHELVES: Mutex<Shelves> = Mutex::new(Shelves {
    f32: Vec::new(),
    f64: Vec::new(),
    f16: Vec::new(),
    i32: Vec::new(),
    i64: Vec::new(),
    u8: Vec::new(),
    held: 0,
    reused: 0,
    allocated: 0,
});

/// A tensor's elements, of the type the array had.
#[derive(Debug)]
pub(crate) enum Data {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
}

/// An element type the pool keeps buffers of, and its [`Data`] variant.
pub(crate) trait Pooled: Sized {
    fn shelf(s: &mut Shelves) -> &mut Vec<Vec<Self>>;
    fn hold(v: Vec<Self>) -> Data;
    fn elements(h: &mut Data) -> Option<&mut [Self]>;
}

macro_rules! pooled {
    ($($t:ty => $field:ident, $variant:ident);*) => {$(
        impl Pooled for $t {
            fn shelf(s: &mut Shelves) -> &mut Vec<Vec<Self>> {
                &mut s.$field
            }
            fn hold(v: Vec<Self>) -> Data {
                Data::$variant(v)
            }
            fn elements(h: &mut Data) -> Option<&mut [Self]> {
                match h {
                    Data::$variant(v) => Some(v.as_mut_slice()),
                    _ => None,
                }
            }
        }
    )*};
}
pooled!(f32 => f32, F32; f64 => f64, F64; f16 => f16, F16; i32 => i32, I32; i64 => i64, I64; u8 => u8, U8);

fn bytes<T>(capacity: usize) -> usize {
    capacity.saturating_mul(std::mem::size_of::<T>())
}

/// Whether the pool keeps buffers of `len` elements of `T`.
pub(crate) fn keeps<T>(len: usize) -> bool {
    bytes::<T>(len) >= MIN_POOLED_BYTES
}

/// An empty buffer with room for `len` elements.
pub(crate) fn take<T: Pooled>(len: usize) -> Vec<T> {
    if !keeps::<T>(len) {
        return Vec::with_capacity(len);
    }
    let mut s = SHELVES.lock().unwrap_or_else(PoisonError::into_inner);
    let shelf = T::shelf(&mut s);
    let best = shelf
        .iter()
        .enumerate()
        .filter(|(_, v)| v.capacity() >= len && v.capacity() / 2 <= len)
        .min_by_key(|(_, v)| v.capacity())
        .map(|(i, _)| i);
    match best {
        Some(i) => {
            let v = shelf.swap_remove(i);
            s.held -= bytes::<T>(v.capacity());
            s.reused += 1;
            v
        }
        None => {
            s.allocated += 1;
            drop(s);
            Vec::with_capacity(len)
        }
    }
}

/// Returns `v`'s memory to the pool (or to malloc, when it is small or the
/// pool is full).
pub(crate) fn give<T: Pooled>(mut v: Vec<T>) {
    if !keeps::<T>(v.capacity()) {
        return;
    }
    let b = bytes::<T>(v.capacity());
    v.clear();
    let mut s = SHELVES.lock().unwrap_or_else(PoisonError::into_inner);
    if s.held.saturating_add(b) > MAX_POOLED_BYTES {
        return;
    }
    s.held += b;
    T::shelf(&mut s).push(v);
}

/// (buffers reused, buffers allocated, bytes held) since the process began.
pub(crate) fn stats() -> (u64, u64, usize) {
    let s = SHELVES.lock().unwrap_or_else(PoisonError::into_inner);
    (s.reused, s.allocated, s.held)
}

impl Data {
    /// Back to the pool.
    pub(crate) fn give_back(self) {
        match self {
            Data::F32(v) => give(v),
            Data::F64(v) => give(v),
            Data::F16(v) => give(v),
            Data::I32(v) => give(v),
            Data::I64(v) => give(v),
            Data::U8(v) => give(v),
        }
    }
}
