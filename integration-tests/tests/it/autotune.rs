//! `elasticrun --autotune`: rank 0 tunes the knobs while `train` runs, logs
//! every sample, writes the chosen values as `--config-file` YAML, never
//! moves a knob the user set, and in an elastic job tunes each world size on
//! its own, remembering the sizes it has seen.

use std::path::Path;
use std::time::Duration;

use integration_tests::elastic::{Job, Scratch, Train};
use integration_tests::{launch, train, wait_for};

/// `--autotune`, logging to `log`, one warm-up sample, then `samples`
/// samples of `steps` steps.
fn autotune<'a>(log: &'a str, steps: &'a str, samples: &'a str) -> [&'a str; 9] {
    [
        "--autotune",
        "--autotune-log-file",
        log,
        "--autotune-warmup-samples",
        "1",
        "--autotune-steps-per-sample",
        steps,
        "--autotune-bayes-opt-max-samples",
        samples,
    ]
}
#[test]
fn autotune_logs_samples_keeps_user_knobs_and_the_job_still_learns() {
    let s = Scratch::new("autotune");
    let log = s.dir.join("autotune.csv");
    let train = train();
    let tuning = autotune(log.to_str().unwrap(), "5", "4");
    let rest = [
        "--cycle-time-ms",
        "2",
        train.to_str().unwrap(),
        "--epochs",
        "2",
    ];
    let run = launch(&[&["-np", "2"][..], &tuning, &rest].concat()).finish(Duration::from_secs(60));
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
    assert!(rows.iter().all(|r| r[col("world_size")] == "2"), "{csv}");
    // One host: the hierarchical paths are not tuned.
    for k in ["hierarchical_allreduce", "hierarchical_allgather"] {
        assert!(rows.iter().all(|r| r[col(k)] == "false"), "{csv}");
    }
    let yaml = std::fs::read_to_string(log.with_extension("params.yaml")).unwrap();
    assert!(yaml.contains("cycle_time_ms: 2\n"), "{yaml}");
    assert!(yaml.contains("\n  segment_bytes: "), "{yaml}");
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

/// `localhost` and `127.0.0.1` are two hosts to the layout: two of two ranks,
/// so the tuner also tries the hierarchical paths, and every rank switches
/// to them and back while `train` learns.
#[test]
fn two_hosts_of_two_ranks_also_tune_the_hierarchical_paths() {
    let s = Scratch::new("autotune-hosts");
    let log = s.dir.join("autotune.csv");
    let train = train();
    let tuning = autotune(log.to_str().unwrap(), "3", "4");
    let hosts = ["-H", "localhost:2,127.0.0.1:2"];
    let rest = [train.to_str().unwrap(), "--epochs", "2"];
    let run = launch(&[&hosts[..], &tuning, &rest].concat()).finish(Duration::from_secs(60));
    run.expect_code(0);
    let done = run.done_event();
    assert!(done["accuracy"].as_f64().unwrap() > 0.9, "{done}");
    let csv = std::fs::read_to_string(&log).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let values = |name: &str| -> Vec<&str> {
        let c = header.iter().position(|h| *h == name).unwrap();
        csv.lines()
            .skip(1)
            .map(|l| l.split(',').nth(c).unwrap())
            .collect()
    };
    assert_eq!(values("world_size"), ["4"; 5], "{csv}");
    // The initial design flips every switch at least once.
    for k in ["hierarchical_allreduce", "hierarchical_allgather"] {
        let v = values(k);
        assert!(v.contains(&"true") && v.contains(&"false"), "{k}: {csv}");
    }
    let mut segments = values("segment_bytes");
    segments.dedup();
    assert!(segments.len() > 1, "the segment size was not tuned: {csv}");
}

/// The log's rows as (world size, warm-up, knob columns).
fn rows(log: &Path) -> Vec<(String, bool, String)> {
    let csv = std::fs::read_to_string(log).unwrap_or_default();
    csv.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[9].to_owned(), f[8] == "true", f[..6].join(","))
        })
        .collect()
}

fn rows_at(log: &Path, size: &str) -> usize {
    rows(log).iter().filter(|r| r.0 == size).count()
}

#[test]
fn an_elastic_job_tunes_each_world_size_and_remembers_them() {
    assert_eq!(autotune::CSV_COLUMNS[8..], ["warmup", "world_size"]);
    let scratch = Scratch::new("autotune-elastic");
    scratch.set_hosts("localhost:2\n");
    let log = scratch.dir.join("autotune.csv");
    let discovery = scratch.file_discovery();
    let elastic = [
        "--host-discovery-script",
        &discovery,
        "--min-np",
        "2",
        "--max-np",
        "3",
    ];
    let tuning = autotune(log.to_str().unwrap(), "2", "3");
    let job = Job::start(
        &[&elastic[..], &tuning].concat(),
        &Train {
            epochs: 30,
            samples: 640,
            step_delay_ms: 20,
            commit_every: 4,
        },
    );
    let limit = Duration::from_secs(30);
    // Two ranks: one warm-up and three scored samples, then final.
    wait_for("the budget spent on 2 ranks", limit, || {
        (rows_at(&log, "2") == 4).then_some(())
    });
    scratch.set_hosts("localhost:3\n");
    let on3 = job.wait_for_step("a step on 3 ranks", |s| s.world_size == 3);
    wait_for("a sample on 3 ranks", limit, || {
        (rows_at(&log, "3") >= 1).then_some(())
    });
    scratch.set_hosts("localhost:2\n");
    job.wait_for_step("a step on 2 ranks again", |s| {
        s.world_size == 2 && s.step > on3.step
    });
    let run = job.finish(Duration::from_secs(60));
    run.expect_code(0);
    let all = rows(&log);
    // 3 ranks started afresh: a warm-up at the configured starting point
    // (the first row of 2 ranks), not at what 2 ranks chose.
    let first3 = all.iter().find(|r| r.0 == "3").unwrap();
    assert!(first3.1, "{all:?}");
    assert_eq!(first3.2, all[0].2, "{all:?}");
    // Back on 2 ranks the spent budget holds: no sample is taken again.
    assert_eq!(rows_at(&log, "2"), 4, "{all:?}");
    let last2 = all.iter().rposition(|r| r.0 == "2").unwrap();
    let first3_at = all.iter().position(|r| r.0 == "3").unwrap();
    assert!(last2 < first3_at, "{all:?}");
}
