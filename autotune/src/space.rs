//! The knob space: which knobs are tuned, their ranges, and the map between a
//! [`Tuning`] value and a point of the unit hypercube the Gaussian process works in.
//!
//! ```text
//!  Tuning ──encode──▶ [ cache, fusion_on, h_allreduce, h_allgather │ fusion, cycle, segment ] ∈ [0,1]^d
//!        ◀─decode──   categorical: 0 or 1                         │ continuous: log scale
//! ```
//!
//! Only tuned knobs get a coordinate; a fixed knob (set by the user) is held at its
//! value by `decode`. Ranges, all on a log scale so that each doubling weighs the same:
//!
//! | knob | range | grid |
//! |---|---|---|
//! | fusion threshold | off, or 1 MiB ..= 256 MiB | 64 KiB |
//! | cycle time | 0.1 ms ..= 100 ms | 1 µs |
//! | segment size | 64 KiB ..= 16 MiB | 4 KiB |
//! | response cache | on / off | |
//! | hierarchical allreduce, allgather | on / off, only when the job spans more than one host with more than one slot | |
//!
//! Fusion "off" (threshold 0) is a categorical level (`fusion_on` = 0) that makes the
//! fusion coordinate inactive: every "off" point encodes its fusion coordinate as 0,
//! so all of them are one point to the kernel. Decoding rounds every value to its grid
//! and `snap` re-encodes the rounded value, so the Gaussian process only ever sees
//! values the engine can actually run (the "transform inside the kernel" of
//! Garrido-Merchán & Hernández-Lobato 2020).

use crate::{
    AutotuneError, CYCLE_MAX_US, CYCLE_MIN_US, FUSION_GRID_BYTES, FUSION_MAX_BYTES,
    FUSION_MIN_BYTES, Knob, Layout, SEGMENT_GRID_BYTES, SEGMENT_MAX_BYTES, SEGMENT_MIN_BYTES,
    Tuning,
};

/// One coordinate of an encoded point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    ResponseCache,
    /// 1 = fusion on (threshold in range), 0 = off (threshold 0).
    FusionEnabled,
    HierarchicalAllreduce,
    HierarchicalAllgather,
    /// log of the threshold over [`FUSION_MIN_BYTES`, `FUSION_MAX_BYTES`]; 0 when off.
    FusionThreshold,
    /// log of the cycle time over [`CYCLE_MIN_US`, `CYCLE_MAX_US`].
    CycleTime,
    /// log of the segment over [`SEGMENT_MIN_BYTES`, `SEGMENT_MAX_BYTES`].
    SegmentSize,
}

impl Dim {
    pub fn is_categorical(self) -> bool {
        matches!(
            self,
            Dim::ResponseCache
                | Dim::FusionEnabled
                | Dim::HierarchicalAllreduce
                | Dim::HierarchicalAllgather
        )
    }
}

/// The tuned knobs, their order in the encoding, and the values of the others.
#[derive(Clone, Debug, PartialEq)]
pub struct Space {
    initial: Tuning,
    dims: Vec<Dim>,
}

impl Space {
    /// `initial` is where tuning starts (and what every fixed or inapplicable knob is
    /// held at); `fixed` lists the knobs the user set explicitly.
    pub fn new(initial: Tuning, fixed: &[Knob], layout: Layout) -> Space {
        let tuned = |k: Knob| !fixed.contains(&k);
        let hier = layout.hierarchical_applies();
        let candidates = [
            (Dim::ResponseCache, tuned(Knob::Cache)),
            (Dim::FusionEnabled, tuned(Knob::FusionThreshold)),
            (
                Dim::HierarchicalAllreduce,
                hier && tuned(Knob::HierarchicalAllreduce),
            ),
            (
                Dim::HierarchicalAllgather,
                hier && tuned(Knob::HierarchicalAllgather),
            ),
            (Dim::FusionThreshold, tuned(Knob::FusionThreshold)),
            (Dim::CycleTime, tuned(Knob::CycleTime)),
            (Dim::SegmentSize, tuned(Knob::SegmentSize)),
        ];
        let dims = candidates.iter().filter(|c| c.1).map(|c| c.0).collect();
        Space { initial, dims }
    }

    pub fn initial(&self) -> Tuning {
        self.initial
    }

    /// The coordinates, categorical ones first.
    pub fn dims(&self) -> &[Dim] {
        &self.dims
    }

    /// Indices of the categorical coordinates.
    pub fn categorical(&self) -> Vec<usize> {
        (0..self.dims.len())
            .filter(|&i| self.dims[i].is_categorical())
            .collect()
    }

    /// Indices of the continuous coordinates.
    pub fn continuous(&self) -> Vec<usize> {
        (0..self.dims.len())
            .filter(|&i| !self.dims[i].is_categorical())
            .collect()
    }

