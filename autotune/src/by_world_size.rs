//! Tuning per world size, for elastic jobs.
//!
//! The best knobs depend on the ring: values measured with 8 ranks say little about
//! 6. [`Memory`] keeps, for every world size the job has run at, the samples taken
//! there. On a membership change the driver saves the running tuner under the old
//! size and asks for a tuner for the new one: a size never seen starts fresh from the
//! caller's starting point; a size seen before resumes with its samples in the model,
//! from its best point (after a fresh warm-up); a size whose budget was spent starts,
//! and stays, final at its best point, so returning to it costs no tuning at all.

use std::collections::BTreeMap;

use crate::{AutotuneError, Knobs, SampleRecord, Space, Tuner, TunerConfig};

/// Samples and best point per world size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    sizes: BTreeMap<usize, WorldRecord>,
}

/// What one world size has taught.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorldRecord {
    /// Every completed sample at this size, warm-up ones included.
    pub records: Vec<SampleRecord>,
    /// The best point and its estimated score, if any sample was scored.
    pub best: Option<(Knobs, f64)>,
    /// Whether the sample budget was spent at this size.
    pub finished: bool,
}

impl Memory {
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Stores what `tuner` has learned as the record of `world_size`, replacing the
    /// previous one (a resumed tuner carries the earlier records already).
    pub fn save(&mut self, world_size: usize, tuner: &Tuner) {
        let record = WorldRecord {
            records: tuner.records().to_vec(),
            best: tuner.best(),
            finished: tuner.is_done(),
        };
        self.sizes.insert(world_size, record);
    }

    pub fn get(&self, world_size: usize) -> Option<&WorldRecord> {
        self.sizes.get(&world_size)
    }

    /// The best known knobs for `world_size`.
    pub fn best(&self, world_size: usize) -> Option<Knobs> {
        self.get(world_size).and_then(|r| r.best).map(|b| b.0)
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
        match self.get(world_size) {
            None => Tuner::new(space, config),
            Some(r) => Tuner::resume(space, config, &r.records),
        }
    }
}
