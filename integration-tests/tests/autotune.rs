//! `elasticrun --autotune`: rank 0 tunes fusion, cycle time and the cache
//! while `train` runs, logs every sample, writes the chosen values as
//! `--config-file` YAML, and never moves a knob the user set.

use std::time::Duration;

use integration_tests::elastic::Scratch;
use integration_tests::{launch, train};

#[test]
fn autotune_logs_samples_keeps_user_knobs_and_the_job_still_learns() {
    let s = Scratch::new("autotune");
    let log = s.dir.join("autotune.csv");
    let train = train();
    let run = launch(&[
        "-np",
        "2",
        "--autotune",
        "--autotune-log-file",
        log.to_str().unwrap(),
        "--autotune-warmup-samples",
        "1",
        "--autotune-steps-per-sample",
        "5",
        "--autotune-bayes-opt-max-samples",
        "4",
        "--cycle-time-ms",
        "2",
        train.to_str().unwrap(),
        "--epochs",
        "2",
    ])
    .finish(Duration::from_secs(60));
    run.expect_code(0);
    let done = run.done_event();
    assert!(done["accuracy"].as_f64().unwrap() > 0.9, "{done}");
    let csv = std::fs::read_to_string(&log).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header, autotune::CSV_COLUMNS, "{csv}");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // One warm-up sample and four scored ones.
    assert_eq!(rows.len(), 5, "{csv}");
    let col = |name: &str| header.iter().position(|c| *c == name).unwrap();
    assert_eq!(rows[0][col("warmup")], "true", "{csv}");
    assert!(
        rows[1..].iter().all(|r| r[col("warmup")] == "false"),
        "{csv}"
    );
    // --cycle-time-ms was set: it never moves.
    assert!(
        rows.iter().all(|r| r[col("cycle_time_us")] == "2000"),
        "{csv}"
    );
    assert!(
        rows.iter()
            .all(|r| r[col("score_bytes_per_s")].parse::<f64>().unwrap() > 0.0),
        "{csv}"
    );
    let yaml = std::fs::read_to_string(log.with_extension("params.yaml")).unwrap();
    assert!(yaml.contains("cycle_time_ms: 2\n"), "{yaml}");
    // The chosen values are a config file elasticrun accepts.
    let cfg = s.write("chosen.yaml", &yaml);
    let again = launch(&[
        "--config-file",
        cfg.to_str().unwrap(),
        "-np",
        "1",
        train.to_str().unwrap(),
        "--epochs",
        "1",
    ])
    .finish(Duration::from_secs(60));
    again.expect_code(0);
}
