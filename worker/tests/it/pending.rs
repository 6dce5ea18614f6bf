//! The pending board the heartbeat reads: what each rank's engine holds,
//! through submission, completion, failure and refusal.

use std::time::{Duration, Instant};

use collectives::{CollectiveOptions, Communicator, Generation, MemTransport, ReduceOp, Transport};
use worker::engine::{Kind, PendingBoard};
use worker::{Engine, EngineConfig, Planes, Tensor};

/// Bound on anything a test waits for.
const DEADLINE: Duration = Duration::from_secs(60);

fn engines(rt: &tokio::runtime::Runtime, size: usize) -> Vec<Engine> {
    let negotiation = MemTransport::world(size, Generation(1), DEADLINE);
    MemTransport::world(size, Generation(1), DEADLINE)
        .into_iter()
        .zip(negotiation)
        .map(|(t, n)| {
            let planes = Planes {
                data: Communicator::new(t, CollectiveOptions::default()),
                negotiation: Communicator::new(n, CollectiveOptions::default()),
            };
            Engine::start(
                rt.handle(),
                planes,
                EngineConfig::default(),
                |p| async move {
                    p.data.into_transport().shutdown().await;
                    p.negotiation.into_transport().shutdown().await;
                },
            )
        })
        .collect()
}

fn submit(e: &Engine, name: &str, data: Vec<f32>) -> worker::Handle<f32> {
    let kind = Kind::Allreduce(ReduceOp::Sum);
    e.submit(name.into(), kind, Tensor::from(data), vec![], vec![])
}

fn names(board: &PendingBoard) -> Vec<String> {
    board
        .report(std::time::Instant::now())
        .tensors
        .into_iter()
        .map(|t| t.name)
        .collect()
}

/// Waits until `board` lists exactly `want`, failing the test after DEADLINE.
fn until_listed(board: &PendingBoard, want: &[&str]) {
    let end = Instant::now() + DEADLINE;
    loop {
        let got = names(board);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < end,
            "the board lists {got:?}, not {want:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_tensor_is_pending_from_submission_until_it_completes_or_fails() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let [e0, e1]: [Engine; 2] = engines(&rt, 2).try_into().unwrap();
    let (b0, b1) = (e0.pending(), e1.pending());

    let w0 = submit(&e0, "w", vec![1.0; 3]);
    let v0 = submit(&e0, "v", vec![1.0; 3]);
    assert_eq!(names(&b0), ["w", "v"], "oldest first");
    assert!(b1.is_empty(), "rank 1 submitted nothing: {:?}", names(&b1));
    // A second "w" in flight waits behind the first: the name is listed
    // once, from the first's submission.
    let again = submit(&e0, "w", vec![5.0; 3]);
    until_listed(&b0, &["w", "v"]);

    let w1 = submit(&e1, "w", vec![2.0; 3]);
    assert_eq!(w0.wait().unwrap().data, [3.0; 3]);
    assert_eq!(w1.wait().unwrap().data, [3.0; 3]);
    // The second "w" is pending now, since its own submission.
    until_listed(&b0, &["v", "w"]);
    until_listed(&b1, &[]);
    let w1_again = submit(&e1, "w", vec![1.0; 3]);
    assert_eq!(again.wait().unwrap().data, [6.0; 3]);
    assert_eq!(w1_again.wait().unwrap().data, [6.0; 3]);
    until_listed(&b0, &["v"]);
    until_listed(&b1, &[]);

    // Shapes disagree: the tensor fails on both ranks and leaves both boards.
    let v1 = submit(&e1, "v", vec![1.0; 4]);
    assert!(v0.wait().is_err());
    assert!(v1.wait().is_err());
    until_listed(&b0, &[]);
    until_listed(&b1, &[]);

    let (s0, s1) = rt.block_on(async { tokio::join!(e0.shutdown(), e1.shutdown()) });
    s0.unwrap();
    s1.unwrap();
}
