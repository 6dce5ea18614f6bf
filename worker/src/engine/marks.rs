//! When a fused collective's phases ended, for the timeline.

use std::time::Instant;

/// When a fused group finished packing its fusion buffer and when its
/// collective finished (unset for a tensor that ran alone): the timeline's
/// memcpy phases.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    pub(crate) packed: Option<Instant>,
    pub(crate) reduced: Option<Instant>,
}
