//! The host's room: tensors in host memory (the engine's own, or lent by the
//! program), collectives on the data plane, fused groups packed into the
//! engine's [`FusionBuffer`].

use std::ops::Range;

use collectives::{Collectives, Element, Host};

use super::{Kind, Result, Room};
use crate::engine::error::EngineError;
use crate::engine::fusion_buffer::FusionBuffer;
use crate::engine::tensor::{Held, Storage, Submission};

/// The data plane's collectives and the fusion buffer kept across cycles.
#[derive(Debug)]
pub(in crate::engine) struct HostRoom<'a, B> {
    pub(in crate::engine) comm: &'a B,
    pub(in crate::engine) fusion: &'a mut FusionBuffer,
}

impl<B: Collectives<Host>> Room for HostRoom<'_, B> {
    type Mem = Host;
    type Comm = B;
    type Held<T: Element> = Held<T>;

    fn comm(&self) -> &B {
        self.comm
    }

    fn refusal(_: Kind, _: usize, _: usize) -> Option<EngineError> {
        None
    }

    fn take<T: Element>(s: &mut Submission) -> Result<Held<T>> {
        s.take_held::<T>()
    }

    fn segments<T: Element>(h: &mut Held<T>) -> Vec<&mut [T]> {
        h.segments()
    }

    fn whole<T: Element>(h: Held<T>) -> Vec<T> {
        h.into_vec()
    }

    fn slice<T: Element>(o: &Vec<T>) -> &[T] {
        o
    }

    fn slice_mut<T: Element>(o: &mut Vec<T>) -> &mut [T] {
        o
    }

    fn count<T: Element>(s: &[T]) -> usize {
        s.len()
    }

    fn give_held<T: Element>(h: Held<T>) -> Storage {
        h.into_storage()
    }

    fn give<T: Element>(o: Vec<T>) -> Storage {
        o.into()
    }

    fn scratch<T: Element>(&mut self, len: usize) -> Result<Vec<T>> {
        Ok(self.fusion.take::<T>(len))
    }

    fn scratch_of<T: Element>(&mut self, len: usize) -> Result<Vec<T>> {
        let mut v = self.fusion.take::<T>(len);
        v.resize(len, T::zeroed());
        Ok(v)
    }

    fn zeros<T: Element>(&self, len: usize) -> Result<Vec<T>> {
        Ok(vec![T::zeroed(); len])
    }

    fn put_back<T: Element>(&mut self, o: Vec<T>) {
        self.fusion.put_back(o);
    }

    fn concat<T: Element>(&self, mut parts: Vec<Vec<T>>, total: usize) -> Result<Vec<T>> {
        if parts.len() == 1 {
            return Ok(parts.pop().unwrap_or_default());
        }
        let mut all = Vec::with_capacity(total);
        parts.iter().for_each(|p| all.extend_from_slice(p));
        Ok(all)
    }

    fn pick<T: Element>(&self, from: &Vec<T>, ranges: &[Range<usize>]) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(ranges.iter().map(Range::len).sum());
        ranges
            .iter()
            .for_each(|r| out.extend_from_slice(&from[r.clone()]));
        Ok(out)
    }

    fn keep<T: Element>(&self, o: Vec<T>, range: Range<usize>) -> Result<Vec<T>> {
        Ok(o[range].to_vec())
    }

    fn average<T: Element>(&self, sums: &mut [Vec<&mut [T]>], active: usize) -> Result<()> {
        sums.iter_mut()
            .flatten()
            .for_each(|s| average_over(s, active));
        Ok(())
    }
}

/// A sum over `active` ranks turned into their average.
fn average_over<T: Element>(sum: &mut [T], active: usize) {
    if T::DTYPE.is_float() {
        T::scale(sum, 1.0 / active.max(1) as f64);
    } else {
        T::divide(sum, active.max(1));
    }
}
