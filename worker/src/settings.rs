//! The engine settings a worker runs with, from the knobs its coordinator
//! handed out (the defaults when it runs alone).

use std::sync::Arc;
use std::time::Duration;

use collectives::Hierarchy;
use control::Knobs;

use crate::engine::{AutotuneSetup, EngineConfig, TimelineConfig, TuningMemory};

/// The engine settings the coordinator handed out (defaults alone), on a
/// layout with host grid `grid`; `memory` keeps the autotune samples across
/// generations.
pub(crate) fn engine_config(
    knobs: Option<&Knobs>,
    grid: Option<Arc<Hierarchy>>,
    memory: &TuningMemory,
) -> EngineConfig {
    let Some(k) = knobs else {
        return EngineConfig::default();
    };
    let t = &k.tuning;
    EngineConfig {
        cycle_time: Duration::from_micros(t.cycle_time_us),
        cache_capacity: if t.cache_enabled {
            k.cache_capacity as usize
        } else {
            0
        },
        fusion_threshold_bytes: usize::try_from(t.fusion_threshold_bytes).unwrap_or(usize::MAX),
        timeline: k.timeline.as_ref().map(|path| TimelineConfig {
            path: path.into(),
            mark_cycles: k.timeline_mark_cycles,
        }),
        autotune: k.autotune.as_ref().map(|a| autotune_setup(a, memory)),
        hierarchy: grid,
        ..EngineConfig::default()
    }
}

/// The engine's autotuner settings from the coordinator's.
fn autotune_setup(a: &control::Autotune, memory: &TuningMemory) -> AutotuneSetup {
    let fixed = a.fixed.clone();
    AutotuneSetup {
        config: autotune::TunerConfig {
            warmup_samples: a.warmup_samples as usize,
            steps_per_sample: u64::from(a.steps_per_sample),
            max_samples: a.max_samples as usize,
            gp_noise: a.gaussian_process_noise,
            seed: 0,
        },
        fixed,
        log_file: a.log_file.as_ref().map(Into::into),
        memory: memory.clone(),
    }
}