    /// Whether `knob` moves during tuning.
    pub fn is_tuned(&self, knob: Knob) -> bool {
        let dim = match knob {
            Knob::FusionThreshold => Dim::FusionThreshold,
            Knob::CycleTime => Dim::CycleTime,
            Knob::Cache => Dim::ResponseCache,
            Knob::HierarchicalAllreduce => Dim::HierarchicalAllreduce,
            Knob::HierarchicalAllgather => Dim::HierarchicalAllgather,
            Knob::SegmentSize => Dim::SegmentSize,
        };
        self.dims.contains(&dim)
    }

    /// Whether every knob that is not tuned has its held value in `k`.
    pub fn holds_fixed(&self, k: &Tuning) -> bool {
        let init = &self.initial;
        let same = |knob: Knob, eq: bool| self.is_tuned(knob) || eq;
        same(
            Knob::FusionThreshold,
            k.fusion_threshold_bytes == init.fusion_threshold_bytes,
        ) && same(Knob::CycleTime, k.cycle_time_us == init.cycle_time_us)
            && same(Knob::Cache, k.cache_enabled == init.cache_enabled)
            && same(
                Knob::HierarchicalAllreduce,
                k.hierarchical_allreduce == init.hierarchical_allreduce,
            )
            && same(
                Knob::HierarchicalAllgather,
                k.hierarchical_allgather == init.hierarchical_allgather,
            )
            && same(Knob::SegmentSize, k.segment_bytes == init.segment_bytes)
    }

    /// The unit-hypercube point of `k` (values outside a range clamp to its end).
    pub fn encode(&self, k: &Tuning) -> Vec<f64> {
        let on = |b: bool| if b { 1.0 } else { 0.0 };
        let fusion = k.fusion_threshold_bytes;
        self.dims
            .iter()
            .map(|d| match d {
                Dim::ResponseCache => on(k.cache_enabled),
                Dim::FusionEnabled => on(fusion > 0),
                Dim::HierarchicalAllreduce => on(k.hierarchical_allreduce),
                Dim::HierarchicalAllgather => on(k.hierarchical_allgather),
                Dim::FusionThreshold if fusion == 0 => 0.0,
                Dim::FusionThreshold => to_unit(fusion, FUSION_MIN_BYTES, FUSION_MAX_BYTES),
                Dim::CycleTime => to_unit(k.cycle_time_us, CYCLE_MIN_US, CYCLE_MAX_US),
                Dim::SegmentSize => to_unit(k.segment_bytes, SEGMENT_MIN_BYTES, SEGMENT_MAX_BYTES),
            })
            .collect()
    }

    /// The knobs at point `u`: categorical coordinates round at 0.5, continuous ones
    /// map back through the log scale and round to their grid; untuned knobs keep
    /// their initial value. Coordinates outside [0, 1] (or NaN) are clamped (NaN to 0).
    pub fn decode(&self, u: &[f64]) -> Result<Tuning, AutotuneError> {
        if u.len() != self.dims.len() {
            return Err(AutotuneError::DimensionMismatch {
                expected: self.dims.len(),
                got: u.len(),
            });
        }
        let mut k = self.initial;
        let (mut fusion_on, mut fusion_u) = (true, 0.0);
        for (d, &x) in self.dims.iter().zip(u) {
            let x = if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) };
            match d {
                Dim::ResponseCache => k.cache_enabled = x >= 0.5,
                Dim::FusionEnabled => fusion_on = x >= 0.5,
                Dim::HierarchicalAllreduce => k.hierarchical_allreduce = x >= 0.5,
                Dim::HierarchicalAllgather => k.hierarchical_allgather = x >= 0.5,
                Dim::FusionThreshold => fusion_u = x,
                Dim::CycleTime => k.cycle_time_us = from_unit(x, CYCLE_MIN_US, CYCLE_MAX_US, 1),
                Dim::SegmentSize => {
                    k.segment_bytes =
                        from_unit(x, SEGMENT_MIN_BYTES, SEGMENT_MAX_BYTES, SEGMENT_GRID_BYTES);
                }
            }
        }
        // `FusionEnabled` and `FusionThreshold` are both present or both absent.
        if self.is_tuned(Knob::FusionThreshold) {
            k.fusion_threshold_bytes = if fusion_on {
                from_unit(
                    fusion_u,
                    FUSION_MIN_BYTES,
                    FUSION_MAX_BYTES,
                    FUSION_GRID_BYTES,
                )
            } else {
                0
            };
        }
        Ok(k)
    }

    /// `encode(decode(u))`: the point the engine would really run at.
    pub fn snap(&self, u: &[f64]) -> Result<Vec<f64>, AutotuneError> {
        Ok(self.encode(&self.decode(u)?))
    }
}

fn to_unit(v: u64, lo: u64, hi: u64) -> f64 {
    let (v, lo, hi) = ((v.max(1) as f64).ln(), (lo as f64).ln(), (hi as f64).ln());
    ((v - lo) / (hi - lo)).clamp(0.0, 1.0)
}

/// `lo` and `hi` are multiples of `grid`, so the rounded value stays in range.
fn from_unit(x: f64, lo: u64, hi: u64, grid: u64) -> u64 {
    let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
    let v = (l + x * (h - l)).exp();
    let steps = (v / grid as f64).round() as u64;
    (steps * grid).clamp(lo, hi)
}
