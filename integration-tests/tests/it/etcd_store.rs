//! The etcd job store, election and worker keys against a real etcd
//! (Debian's etcd-server) on loopback ports.

use std::time::{Duration, SystemTime};

use coordinator::store::{EtcdStore, JobState, Store, StoreError};
use elastic::membership::{SlotId, Snapshot};
use etcdjob::{Campaign, JobName, Keys, LeaderRecord, LeaderWatch, Lease, PodWatch, WorkerRecord};
use integration_tests::etcd::Etcd;

const LIMIT: Duration = Duration::from_secs(20);

fn state(generation: u64) -> JobState {
    JobState {
        epoch: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        membership: Snapshot {
            generation: elastic::Generation(generation),
            resets: 2,
            members: vec![SlotId::new("node-a", 0), SlotId::new("node-b", 0)],
            next_order: 2,
            hosts: Vec::new(),
        },
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn leader(port: u16) -> LeaderRecord {
    LeaderRecord {
        addr: format!("127.0.0.1:{port}")
            .parse()
            .unwrap_or_else(|e| panic!("{e}")),
        instance: format!("replica-{port}"),
        tls: false,
        transport: None,
    }
}

/// A replica that stands for leadership and must not win.
async fn stands_by(client: &etcdjob::Client, keys: &Keys, lease: &Lease) -> Campaign {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let record = leader(2);
    let standing = etcdjob::campaign(client, keys, lease, &record, move |c| {
        let _ = tx.send(c);
    });
    tokio::select! {
        r = standing => panic!("the second replica won while the first leads: {r:?}"),
        c = rx.recv() => c.unwrap_or_else(|| panic!("no standing-by report")),
    }
}

/// Workers see who leads.
async fn workers_see(client: &etcdjob::Client, keys: &Keys, epoch: i64) -> LeaderWatch {
    let watch = LeaderWatch::start(client, keys);
    let seen = watch
        .wait(LIMIT)
        .await
        .unwrap_or_else(|| panic!("no leader seen"));
    assert_eq!(seen, (epoch, leader(1)));
    watch
}

#[test]
fn only_the_leader_writes_and_a_deposed_one_is_refused() {
    let Some(etcd) = Etcd::start() else { return };
    let endpoints = etcdjob::Endpoints::parse(&etcd.endpoints()).unwrap_or_else(|e| panic!("{e}"));
    rt().block_on(async {
        let client = etcdjob::connect(&endpoints, LIMIT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let keys = Keys::new(&JobName::new("store-test").unwrap_or_else(|e| panic!("{e}")));
        let lease_a = Lease::grant(&client, Duration::from_secs(2), "a")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let first = etcdjob::campaign(&client, &keys, &lease_a, &leader(1), |_| {})
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let store_a = EtcdStore::new(client.clone(), &keys, first.clone(), endpoints.to_string());
        assert_eq!(store_a.load().await.unwrap_or_else(|e| panic!("{e}")), None);
        let r1 = store_a
            .commit(None, &state(1))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let r2 = store_a
            .commit(Some(r1), &state(2))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(r2 > r1);
        match store_a.commit(Some(r1), &state(9)).await {
            Err(StoreError::Fenced { expected, found }) => {
                assert_eq!((expected, found), (Some(r1), Some(r2)));
            }
            other => panic!("a stale commit: {other:?}"),
        }
        let watch = workers_see(&client, &keys, first.epoch).await;

        // A second replica stands by, then takes over once the first's lease
        // is gone; the first can no longer write.
        let lease_b = Lease::grant(&client, Duration::from_secs(2), "b")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let Campaign::StandingBy { leader: l } = stands_by(&client, &keys, &lease_b).await;
        assert_eq!(l, Some(leader(1)));
        lease_a.revoke(&client).await;
        let second = tokio::time::timeout(
            LIMIT,
            etcdjob::campaign(&client, &keys, &lease_b, &leader(2), |_| {}),
        )
        .await
        .unwrap_or_else(|_| panic!("the standby did not take over"))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(second.epoch > first.epoch, "{second:?} after {first:?}");
        let store_b = EtcdStore::new(client.clone(), &keys, second.clone(), endpoints.to_string());
        let (rev, loaded) = store_b
            .load()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no state"));
        assert_eq!((rev, loaded), (r2, state(2)));
        match store_a.commit(Some(r2), &state(3)).await {
            Err(e @ StoreError::Deposed { .. }) => assert!(e.is_fenced()),
            other => panic!("the deposed leader wrote: {other:?}"),
        }
        let r3 = store_b
            .commit(Some(r2), &state(3))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(r3 > r2);
        let moved = tokio::time::timeout(LIMIT, async {
            let mut rx = watch.subscribe();
            rx.wait_for(|l| l.as_ref().is_some_and(|(e, _)| *e == second.epoch))
                .await
                .map(|l| l.clone())
        })
        .await
        .unwrap_or_else(|_| panic!("workers never saw the new leader"));
        assert_eq!(moved.ok().flatten().map(|(_, r)| r), Some(leader(2)));
    });
}

#[test]
fn garbage_in_the_job_keys_is_an_error_naming_the_key() {
    let Some(etcd) = Etcd::start() else { return };
    let endpoints = etcdjob::Endpoints::parse(&etcd.endpoints()).unwrap_or_else(|e| panic!("{e}"));
    etcd.ctl(&["put", "/elasticrun/garbage/state", "not bincode at all"]);
    etcd.ctl(&["put", "/elasticrun/garbage/workers/node-a/0", "{\"pod\":"]);
    etcd.ctl(&["put", "/elasticrun/garbage/workers/Bad Node/x", "{}"]);
    rt().block_on(async {
        let client = etcdjob::connect(&endpoints, LIMIT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let keys = Keys::new(&JobName::new("garbage").unwrap_or_else(|e| panic!("{e}")));
        let lease = Lease::grant(&client, Duration::from_secs(3), "a")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let l = etcdjob::campaign(&client, &keys, &lease, &leader(1), |_| {})
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let store = EtcdStore::new(client.clone(), &keys, l, endpoints.to_string());
        match store.load().await {
            Err(StoreError::Corrupt { key, .. }) => assert_eq!(key, "/elasticrun/garbage/state"),
            other => panic!("{other:?}"),
        }
        // Worker keys that cannot be read are left out (and said), the rest
        // are seen.
        let record = WorkerRecord {
            pod: "p".into(),
            uid: "u".into(),
            pid: 1,
            ip: "127.0.0.1".parse().unwrap_or_else(|e| panic!("{e}")),
            leaving: false,
            finished: false,
        };
        let slot = etcdjob::claim_slot(&client, &keys, "node-a", &lease, &record)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(slot, 1, "slot 0 of node-a holds garbage: it is taken");
        let pods = PodWatch::start(&client, &keys);
        let mut rx = pods.subscribe();
        let seen = tokio::time::timeout(LIMIT, rx.wait_for(Option::is_some))
            .await
            .unwrap_or_else(|_| panic!("no listing"))
            .unwrap_or_else(|e| panic!("{e}"))
            .clone()
            .unwrap_or_default();
        assert_eq!(seen.keys().collect::<Vec<_>>(), [&("node-a".to_owned(), 1)]);
        drop(rx);
    });
}
