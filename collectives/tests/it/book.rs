//! Addresses on demand: each rank given only its own address (and rank
//! 0's), the rest looked up through a [`Lookup`] when a collective first
//! dials a peer. The collectives give the full mesh's results bit for bit;
//! a rank looks up only the peers it dials, once each; a full mesh looks
//! every address up at once; an unknown peer is an error naming it.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use collectives::{
    Admission, AllreduceAlgorithm, CollectiveOptions, Communicator, DataPlane, Endpoint,
    Generation, Lookup, PeerBook, Rank, ReduceOp, TcpConfig, TcpEndpoint,
};
use common::*;
use control::{DataKey, PeerAddress};
use futures::future::{BoxFuture, join_all};

use crate::on_demand::{KEY, config};

/// The coordinator's table, counting the ranks each rank looks up.
#[derive(Debug)]
struct Directory {
    table: Vec<PeerAddress>,
    asked: Vec<AtomicUsize>,
}

/// One rank's lookups in the directory.
#[derive(Debug)]
struct Asker(Arc<Directory>, Rank);

impl Lookup for Asker {
    fn look_up(
        &self,
        ranks: Vec<Rank>,
    ) -> BoxFuture<'static, Result<Vec<(Rank, PeerAddress)>, String>> {
        let d = self.0.clone();
        d.asked[self.1].fetch_add(ranks.len(), Ordering::SeqCst);
        Box::pin(async move {
            Ok(ranks
                .into_iter()
                .filter_map(|r| Some((r, d.table.get(r)?.clone())))
                .collect())
        })
    }
}

/// `n` ranks over TCP connected through books that hold only their own
/// address and rank 0's; the directory says what each looked up.
async fn world(n: usize, cfg: &TcpConfig) -> (Vec<DataPlane>, Arc<Directory>) {
    let mut eps = Vec::new();
    for _ in 0..n {
        eps.push(
            TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), cfg.clone())
                .await
                .unwrap(),
        );
    }
    let table: Vec<PeerAddress> = eps
        .iter()
        .map(|e| PeerAddress::tcp(e.local_addr().unwrap()))
        .collect();
    let asked = (0..n).map(|_| AtomicUsize::new(0)).collect();
    let d = Arc::new(Directory { table, asked });
    let g = Generation(3);
    let joins = eps.into_iter().enumerate().map(|(r, ep)| {
        let given = [(r, d.table[r].clone()), (0, d.table[0].clone())];
        let book = Arc::new(PeerBook::partial(
            n,
            given,
            Some(Arc::new(Asker(d.clone(), r))),
        ));
        let admission = Admission {
            key: DataKey::new(KEY),
            grant: None,
            within: Duration::from_secs(10),
        };
        ep.connect_book(r, g, book, admission)
    });
    let ts = join_all(joins).await;
    (
        ts.into_iter()
            .map(|t| DataPlane::from(t.expect("set-up")))
            .collect(),
        d,
    )
}

async fn allreduce_twice(comms: &[Communicator<DataPlane>]) {
    let n = comms.len();
    for len in [10, 50_000] {
        let mut bufs: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32 + 1.0; len]).collect();
        let res = with_buffers(comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
        res.into_iter().for_each(|r| r.expect("allreduce"));
        let want = (n * (n + 1) / 2) as f32;
        assert!(
            bufs.iter().flatten().all(|&x| x == want),
            "{n} ranks, {len} elements"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_on_demand_looks_up_only_the_peer_each_rank_dials() {
    for shm in [false, true] {
        let (ts, d) = world(8, &config(true, shm)).await;
        let opts = CollectiveOptions {
            allreduce: AllreduceAlgorithm::Ring,
            ..Default::default()
        };
        let comms = common::grid::communicators(ts, &opts);
        allreduce_twice(&comms).await;
        let asked: Vec<usize> = d.asked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
        // A ring's rank dials at most its two neighbours (the other end of
        // each link may have dialled first), each looked up once, rank 0's
        // address given.
        assert!(
            asked.iter().all(|&a| a <= 2),
            "shared memory {shm}: {asked:?}"
        );
        assert!(
            asked.iter().sum::<usize>() >= 6,
            "the ring's links were looked up: {asked:?}"
        );
        shutdown_all(comms).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_mesh_looks_every_address_up_before_it_connects() {
    let (ts, d) = world(5, &config(false, false)).await;
    let comms = common::grid::communicators(ts, &CollectiveOptions::default());
    allreduce_twice(&comms).await;
    for (r, a) in d.asked.iter().enumerate() {
        // Given its own and rank 0's: 3 of 5 missing (rank 0: 4, its own
        // and rank 0's being one).
        let missing = if r == 0 { 4 } else { 3 };
        assert_eq!(
            a.load(Ordering::SeqCst),
            missing,
            "rank {r} looked up what it lacked"
        );
    }
    shutdown_all(comms).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allreduce_and_alltoall_on_looked_up_addresses_are_right() {
    for n in [3, 5] {
        let (ts, _) = world(n, &config(true, true)).await;
        let comms = common::grid::communicators(ts, &CollectiveOptions::default());
        allreduce_twice(&comms).await;
        // alltoall reaches every peer: every address looked up on the way.
        let inputs: Vec<Vec<f32>> = (0..n)
            .map(|r| (0..n).map(|i| (r * n + i) as f32).collect())
            .collect();
        let counts = vec![1; n];
        let outs = join_all(
            comms
                .iter()
                .zip(&inputs)
                .map(|(c, i)| c.alltoall(i, &counts)),
        )
        .await;
        for (r, out) in outs.into_iter().enumerate() {
            let (got, _) = out.expect("alltoall");
            let want: Vec<f32> = (0..n).map(|i| (i * n + r) as f32).collect();
            assert_eq!(got, want, "rank {r} of {n}");
        }
        shutdown_all(comms).await;
    }
}
