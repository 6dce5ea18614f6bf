//! Links that carry on from one generation to the next (`TcpConfig::carry`):
//! processes that stay take their links to each other up again, over TCP
//! and over shared memory, with the results of fresh links; a new process
//! and a new pair are dialed; a dead process's links end at the survivors;
//! a link parked and not taken up is closed a generation later.

use crate::common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use collectives::{
    Admission, AllreduceAlgorithm, CollectiveOptions, Communicator, DataPlane, Endpoint,
    Generation, LinkCarry, PeerBook, ReduceOp, TcpConfig, TcpEndpoint, Transport,
};
use common::*;
use control::{DataKey, PeerAddress};
use futures::future::join_all;

use crate::on_demand::{KEY, config};

type Comms = Vec<Communicator<DataPlane>>;

fn ring() -> CollectiveOptions {
    CollectiveOptions {
        allreduce: AllreduceAlgorithm::Ring,
        ..Default::default()
    }
}

/// Generation `g` of the processes `procs` (rank `i` is `procs[i]`), each
/// binding a new endpoint that carries with its process's handle.
async fn generation(procs: &[LinkCarry], g: u64, base: &TcpConfig) -> Comms {
    let mut eps = Vec::new();
    for p in procs {
        let cfg = TcpConfig {
            carry: Some(p.clone()),
            ..base.clone()
        };
        eps.push(
            TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), cfg)
                .await
                .unwrap(),
        );
    }
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let table: Vec<PeerAddress> = eps.iter().map(|e| e.published(loopback).unwrap()).collect();
    for (a, p) in table.iter().zip(procs) {
        assert_eq!(
            a.process(),
            Some(p.process()),
            "the endpoint names its process"
        );
    }
    let joins = eps.into_iter().enumerate().map(|(r, ep)| {
        let book = Arc::new(PeerBook::whole(&table));
        let admission = Admission {
            key: DataKey::new(KEY),
            grant: None,
            within: Duration::from_secs(10),
        };
        ep.connect_book(r, Generation(g), book, admission)
    });
    let planes = join_all(joins)
        .await
        .into_iter()
        .map(|t| DataPlane::from(t.expect("set-up")));
    planes.map(|p| Communicator::new(p, ring())).collect()
}

