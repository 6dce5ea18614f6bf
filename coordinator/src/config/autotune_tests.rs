//! Tests of resolving the autotune options and the knobs held fixed.

use std::path::PathBuf;

use super::tests::{invalid_option, run};
use super::*;

fn autotune(c: &JobConfig) -> &AutotuneConfig {
    c.autotune.as_ref().expect("autotuning on")
}

const AUTOTUNE_DEFAULTS: AutotuneConfig = AutotuneConfig {
    log_file: None,
    warmup_samples: 3,
    steps_per_sample: 10,
    max_samples: 20,
    gaussian_process_noise: 0.8,
};

#[test]
fn autotune_defaults() {
    assert_eq!(run("./t", &[], "").unwrap().autotune, None);
    let c = run("--autotune ./t", &[], "").unwrap();
    assert_eq!(c.autotune, Some(AUTOTUNE_DEFAULTS));
    // Turned on from each layer.
    for (e, f) in [
        (&[("ELASTICRUN_AUTOTUNE", "1")][..], ""),
        (&[("HOROVOD_AUTOTUNE", "true")][..], ""),
        (&[][..], "autotune:\n  enabled: true\n"),
    ] {
        assert_eq!(run("./t", e, f).unwrap().autotune, Some(AUTOTUNE_DEFAULTS));
    }
    // Off in a higher layer beats on in a lower one; --autotune beats them all.
    let on_in_file = "autotune:\n  enabled: true\n";
    assert_eq!(
        run("./t", &[("ELASTICRUN_AUTOTUNE", "off")], on_in_file)
            .unwrap()
            .autotune,
        None
    );
    assert_eq!(
        run(
            "./t",
            &[("ELASTICRUN_AUTOTUNE", "0"), ("HOROVOD_AUTOTUNE", "1")],
            ""
        )
        .unwrap()
        .autotune,
        None,
        "ours before Horovod's"
    );
    let c = run(
        "--autotune ./t",
        &[("ELASTICRUN_AUTOTUNE", "0")],
        "autotune:\n  enabled: false\n",
    )
    .unwrap();
    assert_eq!(c.autotune, Some(AUTOTUNE_DEFAULTS));
}

#[test]
fn every_autotune_option_from_the_command_line() {
    let c = run(
        "--autotune --autotune-log-file at.csv --autotune-warmup-samples 0 \
         --autotune-steps-per-sample 20 --autotune-bayes-opt-max-samples 50 \
         --autotune-gaussian-process-noise 0 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(
        autotune(&c),
        &AutotuneConfig {
            log_file: Some("at.csv".into()),
            warmup_samples: 0,
            steps_per_sample: 20,
            max_samples: 50,
            gaussian_process_noise: 0.0,
        }
    );
}

#[test]
fn autotune_options_command_line_beats_environment_beats_file() {
    let file = "autotune:\n  enabled: true\n  log_file: file.csv\n  warmup_samples: 5\n  \
                steps_per_sample: 6\n  bayes_opt_max_samples: 7\n  \
                gaussian_process_noise: 0.5\n";
    assert_eq!(
        autotune(&run("./t", &[], file).unwrap()),
        &AutotuneConfig {
            log_file: Some("file.csv".into()),
            warmup_samples: 5,
            steps_per_sample: 6,
            max_samples: 7,
            gaussian_process_noise: 0.5,
        }
    );
    let c = run(
        "--autotune-warmup-samples 1 ./t",
        &[
            ("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", "2"),
            ("ELASTICRUN_AUTOTUNE_STEPS_PER_SAMPLE", "12"),
            ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "13"),
            ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "30"),
            ("ELASTICRUN_AUTOTUNE_LOG_FILE", "env.csv"),
        ],
        file,
    )
    .unwrap();
    assert_eq!(
        autotune(&c),
        &AutotuneConfig {
            log_file: Some("env.csv".into()),
            warmup_samples: 1,
            steps_per_sample: 12,
            max_samples: 30,
            gaussian_process_noise: 0.5,
        }
    );
}

