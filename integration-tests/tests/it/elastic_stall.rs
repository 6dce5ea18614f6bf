//! In an elastic job a stall past the shutdown time does not end the job: the
//! stalled rank is stopped and replaced and the others roll back to their last
//! commit. `train --hang-once-at STEP FILE` makes rank 1 stop submitting at
//! STEP, once (the replacement finds FILE and carries on).

use std::time::Duration;

use integration_tests::elastic::{Scratch, check_done, generations};
use integration_tests::{launch, train};

#[test]
fn a_stalled_rank_is_replaced_and_the_job_completes() {
    let scratch = Scratch::new("elastic-stall");
    scratch.set_hosts("localhost:3\n");
    let flag = scratch.dir.join("hung");
    let (discovery, flag) = (scratch.file_discovery(), flag.display().to_string());
    let train = train();
    let run = launch(&[
        "--min-np",
        "2",
        "--max-np",
        "3",
        "--stall-check-warning-time-seconds",
        "1",
        "--stall-check-shutdown-time-seconds",
        "2",
        "--discovery-interval",
        "0.2",
        "--host-discovery-script",
        &discovery,
        train.to_str().unwrap(),
        "--epochs",
        "2",
        "--samples",
        "1024",
        "--step-delay-ms",
        "5",
        "--hang-once-at",
        "5",
        &flag,
    ])
    .finish(Duration::from_secs(60));
    run.expect_code(0);
    let ctx = format!("stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("hanging at step 5"),
        "rank 1 never hung\n{ctx}"
    );
    assert!(
        run.stderr
            .contains("past the stall shutdown time; replacing the stalled ranks"),
        "{ctx}"
    );
    assert!(run.stderr.contains("rank 1 (localhost slot 1)"), "{ctx}");
    assert!(generations(&run.stderr).len() >= 2, "{ctx}");
    // Two epochs of 16 batches, every one applied once, on three ranks again.
    check_done(&run, 3, 32);
}
