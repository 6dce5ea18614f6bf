//! Rank 0's autotuner inside the engine: every negotiation round that ran
//! collectives is one step of the `autotune` crate's [`Tuner`] (its bytes
//! and the wall time since the previous such round); when a sample completes,
//! the next values and the sample go out in rank 0's negotiation message
//! ([`super::messages::RankMsg::retune`], [`super::messages::RankMsg::sample`]),
//! so every rank switches after the same round and adds the sample to its
//! replica of the per-world-size [`TuningMemory`]. One CSV row per sample goes
//! to the log file; at the final decision the chosen values are written beside
//! it as `--config-file` YAML.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use autotune::{Decision, Knob, Layout, Memory, SampleRecord, Space, Tuner, TunerConfig};
use collectives::Hierarchy;

use super::messages::Tuning;

/// What an autotuned job's engines need (every rank: rank 0 tunes, the
/// others keep the memory replica).
#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneSetup {
    pub config: TunerConfig,
    /// Knobs held at their starting values.
    pub fixed: Vec<Knob>,
    pub log_file: Option<PathBuf>,
    /// Samples per world size, kept across the generations of an elastic job.
    pub memory: TuningMemory,
}

/// A worker's replica of the autotune samples per world size, shared by the
/// engines of its successive generations. Every rank records the samples
/// rank 0 announces, so a survivor that becomes rank 0 resumes from the same
/// knowledge.
#[derive(Clone, Debug, Default)]
pub struct TuningMemory(Arc<Mutex<Memory>>);

impl PartialEq for TuningMemory {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl TuningMemory {
    /// A copy of what is remembered now.
    pub fn snapshot(&self) -> Memory {
        self.lock().clone()
    }

    pub(super) fn record(&self, world_size: usize, sample: SampleRecord) {
        self.lock().record(world_size, sample);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        // A panic while holding the lock cannot leave a half-pushed Vec.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
pub(super) struct Autotuner {
    tuner: Tuner,
    world_size: usize,
    log: Option<(PathBuf, std::fs::File)>,
    steps: u64,
    last: Instant,
}

/// What a completed sample asks of the engine.
pub(super) struct Step {
    /// The settings every rank switches to, when they change.
    pub retune: Option<Tuning>,
    pub sample: SampleRecord,
}

impl Autotuner {
    /// Starts tuning at `world_size` from `start` (the engine's configured
    /// values), or resumes from what the memory holds for that size.
    pub(super) fn new(
        setup: &AutotuneSetup,
        start: Tuning,
        layout: Layout,
        world_size: usize,
    ) -> Result<Autotuner, String> {
        let space = Space::new(start, &setup.fixed, layout);
        let tuner = setup
            .memory
            .lock()
            .tuner_for(world_size, space, setup.config)
            .map_err(|e| e.to_string())?;
        let log = match &setup.log_file {
            Some(path) => Some((path.clone(), open_log(path)?)),
            None => None,
        };
        Ok(Autotuner {
            tuner,
            world_size,
            log,
            steps: 0,
            last: Instant::now(),
        })
    }

    /// The settings to run with from the start (a resumed world size starts
    /// at its best point so far).
    pub(super) fn current(&self) -> Tuning {
        self.tuner.current()
    }

    /// A round that ran collectives over `bytes` ended at `now`; returns what
    /// a completed sample asks for.
    pub(super) fn round(&mut self, bytes: u64, now: Instant) -> Option<Step> {
        let seconds = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.steps += 1;
        let before = self.tuner.current();
        let decision = self.tuner.record(self.steps, bytes, seconds)?;
        self.log_sample(&decision);
        let next = decision.knobs();
        Some(Step {
            retune: (next != before).then_some(next),
            sample: *decision.sample(),
        })
    }

    fn log_sample(&mut self, d: &Decision) {
        let Some((path, f)) = &mut self.log else {
            return;
        };
        let row = autotune::csv_row(d.sample(), self.world_size);
        if let Err(e) = f.write_all(row.as_bytes()) {
            tracing::warn!(%e, path = %path.display(), "cannot write the autotune log");
        }
        if let Decision::Final { best, .. } = d {
            let yaml = path.with_extension("params.yaml");
            if let Err(e) = std::fs::write(&yaml, autotune::params_yaml(best)) {
                tracing::warn!(%e, path = %yaml.display(), "cannot write the chosen values");
            }
        }
    }
}

/// The log, appended to (an elastic job's later generations go on with the
/// same file), with the header written once.
fn open_log(path: &PathBuf) -> Result<std::fs::File, String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    if f.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
        f.write_all(autotune::csv_header().as_bytes())
            .map_err(|e| e.to_string())?;
    }
    Ok(f)
}

/// The layout as the autotuner's space sees it.
pub(super) fn layout(hierarchy: Option<&Hierarchy>) -> Layout {
    match hierarchy {
        Some(h) => Layout {
            hosts: h.cross_size(),
            max_local_size: h.local_size(),
        },
        None => Layout {
            hosts: 1,
            max_local_size: 1,
        },
    }
}
