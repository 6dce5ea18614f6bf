//! Strangers at the coordinator's port: a wrong secret, random bytes, an
//! oversized frame, a frame before authentication. Each connection is closed
//! and the running job finishes as if nothing had happened; with
//! `--transport quic` (a TLS control plane) too.

use std::net::SocketAddr;
use std::time::Duration;

use integration_tests::{env_of, launch, train, workers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMIT: Duration = Duration::from_secs(10);

/// Reads until the peer closes the connection; fails the test if it does not
/// within `LIMIT`.
async fn expect_closed(mut s: TcpStream, what: &str) {
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(LIMIT, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the coordinator kept the connection open after {what}"
    );
}

async fn dial(addr: SocketAddr) -> TcpStream {
    tokio::time::timeout(LIMIT, TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connect")
}

async fn attack(addr: SocketAddr) {
    // A wrong secret: the handshake fails on the worker's side too, since the
    // coordinator never proves a secret to someone who did not prove it first.
    let wrong = control::Secret::generate().unwrap();
    let res = control::connect(dial(addr).await, &wrong, LIMIT).await;
    assert!(res.is_err(), "a wrong secret was accepted");

    // Random bytes.
    let mut s = dial(addr).await;
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let _ = s.write_all(&noise).await;
    expect_closed(s, "random bytes").await;

    // A frame announcing more than the limit.
    let mut s = dial(addr).await;
    let len = u32::try_from(control::MAX_FRAME * 4).unwrap();
    let _ = s.write_all(&len.to_be_bytes()).await;
    let _ = s.write_all(&[0u8; 1024]).await;
    expect_closed(s, "an oversized frame").await;

    // A well-formed frame that is not a proof: the first thing owed is one.
    let mut s = dial(addr).await;
    let _ = s.write_all(&[0, 0, 0, 3, 1, 2, 3]).await;
    expect_closed(s, "a frame before authentication").await;

    // Connecting and saying nothing is closed too, once the handshake times out.
    let s = dial(addr).await;
    expect_closed(s, "silence").await;
}

/// Against a coordinator of a `--transport quic` job, whose control plane is
/// TLS: a TLS client that trusts another job's authority refuses the
/// coordinator's certificate (so the coordinator does speak TLS, with a leaf
/// of its own job).
async fn attack_tls(addr: SocketAddr) {
    let other = control::tls::ControlConnector::new(&control::Secret::generate().unwrap()).unwrap();
    let res = tokio::time::timeout(LIMIT, control::tls::dial(addr, Some(&other)))
        .await
        .expect("a TLS handshake in time");
    let e = res.expect_err("a coordinator of this job was trusted by another job's worker");
    assert!(e.to_string().contains("certificate"), "{e}");
}

/// Runs a two-worker job with `extra` options while strangers call at the
/// coordinator's port; the job must end as if nothing had happened.
fn job_under_attack(extra: &[&str], tls: bool) {
    let train = train();
    let mut args = vec!["-np", "2"];
    args.extend_from_slice(extra);
    args.extend([
        train.to_str().unwrap(),
        "--epochs",
        "2",
        "--step-delay-ms",
        "40",
    ]);
    let job = launch(&args);
    let pids = workers(job.pid(), 2, Duration::from_secs(20));
    let addr: SocketAddr =
        integration_tests::wait_for("the coordinator address", Duration::from_secs(10), || {
            env_of(pids[0], "ELASTICRUN_COORDINATOR")?.parse().ok()
        });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if tls {
            attack_tls(addr).await;
        }
        attack(addr).await;
    });
    let run = job.finish(Duration::from_secs(60));
    run.expect_code(0);
    let done = run.done_event();
    assert_eq!(done["world_size"], 2, "{done}");
    assert!(done["accuracy"].as_f64().unwrap() > 0.9, "{done}");
}

#[test]
fn strangers_are_turned_away_and_the_job_goes_on() {
    job_under_attack(&[], false);
}

/// The same with `--transport quic`, whose control connections are TLS:
/// a stranger speaking the control plane in the clear (with a wrong secret,
/// bytes, frames, silence) is turned away too.
#[test]
fn strangers_at_a_tls_coordinator_are_turned_away_and_the_job_goes_on() {
    job_under_attack(&["--transport", "quic"], true);
}