#[test]
fn horovod_autotune_names_are_aliases() {
    let c = run(
        "./t",
        &[
            ("HOROVOD_AUTOTUNE", "1"),
            ("HOROVOD_AUTOTUNE_LOG", "/tmp/autotune.csv"),
            ("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "4"),
            ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "25"),
            ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "40"),
            ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.25"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(
        autotune(&c),
        &AutotuneConfig {
            log_file: Some("/tmp/autotune.csv".into()),
            warmup_samples: 4,
            steps_per_sample: 25,
            max_samples: 40,
            gaussian_process_noise: 0.25,
        }
    );
    // Our own names win over Horovod's.
    let c = run(
        "--autotune ./t",
        &[
            ("HOROVOD_AUTOTUNE_LOG", "h.csv"),
            ("ELASTICRUN_AUTOTUNE_LOG_FILE", "e.csv"),
            ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.1"),
            ("ELASTICRUN_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.2"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(autotune(&c).log_file, Some(PathBuf::from("e.csv")));
    assert_eq!(autotune(&c).gaussian_process_noise, 0.2);
}

#[test]
fn autotune_options_without_autotune_are_refused() {
    for args in [
        "--autotune-log-file a.csv",
        "--autotune-warmup-samples 1",
        "--autotune-steps-per-sample 1",
        "--autotune-bayes-opt-max-samples 1",
        "--autotune-gaussian-process-noise 0.5",
    ] {
        let (option, why) = invalid_option(run(&format!("{args} ./t"), &[], ""));
        assert_eq!(format!("--{option}"), args.split(' ').next().unwrap());
        assert!(why.contains("--autotune"), "{why}");
        assert!(why.contains("on the command line"), "{why}");
    }
    let e = run("./t", &[("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", "1")], "").unwrap_err();
    assert!(
        e.to_string().starts_with("--autotune-warmup-samples: ")
            && e.to_string()
                .contains("by ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES"),
        "{e}"
    );
    let e = run("./t", &[], "autotune:\n  log_file: a.csv\n").unwrap_err();
    assert!(
        e.to_string().starts_with("--autotune-log-file: ") && e.to_string().contains("config file"),
        "{e}"
    );
    // Turned off explicitly: the message says where.
    let e = run(
        "--autotune-steps-per-sample 5 ./t",
        &[("ELASTICRUN_AUTOTUNE", "0")],
        "",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("turned off by ELASTICRUN_AUTOTUNE"),
        "{e}"
    );
    // Horovod's names only count when autotuning is on, as in Horovod: a stray
    // export is ignored, not an error.
    let c = run(
        "./t",
        &[
            ("HOROVOD_AUTOTUNE_LOG", "a.csv"),
            ("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "oops"),
            ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "0"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(c.autotune, None);
}

#[test]
fn bad_autotune_values_are_refused() {
    for (args, option) in [
        ("--autotune-steps-per-sample 0", "autotune-steps-per-sample"),
        (
            "--autotune-bayes-opt-max-samples 0",
            "autotune-bayes-opt-max-samples",
        ),
        (
            "--autotune-gaussian-process-noise=-0.1",
            "autotune-gaussian-process-noise",
        ),
        (
            "--autotune-gaussian-process-noise inf",
            "autotune-gaussian-process-noise",
        ),
        (
            "--autotune-gaussian-process-noise NaN",
            "autotune-gaussian-process-noise",
        ),
    ] {
        let r = run(&format!("--autotune {args} ./t"), &[], "");
        assert_eq!(invalid_option(r).0, option, "{args}");
    }
    let e = run("--autotune --autotune-steps-per-sample 0 ./t", &[], "").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--autotune-steps-per-sample: at least 1 is needed"
    );
    let r = run(
        "./t",
        &[],
        "autotune:\n  enabled: true\n  gaussian_process_noise: -1\n",
    );
    assert_eq!(invalid_option(r).0, "autotune-gaussian-process-noise");
    for (var, bad) in [
        ("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", "-1"),
        ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "many"),
        ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "a lot"),
        ("ELASTICRUN_AUTOTUNE_STEPS_PER_SAMPLE", "4294967296"),
    ] {
        let r = run("--autotune ./t", &[(var, bad)], "");
        assert!(
            matches!(r, Err(ConfigError::Env { var: ref v, .. }) if v == var),
            "{var}={bad}: {r:?}"
        );
    }
    let e = run("./t", &[("HOROVOD_AUTOTUNE", "2")], "").unwrap_err();
    assert!(e.to_string().starts_with("HOROVOD_AUTOTUNE=\"2\": "), "{e}");
    let e = run("./t", &[("ELASTICRUN_AUTOTUNE", "maybe")], "").unwrap_err();
    assert!(
        e.to_string().starts_with("ELASTICRUN_AUTOTUNE=\"maybe\": "),
        "{e}"
    );
    // Empty values are unset.
    let c = run(
        "--autotune ./t",
        &[("ELASTICRUN_AUTOTUNE_WARMUP_SAMPLES", " ")],
        "",
    )
    .unwrap();
    assert_eq!(autotune(&c).warmup_samples, 3);
}

#[test]
fn user_set_knobs_are_held_fixed() {
    assert!(run("./t", &[], "").unwrap().tuning.user_set().is_empty());
    let c = run(
        "--autotune --disable-cache ./t",
        &[("HOROVOD_CYCLE_TIME", "2")],
        "params:\n  hierarchical_allgather: false\n",
    )
    .unwrap();
    assert_eq!(
        c.tuning.user_set(),
        [Knob::CycleTime, Knob::Cache, Knob::HierarchicalAllgather]
    );
    let c = run(
        "--fusion-threshold-mb 0 --no-hierarchical-allreduce ./t",
        &[("ELASTICRUN_CACHE_CAPACITY", "10")],
        "params:\n  cycle_time_ms: 3\n  hierarchical_allgather: true\n",
    )
    .unwrap();
    assert_eq!(
        c.tuning.user_set(),
        [
            Knob::FusionThreshold,
            Knob::CycleTime,
            Knob::Cache,
            Knob::HierarchicalAllreduce,
            Knob::HierarchicalAllgather
        ]
    );
    // A file value beaten by nothing is still the user's.
    let c = run("./t", &[], "params:\n  cache_capacity: 1024\n").unwrap();
    assert_eq!(c.tuning.user_set(), [Knob::Cache]);
}

#[test]
fn a_set_segment_size_is_held_fixed_and_handed_to_the_workers() {
    for (args, vars, file) in [
        ("--segment-size 512K ./t", &[][..], ""),
        ("./t", &[("ELASTICRUN_SEGMENT_SIZE", "512K")][..], ""),
        ("./t", &[][..], "params:\n  segment_bytes: 524288\n"),
    ] {
        let c = run(args, vars, file).unwrap();
        assert_eq!(
            c.tuning.user_set(),
            [Knob::SegmentSize],
            "{args} {vars:?} {file}"
        );
    }
    let c = run(
        "--autotune --segment-size 2M --cache-capacity 8 ./t",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(c.tuning.user_set(), [Knob::Cache, Knob::SegmentSize]);
    let k = crate::job::knobs(&c);
    assert_eq!(k.tuning.segment_bytes, 2 << 20);
    assert_eq!(
        k.autotune.expect("autotuning on").fixed,
        [Knob::Cache, Knob::SegmentSize]
    );
    // The default is the workers' own default, and not held fixed.
    let c = run("--autotune ./t", &[], "").unwrap();
    let k = crate::job::knobs(&c);
    assert_eq!(
        k.tuning.segment_bytes,
        control::Tuning::default().segment_bytes
    );
    assert!(k.autotune.expect("autotuning on").fixed.is_empty());
}

#[test]
fn every_knob_the_user_sets_reaches_the_workers_fixed() {
    // One way to set each knob; a knob added without one fails here.
    let ways = [
        ("--fusion-threshold-mb 8", Knob::FusionThreshold),
        ("--cycle-time-ms 2", Knob::CycleTime),
        ("--cache-capacity 8", Knob::Cache),
        ("--disable-cache", Knob::Cache),
        ("--hierarchical-allreduce", Knob::HierarchicalAllreduce),
        ("--no-hierarchical-allgather", Knob::HierarchicalAllgather),
        ("--segment-size 1M", Knob::SegmentSize),
    ];
    for knob in Knob::ALL {
        assert!(
            ways.iter().any(|(_, k)| *k == knob),
            "{knob:?} cannot be set"
        );
    }
    for (args, knob) in ways {
        let c = run(&format!("--autotune {args} ./t"), &[], "").unwrap();
        let k = crate::job::knobs(&c);
        assert_eq!(k.autotune.expect("autotuning on").fixed, [knob], "{args}");
    }
    let all: Vec<&str> = ways.iter().map(|(a, _)| *a).collect();
    let c = run(&format!("--autotune {} ./t", all.join(" ")), &[], "").unwrap();
    let k = crate::job::knobs(&c);
    assert_eq!(k.autotune.expect("autotuning on").fixed, Knob::ALL);
}

/// A huge bad value is named by its start and length, not echoed whole.
#[test]
fn a_huge_bad_value_is_quoted_cut() {
    let huge = "x".repeat(50 << 20);
    let e = run("-np 1 ./t", &[("ELASTICRUN_CYCLE_TIME_MS", &huge)], "").unwrap_err();
    let said = e.to_string();
    assert!(said.len() < 300, "{} bytes said", said.len());
    assert!(said.contains("(52428800 bytes)"), "{said}");
    let e = run(&format!("-H a:{} ./t", "9".repeat(10_000)), &[], "").unwrap_err();
    assert!(e.to_string().len() < 300, "{e}");
}
