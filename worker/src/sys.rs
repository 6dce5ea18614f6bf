//! The worker runtime's `unsafe` code, all of it (see the `unsafe` policy in
//! docs/architecture.md).

/// Removes `name` from this process's environment, so that the programs the
/// training program starts do not inherit it.
pub(crate) fn remove_env(name: &str) {
    // SAFETY: `remove_var` is unsafe because another thread may read the
    // environment at the same time. Rust's own readers take std's environment
    // lock, so only C code reading `environ` concurrently is exposed; this runs
    // in `init()`, before the runtime's threads exist, and glibc never frees
    // an environment string, so such a reader sees the variable or not, never
    // freed memory.
    unsafe { std::env::remove_var(name) };
}

/// A tensor's elements in host memory that the engine does not own: lent by
/// the program for the length of one collective, reduced where they lie, in
/// one or more segments (the tensor is their concatenation). What keeps the
/// memory alive (`owner`) goes with it and comes back with the result.
pub struct LentHost {
    dtype: collectives::DType,
    /// (address, elements) of each segment.
    segments: Vec<(usize, usize)>,
    owner: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for LentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentHost")
            .field("dtype", &self.dtype)
            .field("segments", &self.segments)
            .finish_non_exhaustive()
    }
}

/// Why memory cannot be lent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LendError {
    #[error("segment {index} is not aligned for {dtype} elements")]
    Misaligned {
        index: usize,
        dtype: collectives::DType,
    },
    #[error("segments {a} and {b} overlap")]
    Overlap { a: usize, b: usize },
    #[error("segment {index} ends past the address space")]
    TooLong { index: usize },
    #[error("segment {index} has no address")]
    Null { index: usize },
}

impl LentHost {
    /// Segments of `T` elements at the given addresses, kept alive by
    /// `owner`; refused when one is misaligned or two overlap.
    ///
    /// # Safety
    ///
    /// Until the value is dropped or [`LentHost::into_owner`] returns: each
    /// segment `(ptr, len)` is valid for reads and writes of `len` elements
    /// of `T` while `owner` lives, and nothing but the engine (through this
    /// value) reads or writes it.
    pub unsafe fn new<T: collectives::Element>(
        segments: &[(*mut T, usize)],
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<Self, LendError> {
        let size = std::mem::size_of::<T>();
        let mut spans = Vec::with_capacity(segments.len());
        for (index, &(ptr, len)) in segments.iter().enumerate() {
            let at = ptr as usize;
            if len == 0 {
                continue;
            }
            if at == 0 {
                return Err(LendError::Null { index });
            }
            if !at.is_multiple_of(std::mem::align_of::<T>()) {
                let dtype = T::DTYPE;
                return Err(LendError::Misaligned { index, dtype });
            }
            let end = len
                .checked_mul(size)
                .and_then(|b| at.checked_add(b))
                .ok_or(LendError::TooLong { index })?;
            spans.push((at, end, index));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if let [(_, end, a), (start, _, b)] = w
                && start < end
            {
                return Err(LendError::Overlap { a: *a, b: *b });
            }
        }
        // An empty segment is never read: a dangling, aligned address serves.
        let empty = std::ptr::NonNull::<T>::dangling().as_ptr() as usize;
        let segments = segments
            .iter()
            .map(|&(p, n)| (if n == 0 { empty } else { p as usize }, n))
            .collect();
        Ok(Self {
            dtype: T::DTYPE,
            segments,
            owner,
        })
    }

    pub fn dtype(&self) -> collectives::DType {
        self.dtype
    }

    /// Elements in all segments together.
    pub fn len(&self) -> usize {
        self.segments.iter().map(|s| s.1).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What kept the memory alive; the memory is the program's again.
    pub fn into_owner(self) -> Box<dyn std::any::Any + Send + Sync> {
        self.owner
    }

    /// Vectors lent as one tensor, their concatenation; [`LentHost::into_owner`]
    /// gives back the `Vec<Vec<T>>`.
    pub fn from_vecs<T: collectives::Element>(mut vecs: Vec<Vec<T>>) -> Self {
        let segments: Vec<(*mut T, usize)> =
            vecs.iter_mut().map(|v| (v.as_mut_ptr(), v.len())).collect();
        let owner = Box::new(vecs);
        // SAFETY: each segment is the buffer of a vector that `owner` owns
        // (moving the outer vector into the box does not move them), nothing
        // else can reach those vectors until `into_owner` returns them, and
        // distinct vectors never overlap, so `new` cannot refuse them either.
        let lent = unsafe { Self::new(&segments, owner) };
        lent.unwrap_or_else(|_| unreachable!("vectors are aligned and disjoint"))
    }

    /// The segments as slices of `T`; `None` when the elements are another type.
    pub(crate) fn segments_mut<T: collectives::Element>(&mut self) -> Option<Vec<&mut [T]>> {
        if T::DTYPE != self.dtype {
            return None;
        }
        let out = self
            .segments
            .iter()
            .map(|&(at, len)| {
                // SAFETY: `new`'s contract: each segment is valid, aligned
                // (checked there) memory of `len` elements of this type (the
                // dtype just matched), owned by nobody else while this value
                // lives, and the segments do not overlap (checked there); the
                // slices borrow `self` mutably, so no two calls hand them out
                // at once.
                unsafe { std::slice::from_raw_parts_mut(at as *mut T, len) }
            })
            .collect();
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lent_vectors_come_back_as_they_went() {
        let mut l = LentHost::from_vecs(vec![vec![1.0f32, 2.0], vec![], vec![3.0]]);
        assert_eq!((l.len(), l.dtype()), (3, collectives::DType::F32));
        assert!(l.segments_mut::<f64>().is_none(), "another element type");
        for s in l.segments_mut::<f32>().unwrap() {
            s.iter_mut().for_each(|x| *x *= 10.0);
        }
        let back = l.into_owner().downcast::<Vec<Vec<f32>>>().unwrap();
        assert_eq!(*back, vec![vec![10.0, 20.0], vec![], vec![30.0]]);
    }

    #[test]
    fn overlapping_or_misaligned_segments_are_refused() {
        let mut v = vec![0i32; 8];
        let p = v.as_mut_ptr();
        // SAFETY: refused before anything is touched; `v` outlives the call.
        let overlap = unsafe { LentHost::new(&[(p, 4), (p.wrapping_add(3), 2)], Box::new(())) };
        assert_eq!(overlap.unwrap_err(), LendError::Overlap { a: 0, b: 1 });
        let odd = p.cast::<u8>().wrapping_add(1).cast::<i32>();
        // SAFETY: as above.
        let misaligned = unsafe { LentHost::new(&[(odd, 1)], Box::new(())) };
        assert!(matches!(
            misaligned,
            Err(LendError::Misaligned { index: 0, .. })
        ));
        // SAFETY: as above.
        let null = unsafe { LentHost::new(&[(std::ptr::null_mut::<i32>(), 1)], Box::new(())) };
        assert_eq!(null.unwrap_err(), LendError::Null { index: 0 });
        // Touching, or empty, segments are fine.
        // SAFETY: `v` outlives the value, which nothing reads.
        let ok = unsafe { LentHost::new(&[(p, 4), (p.wrapping_add(4), 4), (p, 0)], Box::new(())) };
        assert_eq!(ok.map(|l| l.len()), Ok(8));
        drop(v);
    }
}
