//! The final JSON line rank 0 prints: throughput, the workload, and the engine
//! settings and counters it ran with.

use std::time::Duration;

use serde_json::{Value, json};
use worker::{EngineConfig, EngineStats, Worker};

use crate::plan::Plan;

/// What a run measured, with what it ran on.
#[derive(Debug)]
pub(crate) struct Outcome<'a> {
    pub(crate) plan: &'a Plan,
    pub(crate) world_size: usize,
    /// Each timed step, from its first submission to its last result.
    pub(crate) step_times: &'a [Duration],
    /// The engine settings in effect (see [`knobs`]).
    pub(crate) knobs: Value,
    /// The engine's counters over the whole run (warm-up steps and the
    /// barriers included); `None` when it did not stop cleanly.
    pub(crate) engine: Option<EngineStats>,
}

/// The engine settings `w` runs with: elasticrun's knobs, or the engine's
/// defaults for a process running alone.
pub(crate) fn knobs(w: &Worker) -> Value {
    if let Some(k) = w.knobs() {
        return flat(serde_json::to_value(k).unwrap_or(Value::Null));
    }
    let d = EngineConfig::default();
    json!({
        "fusion_threshold_bytes": d.fusion_threshold_bytes,
        "cycle_time_us": d.cycle_time.as_micros(),
        "cache_capacity": d.cache_capacity,
    })
}

/// The knobs with their tunable part (`tuning`) among the others: one
/// flat object, as the report has always had them.
fn flat(mut knobs: Value) -> Value {
    if let Some(obj) = knobs.as_object_mut()
        && let Some(Value::Object(tuning)) = obj.remove("tuning")
    {
        obj.extend(tuning);
    }
    knobs
}

/// The middle value (the lower of the two middle ones for an even count).
fn median(times: &[Duration]) -> Duration {
    let mut t = times.to_vec();
    t.sort_unstable();
    t.get(t.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The JSON summary: `steps_per_sec` counts timed steps over their total time,
/// `bytes_per_sec` the gradient bytes each rank had averaged per second.
pub(crate) fn summary(o: &Outcome<'_>) -> Value {
    let p = o.plan;
    let total: Duration = o.step_times.iter().sum();
    let secs = total.as_secs_f64();
    let steps_per_sec = if secs > 0.0 {
        o.step_times.len() as f64 / secs
    } else {
        0.0
    };
    let total_bytes = p.step_bytes();
    let engine = o.engine.map_or(Value::Null, |e| {
        json!({
            "rounds": e.rounds,
            "cache_hits": e.cache_hits,
            "collectives": e.collectives,
            "tensors": e.tensors,
        })
    });
    json!({
        "event": "done",
        "benchmark": "synthetic",
        "model": p.workload.name(),
        "dtype": p.precision.name(),
        "world_size": o.world_size,
        "num_tensors": p.tensors.len(),
        "total_bytes": total_bytes,
        "warmup_steps": p.warmup_steps,
        "steps": o.step_times.len(),
        "compute_ms": ms(p.compute),
        "seconds": secs,
        "steps_per_sec": steps_per_sec,
        "bytes_per_sec": steps_per_sec * total_bytes as f64,
        "step_ms": {
            "median": ms(median(o.step_times)),
            "min": ms(o.step_times.iter().min().copied().unwrap_or_default()),
            "max": ms(o.step_times.iter().max().copied().unwrap_or_default()),
        },
        "checked": true,
        "knobs": o.knobs,
        "engine": engine,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Precision, Workload};

    #[test]
    fn throughput_is_steps_and_bytes_over_the_timed_steps() {
        let w = Workload::Uniform {
            count: 10,
            bytes: 4096,
        };
        let plan = Plan::new(w, Precision::F32, 1, 4, 0.0).unwrap();
        let times = [10, 30, 20, 40].map(Duration::from_millis);
        let stats = EngineStats {
            collectives: 5,
            tensors: 50,
            ..EngineStats::default()
        };
        let v = summary(&Outcome {
            plan: &plan,
            world_size: 2,
            step_times: &times,
            knobs: json!({"cycle_time_us": 1000}),
            engine: Some(stats),
        });
        assert_eq!(v["steps"], 4);
        assert_eq!(v["num_tensors"], 10);
        assert_eq!(v["total_bytes"], 40960);
        assert!((v["steps_per_sec"].as_f64().unwrap() - 40.0).abs() < 1e-9);
        assert!((v["bytes_per_sec"].as_f64().unwrap() - 40.0 * 40960.0).abs() < 1e-6);
        assert!((v["step_ms"]["median"].as_f64().unwrap() - 20.0).abs() < 1e-9);
        assert_eq!(v["engine"]["tensors"], 50);
        assert_eq!(v["knobs"]["cycle_time_us"], 1000);
    }

    #[test]
    fn the_median_of_nothing_is_zero() {
        assert_eq!(median(&[]), Duration::ZERO);
        let one = [Duration::from_millis(3)];
        assert_eq!(median(&one), one[0]);
    }
}
