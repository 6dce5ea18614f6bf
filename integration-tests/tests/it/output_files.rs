//! The files a job writes besides its terminal output (`--output-filename`,
//! `--timeline-filename`): checked before any worker starts, never the cause
//! of a worker's death, private to the user.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use integration_tests::elastic::Scratch;
use integration_tests::{launch, train};

const JOB: Duration = Duration::from_secs(60);

fn train_job(np: &str, before: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = before.iter().map(|s| s.to_string()).collect();
    v.extend(["-np".into(), np.into()]);
    v.push(train().to_str().unwrap().into());
    v.extend(["--epochs".into(), "1".into()]);
    v
}

fn run(args: &[String]) -> integration_tests::Finished {
    launch(&args.iter().map(String::as_str).collect::<Vec<_>>()).finish(JOB)
}

#[test]
fn an_unwritable_output_directory_is_named_before_any_worker_starts() {
    let s = Scratch::new("output-unwritable");
    let file = s.write("plain-file", "x");
    let dir = file.join("logs");
    let r = run(&train_job(
        "2",
        &["--output-filename", dir.to_str().unwrap()],
    ));
    r.expect_code(1);
    assert!(
        r.stderr.contains(&format!(
            "cannot write the output directory {}",
            dir.display()
        )),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("<stdout>"), "a worker ran: {}", r.stdout);
}

#[test]
fn an_unwritable_timeline_is_named_before_any_worker_starts() {
    let s = Scratch::new("timeline-unwritable");
    let path = s.dir.join("missing").join("timeline.json");
    let r = run(&train_job(
        "2",
        &["--timeline-filename", path.to_str().unwrap()],
    ));
    r.expect_code(1);
    assert!(
        r.stderr.contains(&format!(
            "cannot write the timeline file {}",
            path.display()
        )),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("<stdout>"), "a worker ran: {}", r.stdout);
}

/// One rank's file cannot be opened (its path is taken by a directory): the
/// job says so once and finishes, that rank's lines on the terminal.
#[test]
fn a_rank_file_that_cannot_be_written_costs_the_file_not_the_job() {
    let s = Scratch::new("output-rank-file");
    let logs = s.dir.join("logs");
    std::fs::create_dir_all(logs.join("rank.1").join("stdout")).unwrap();
    let r = run(&train_job(
        "2",
        &["--output-filename", logs.to_str().unwrap()],
    ));
    r.expect_code(0);
    let complaints: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("rank.1/stdout"))
        .collect();
    assert_eq!(complaints.len(), 1, "{}", r.stderr);
    assert!(complaints[0].contains("cannot write"), "{}", complaints[0]);
    assert!(r.stdout.contains("[1]<stdout>:"), "{}", r.stdout);
    let rank0 = logs.join("rank.0").join("stdout");
    let text = std::fs::read_to_string(&rank0).unwrap();
    assert!(text.contains("\"done\""), "{text}");
    let mode = std::fs::metadata(&rank0).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{rank0:?} is {mode:o}");
}

/// An elastic job does not know rank 0's host in advance: rank 0 reports an
/// unwritable timeline itself, on stderr, though `train` installs no logging
/// of its own, and trains on.
#[test]
fn rank_0_of_an_elastic_job_reports_an_unwritable_timeline() {
    let s = Scratch::new("timeline-elastic");
    s.set_hosts("localhost:2\n");
    let path = s.dir.join("missing").join("timeline.json");
    let args: Vec<String> = [
        "--min-np",
        "2",
        "--max-np",
        "2",
        "--host-discovery-script",
        &s.file_discovery(),
        "--timeline-filename",
        path.to_str().unwrap(),
        train().to_str().unwrap(),
        "--epochs",
        "1",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let r = run(&args);
    r.expect_code(0);
    let warned = r.stderr.lines().any(|l| {
        l.starts_with("[0]<stderr>:")
            && l.contains(&format!("cannot write the timeline {}", path.display()))
    });
    assert!(warned, "{}", r.stderr);
}

/// `--prefix-output-with-timestamp` stamps elasticrun's own lines as it
/// stamps the workers' forwarded ones.
#[test]
fn status_lines_carry_the_time_with_the_workers_output() {
    let r = launch(&[
        "--prefix-output-with-timestamp",
        "-np",
        "1",
        "sh",
        "-c",
        "echo said; exit 3",
    ])
    .finish(JOB);
    r.expect_code(1);
    let stamped = |line: &str, rest: &str| {
        line.split_once(' ').is_some_and(|(time, text)| {
            text == rest
                && time.len() == 24
                && time.ends_with('Z')
                && humantime::parse_rfc3339(time).is_ok()
        })
    };
    assert!(
        r.stdout.lines().any(|l| stamped(l, "[0]<stdout>:said")),
        "{}",
        r.stdout
    );
    let status = "elasticrun: rank 0 on localhost exited with code 3; stopping every worker";
    assert!(r.stderr.lines().any(|l| stamped(l, status)), "{}", r.stderr);
}
