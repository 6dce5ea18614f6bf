//! The autotune log as text: one CSV row per completed sample, and the final knobs
//! as the `params:` section of an `elasticrun --config-file` YAML file. Formatting
//! only; the driver owns the file.
//!
//! ```text
//! fusion_threshold_bytes,cycle_time_us,cache_enabled,hierarchical_allreduce,hierarchical_allgather,segment_bytes,score_bytes_per_s,step,warmup,world_size
//! 67108864,1000,true,false,false,524288,1234567890.5,40,false,4
//! ```

use crate::{SampleRecord, Tuning};

/// The CSV columns, in order.
pub const CSV_COLUMNS: [&str; 10] = [
    "fusion_threshold_bytes",
    "cycle_time_us",
    "cache_enabled",
    "hierarchical_allreduce",
    "hierarchical_allgather",
    "segment_bytes",
    "score_bytes_per_s",
    "step",
    "warmup",
    "world_size",
];

/// The header line, with its newline.
pub fn csv_header() -> String {
    format!("{}\n", CSV_COLUMNS.join(","))
}

/// One sample taken with `world_size` ranks as a CSV line, with its newline.
/// Booleans are `true`/`false`; the score is printed with Rust's shortest round-trip
/// formatting.
pub fn csv_row(r: &SampleRecord, world_size: usize) -> String {
    let k = &r.knobs;
    format!(
        "{},{},{},{},{},{},{},{},{},{}\n",
        k.fusion_threshold_bytes,
        k.cycle_time_us,
        k.cache_enabled,
        k.hierarchical_allreduce,
        k.hierarchical_allgather,
        k.segment_bytes,
        r.score,
        r.step,
        r.warmup,
        world_size
    )
}

/// `k` as a `params:` section for `elasticrun --config-file`, so a resumed job can
/// skip tuning. `fusion_threshold_mb` is in MiB (bytes / 2^20, exact) and
/// `cycle_time_ms` in ms (µs / 1000; multiply by 1000 and round to get the µs back).
pub fn params_yaml(k: &Tuning) -> String {
    format!(
        "params:\n  fusion_threshold_mb: {}\n  cycle_time_ms: {}\n  disable_cache: {}\n  \
         hierarchical_allreduce: {}\n  hierarchical_allgather: {}\n  segment_bytes: {}\n",
        k.fusion_threshold_bytes as f64 / f64::from(1u32 << 20),
        k.cycle_time_us as f64 / 1000.0,
        !k.cache_enabled,
        k.hierarchical_allreduce,
        k.hierarchical_allgather,
        k.segment_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_has_the_documented_columns() {
        assert_eq!(
            csv_header(),
            "fusion_threshold_bytes,cycle_time_us,cache_enabled,hierarchical_allreduce,\
             hierarchical_allgather,segment_bytes,score_bytes_per_s,step,warmup,world_size\n"
        );
    }

    #[test]
    fn row_matches_the_header() {
        let r = SampleRecord {
            knobs: Tuning::default(),
            score: 1_234_567_890.5,
            step: 40,
            warmup: false,
        };
        let row = csv_row(&r, 4);
        assert_eq!(
            row,
            "67108864,1000,true,false,false,524288,1234567890.5,40,false,4\n"
        );
        assert_eq!(row.trim_end().split(',').count(), CSV_COLUMNS.len());
    }

    #[test]
    fn yaml_uses_the_config_file_keys_and_units() {
        let k = Tuning {
            fusion_threshold_bytes: 37 * (1 << 20) + (64 << 10),
            cycle_time_us: 2345,
            cache_enabled: false,
            hierarchical_allreduce: true,
            hierarchical_allgather: false,
            segment_bytes: 1 << 20,
        };
        assert_eq!(
            params_yaml(&k),
            "params:\n  fusion_threshold_mb: 37.0625\n  cycle_time_ms: 2.345\n  disable_cache: true\n  \
             hierarchical_allreduce: true\n  hierarchical_allgather: false\n  segment_bytes: 1048576\n"
        );
        let ms: f64 = "2.345".parse().unwrap();
        assert_eq!((ms * 1000.0).round() as u64, 2345);
        let off = Tuning {
            fusion_threshold_bytes: 0,
            cycle_time_us: 1000,
            ..k
        };
        assert!(params_yaml(&off).contains("fusion_threshold_mb: 0\n  cycle_time_ms: 1\n"));
    }
}