/// An allreduce whose sums depend on the order of the additions: every
/// rank's result bit for bit the same, and the sum's.
async fn allreduce_checked(comms: &Comms) {
    let n = comms.len();
    for len in [7, 40_000] {
        let mut bufs: Vec<Vec<f64>> = (0..n)
            .map(|r| {
                (0..len)
                    .map(|i| 1.0 / (1.0 + (r * 31 + i) as f64))
                    .collect()
            })
            .collect();
        let want: Vec<f64> = (0..len)
            .map(|i| (0..n).map(|r| 1.0 / (1.0 + (r * 31 + i) as f64)).sum())
            .collect();
        let res = with_buffers(comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
        res.into_iter().for_each(|r| r.expect("allreduce"));
        for b in &bufs[1..] {
            assert_eq!(b, &bufs[0], "ranks disagree ({n} ranks, {len} elements)");
        }
        for (got, want) in bufs[0].iter().zip(&want) {
            assert!((got - want).abs() <= 1e-12 * want.abs(), "{got} != {want}");
        }
    }
}

/// Ends every rank's generation (as a reset does) and shuts it down.
async fn end(comms: Comms) {
    for c in &comms {
        c.transport().breaker().end("the next generation");
    }
    shutdown_all(comms).await;
}

fn tcp(c: &Communicator<DataPlane>) -> &collectives::TcpTransport {
    match c.transport() {
        DataPlane::Tcp(t) => t,
        other => panic!("a TCP plane expected: {other:?}"),
    }
}

fn carried(procs: &[LinkCarry]) -> Vec<u64> {
    procs.iter().map(LinkCarry::carried).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staying_processes_take_their_links_up_and_new_pairs_dial() {
    for shm in [false, true] {
        let base = config(true, shm);
        let procs: Vec<LinkCarry> = (0..4).map(|_| LinkCarry::new()).collect();
        let comms = generation(&procs, 1, &base).await;
        allreduce_checked(&comms).await;
        end(comms).await;
        assert_eq!(
            carried(&procs),
            [0; 4],
            "shm {shm}: nothing to carry into generation 1"
        );

        // The same ring: each of its four links taken up at both ends,
        // while the generation before still shuts down (as a worker's old
        // engine does beside its new one).
        let old = generation(&procs, 2, &base).await;
        allreduce_checked(&old).await;
        old.iter()
            .for_each(|c| c.transport().breaker().end("the next generation"));
        let comms = generation(&procs, 3, &base).await;
        let (_, ()) = futures::join!(allreduce_checked(&comms), shutdown_all(old));
        allreduce_checked(&comms).await;
        let links: usize = comms.iter().map(|c| tcp(c).link_count()).sum();
        assert_eq!(links, 8, "shm {shm}: a ring of 4 reads from 8 link ends");
        assert_eq!(
            carried(&procs),
            [4; 4],
            "shm {shm}: every ring link taken up twice"
        );
        if shm {
            for c in &comms {
                assert_eq!(tcp(c).shared_memory_peers().len(), 2, "shm rides along");
            }
        }

        // Process 2 dies; a new one comes; the ranks move: 0 3 new 1.
        let mut comms = comms;
        drop(comms.remove(2));
        let mut bufs = vec![vec![1.0f32; 1000]; 3];
        let res = with_buffers(&comms, &mut bufs, |c, b| c.allreduce(b, ReduceOp::Sum)).await;
        assert!(
            res.iter().all(Result::is_err),
            "shm {shm}: the loss reached every survivor: {res:?}"
        );
        end(comms).await;
        let next = [
            procs[0].clone(),
            procs[3].clone(),
            LinkCarry::new(),
            procs[1].clone(),
        ];
        let comms = generation(&next, 4, &base).await;
        allreduce_checked(&comms).await;
        // Carried: 0-3 and 1-0 (the ring's links 3-new and new-1 are new).
        assert_eq!(carried(&next), [6, 5, 0, 5], "shm {shm}");
        end(comms).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_not_taken_up_in_the_next_generation_is_closed_after_it() {
    let base = config(true, true);
    let procs: Vec<LinkCarry> = (0..3).map(|_| LinkCarry::new()).collect();
    // Generation 1: ranks 0-1-2, a ring of three: every pair linked.
    let comms = generation(&procs, 1, &base).await;
    allreduce_checked(&comms).await;
    end(comms).await;
    // Generation 2: processes 0 and 1 alone; their link is taken up, those
    // to process 2 (which waits outside) are not.
    let pair = [procs[0].clone(), procs[1].clone()];
    let comms = generation(&pair, 2, &base).await;
    allreduce_checked(&comms).await;
    end(comms).await;
    assert_eq!(carried(&procs), [1, 1, 0]);
    // Generation 3: all three again. The links to process 2 parked in
    // generation 1 were closed when generation 2 began, so they are dialed.
    let comms = generation(&procs, 3, &base).await;
    allreduce_checked(&comms).await;
    assert_eq!(
        carried(&procs),
        [2, 2, 0],
        "only the 0-1 link carried again"
    );
    end(comms).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_handle_nothing_carries_and_the_address_names_no_process() {
    let ep = TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), config(true, true))
        .await
        .unwrap();
    let published = ep.published(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
    assert_eq!(published.process(), None);
    let full_mesh = TcpConfig {
        carry: Some(LinkCarry::new()),
        ..config(false, true)
    };
    let ep = TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), full_mesh)
        .await
        .unwrap();
    let published = ep.published(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
    assert_eq!(published.process(), None, "the full mesh does not carry");
}

/// A carrying generation that finishes (not broken) says goodbye as any
/// other: a peer sees the rank depart, not lost; and nothing parks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_that_finishes_says_goodbye_and_parks_nothing() {
    for shm in [false, true] {
        let procs: Vec<LinkCarry> = (0..3).map(|_| LinkCarry::new()).collect();
        let comms = generation(&procs, 1, &config(true, shm)).await;
        allreduce_checked(&comms).await;
        let mut ts: Vec<DataPlane> = comms
            .into_iter()
            .map(Communicator::into_transport)
            .collect();
        let done = ts.remove(1);
        done.shutdown().await;
        let tag = collectives::Tag::new(Generation(1), 1 << 20, 0);
        let got = tokio::time::timeout(DEADLINE, ts[0].recv(1, tag)).await;
        match got.expect("the departure seen in time") {
            Err(collectives::TransportError::PeerLost { rank: 1, cause, .. }) => {
                assert_eq!(cause, collectives::LossCause::Departed, "shm {shm}");
            }
            other => panic!("shm {shm}: {other:?}"),
        }
        join_all(ts.into_iter().map(Transport::shutdown)).await;
        // All three finished: a next generation of the same processes has
        // nothing to take up.
        let comms = generation(&procs, 2, &config(true, shm)).await;
        allreduce_checked(&comms).await;
        assert_eq!(carried(&procs), [0; 3], "shm {shm}");
        end(comms).await;
    }
}
