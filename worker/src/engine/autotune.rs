//! Rank 0's autotuner inside the engine: every negotiation round that ran
//! collectives is one step of the `autotune` crate's [`Tuner`] (its bytes
//! and the wall time since the previous such round); when a sample completes,
//! the next values go out in rank 0's negotiation message
//! ([`super::request::RankMsg::retune`]), so every rank switches after the
//! same round. One CSV row per sample goes to the log file; at the final
//! decision the chosen values are written beside it as `--config-file` YAML.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use autotune::{Decision, Knob, Knobs, Layout, Space, Tuner, TunerConfig};

use super::request::Tuning;

/// What rank 0's engine needs to autotune.
#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneSetup {
    pub config: TunerConfig,
    /// Knobs held at their starting values.
    pub fixed: Vec<Knob>,
    pub log_file: Option<PathBuf>,
}

/// The knobs the engine can switch while it runs; the others are held.
const SWITCHABLE: [Knob; 3] = [Knob::FusionThreshold, Knob::CycleTime, Knob::ResponseCache];

#[derive(Debug)]
pub(super) struct Autotuner {
    tuner: Tuner,
    log: Option<(PathBuf, std::fs::File)>,
    steps: u64,
    last: Instant,
}

impl Autotuner {
    /// Starts tuning from `start` (the engine's configured values).
    pub(super) fn new(setup: &AutotuneSetup, start: Tuning) -> Result<Autotuner, String> {
        let initial = Knobs {
            fusion_threshold_bytes: start.fusion_threshold_bytes,
            cycle_time_us: start.cycle_time_us,
            cache_enabled: start.cache_enabled,
            ..Knobs::default()
        };
        let mut fixed: Vec<Knob> = Knob::ALL
            .into_iter()
            .filter(|k| !SWITCHABLE.contains(k))
            .collect();
        fixed.extend(setup.fixed.iter().copied());
        let layout = Layout {
            hosts: 1,
            max_local_size: 1,
        };
        let space = Space::new(initial, &fixed, layout);
        let tuner = Tuner::new(space, setup.config).map_err(|e| e.to_string())?;
        let log = match &setup.log_file {
            Some(path) => {
                // Appended to: an elastic job's later generations go on with
                // the same log.
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                if f.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
                    f.write_all(autotune::csv_header().as_bytes())
                        .map_err(|e| e.to_string())?;
                }
                Some((path.clone(), f))
            }
            None => None,
        };
        Ok(Autotuner {
            tuner,
            log,
            steps: 0,
            last: Instant::now(),
        })
    }

    /// A round that ran collectives over `bytes` ended at `now`; returns the
    /// settings to switch every rank to, when they change.
    pub(super) fn round(&mut self, bytes: u64, now: Instant) -> Option<Tuning> {
        let seconds = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.steps += 1;
        let before = self.tuner.current();
        let decision = self.tuner.record(self.steps, bytes, seconds)?;
        self.log_sample(&decision);
        let next = decision.knobs();
        (next != before).then_some(Tuning {
            fusion_threshold_bytes: next.fusion_threshold_bytes,
            cycle_time_us: next.cycle_time_us,
            cache_enabled: next.cache_enabled,
        })
    }

    fn log_sample(&mut self, d: &Decision) {
        let Some((path, f)) = &mut self.log else {
            return;
        };
        if let Err(e) = f.write_all(autotune::csv_row(d.sample()).as_bytes()) {
            tracing::warn!(%e, path = %path.display(), "cannot write the autotune log");
        }
        if let Decision::Final { best, .. } = d {
            let yaml = path.with_extension("params.yaml");
            if let Err(e) = std::fs::write(&yaml, params(best)) {
                tracing::warn!(%e, path = %yaml.display(), "cannot write the chosen values");
            }
        }
    }
}

/// The chosen values as a `--config-file` `params:` section (without the
/// segment size, which the engine does not tune).
fn params(k: &Knobs) -> String {
    autotune::params_yaml(k)
        .lines()
        .filter(|l| !l.trim_start().starts_with("segment_bytes"))
        .map(|l| format!("{l}\n"))
        .collect()
}
