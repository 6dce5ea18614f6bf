//! Each rank, from its heartbeats: the per-rank families and the page's
//! ranks.

use elastic::membership::SlotId;
use tokio::time::Instant;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::families::{FloatGauge, RankLabel};
use super::{JobMetrics, Progress, clamp};
use crate::straggler::Window;

/// A rank's series in the per-rank families, each looked up once a
/// generation (when first set: a series shows once it has a value) rather
/// than at every heartbeat (each lookup a lock and a hash; at 10,000 ranks,
/// a tenth of the coordinator's heartbeat CPU). A rank's series are removed
/// only when a generation no longer has the rank, and a generation rebuilds
/// the ranks these are kept with.
#[derive(Clone, Debug, Default)]
pub struct RankGauges {
    steps: Option<Gauge>,
    rate: Option<FloatGauge>,
    step_time: Option<FloatGauge>,
    bytes: Option<FloatGauge>,
    wait: Option<FloatGauge>,
}

/// `label`'s series of `family`, kept in `kept` once looked up.
fn series<'k, M: Clone + Default>(
    kept: &'k mut Option<M>,
    family: &Family<RankLabel, M>,
    label: &RankLabel,
) -> &'k M {
    kept.get_or_insert_with(|| family.get_or_create(label).clone())
}

impl JobMetrics {
    /// Rank `rank` said, at `at`, how far it got (a heartbeat). Returns
    /// the window since its last heartbeat, for the straggler detector.
    pub fn rank_progress(&self, rank: usize, now: Progress, at: Instant) -> Option<Window> {
        let label = RankLabel {
            rank: u32::try_from(rank).ok()?,
        };
        let steps = i64::try_from(now.steps).unwrap_or(i64::MAX);
        let mut view = self.view();
        let Some(r) = view.ranks.get_mut(rank) else {
            // Not in the generation the page shows yet.
            self.0.f.rank_steps.get_or_create(&label).set(steps);
            return None;
        };
        let (f, g) = (&self.0.f, r.gauges.get_or_insert_with(RankGauges::default));
        series(&mut g.steps, &f.rank_steps, &label).set(steps);
        r.steps = now.steps;
        let (then, before) = r.last.replace((at, now))?;
        let span = at.saturating_duration_since(then);
        let secs = span.as_secs_f64();
        if secs <= 0.0 {
            return None;
        }
        if let Some(bytes) = now.collective_bytes.checked_sub(before.collective_bytes) {
            let rate = bytes as f64 / secs;
            series(&mut g.bytes, &f.rank_bytes, &label).set(rate);
            r.collective_bytes_per_second = Some(rate);
        }
        let waited = now.collective_wait.checked_sub(before.collective_wait);
        if let Some(waited) = waited {
            let share = waited.as_secs_f64() / secs;
            series(&mut g.wait, &f.rank_wait, &label).set(share);
            r.collective_wait_ratio = Some(share);
        }
        // A rollback (fewer steps) says nothing of the rate.
        let steps = now.steps.checked_sub(before.steps)?;
        let rate = steps as f64 / secs;
        series(&mut g.rate, &f.rank_rate, &label).set(rate);
        r.steps_per_second = Some(rate);
        let busy = span.saturating_sub(waited.unwrap_or_default());
        if steps > 0 {
            let step = busy.as_secs_f64() / steps as f64;
            series(&mut g.step_time, &f.rank_step_time, &label).set(step);
            r.step_seconds = Some(step);
        }
        Some(Window { steps, busy })
    }

    /// Whether `rank` is a straggler now; `named` counts one more.
    pub fn straggler(&self, rank: usize, is: bool) {
        let Ok(rank32) = u32::try_from(rank) else {
            return;
        };
        let label = RankLabel { rank: rank32 };
        self.0
            .f
            .rank_straggler
            .get_or_create(&label)
            .set(i64::from(is));
        if is {
            self.0.f.stragglers.inc();
        }
        if let Some(r) = self.view().ranks.get_mut(rank) {
            r.straggler = is;
        }
    }

    /// A generation assigned with `ranks`.
    pub fn generation(&self, generation: u64, ranks: &[SlotId]) {
        let size = ranks.len();
        let mut view = self.view();
        // Ranks the new generation does not have are gone; every rank's
        // rates start afresh (a rank may be another worker).
        for rank in size..view.ranks.len() {
            self.0
                .f
                .forget_rank(u32::try_from(rank).unwrap_or(u32::MAX));
        }
        for rank in 0..size {
            let label = RankLabel {
                rank: u32::try_from(rank).unwrap_or(u32::MAX),
            };
            self.0.f.rank_straggler.get_or_create(&label).set(0);
        }
        let hosts: Vec<(String, u32)> = ranks.iter().map(|s| (s.host.clone(), s.slot)).collect();
        view.generation(generation, &hosts, Instant::now());
        drop(view);
        let f = &self.0.f;
        f.generation
            .set(i64::try_from(generation).unwrap_or(i64::MAX));
        f.world_size.set(clamp(size));
    }
}
