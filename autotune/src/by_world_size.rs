//! Tuning per world size, for elastic jobs.
//!
//! The best knobs depend on the ring: values measured with 8 ranks say little about
//! 6. [`Memory`] keeps, for every world size the job has run at, the samples taken
//! there (warm-up ones included, as logged). It holds records only, so every rank can
//! keep an identical replica from the samples rank 0 announces, and whichever rank is
//! rank 0 after a membership change resumes from the same knowledge.
//!
//! [`Memory::tuner_for`] gives the tuner for a world size: a size never seen starts
//! fresh from the caller's starting point; a size seen before resumes with its
//! samples in the model, from its best point (after a fresh warm-up); a size whose
//! budget was spent starts, and stays, final at its best point, so returning to it
//! costs no tuning at all.

use std::collections::BTreeMap;

use crate::{AutotuneError, SampleRecord, Space, Tuner, TunerConfig};

/// Samples per world size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    sizes: BTreeMap<usize, Vec<SampleRecord>>,
}

impl Memory {
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Adds one completed sample taken at `world_size`.
    pub fn record(&mut self, world_size: usize, sample: SampleRecord) {
        self.sizes.entry(world_size).or_default().push(sample);
    }

    /// Replaces the record of `world_size` with everything `tuner` has seen (a
    /// resumed tuner carries the earlier records already).
    pub fn save(&mut self, world_size: usize, tuner: &Tuner) {
        self.sizes.insert(world_size, tuner.records().to_vec());
    }

    /// The samples taken at `world_size`, oldest first.
    pub fn records(&self, world_size: usize) -> &[SampleRecord] {
        self.sizes.get(&world_size).map_or(&[], Vec::as_slice)
    }

    /// World sizes with a record, ascending.
    pub fn world_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.sizes.keys().copied()
    }

    /// The tuner to run at `world_size` (see the module doc).
    pub fn tuner_for(
        &self,
        world_size: usize,
        space: Space,
        config: TunerConfig,
    ) -> Result<Tuner, AutotuneError> {
        Tuner::resume(space, config, self.records(world_size))
    }
}
