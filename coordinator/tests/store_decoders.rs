//! Property test of the job state a store hands back ([`JobState::decode`]):
//! a store kept elsewhere (etcd) is read over the network, and its bytes may
//! be damaged or written by another version. Inputs are valid states
//! mutated by [`testkit`] (bit flips, truncation, forged lengths) and random
//! bytes; each must decode to a state that a resumed membership core goes on
//! from (discovery, a failure, time passing) or be a typed
//! [`StoreError::Corrupt`], never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use coordinator::store::{JobState, StoreError};
use elastic::membership::{Ban, HostHistory};
use elastic::{Generation, HostSlots, Membership, Policy, SlotId, Snapshot};

fn states() -> Vec<Vec<u8>> {
    let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let member = |h: &str, s| SlotId::new(h, s);
    let snapshots = [
        Snapshot::default(),
        Snapshot {
            generation: Generation(3),
            resets: 2,
            members: vec![member("a", 0), member("a", 1), member("b", 0)],
            next_order: 7,
            hosts: vec![
                HostHistory {
                    host: "b".into(),
                    failures: vec![Duration::from_secs(10), Duration::from_millis(10_500)],
                    bans: 1,
                    ban: Ban::Until(Duration::from_secs(70)),
                },
                HostHistory {
                    host: "c".into(),
                    failures: vec![],
                    bans: 4,
                    ban: Ban::Forever,
                },
            ],
        },
        Snapshot {
            generation: Generation(u64::MAX - 1),
            resets: u32::MAX,
            members: vec![member("z", u32::MAX)],
            next_order: u64::MAX,
            hosts: vec![],
        },
    ];
    snapshots
        .into_iter()
        .map(|membership| JobState { epoch, membership }.encode().unwrap())
        .collect()
}

/// Drives a core resumed from `state` through what a coordinator then sees.
fn go_on_from(state: &JobState) {
    let now = state.age(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_100));
    let mut policy = Policy::new(1, 4, 2);
    policy.reset_limit = Some(3);
    let mut core = Membership::resume(policy, &state.membership, now);
    let members = state.membership.members.clone();
    let hosts: Vec<HostSlots> = ["a", "b", "z"]
        .iter()
        .map(|h| HostSlots {
            host: (*h).into(),
            slots: 2,
        })
        .collect();
    let _ = core.discovered(now, &hosts);
    if let Some(first) = members.first() {
        let _ = core.reattached(now, first, state.membership.generation);
    }
    let _ = core.tick(now + Duration::from_secs(30));
    if let Some(last) = members.last() {
        let _ = core.failed(now + Duration::from_secs(31), last, "lost");
    }
    let _ = core.tick(now + Duration::from_secs(3600));
    let _ = core.snapshot();
}

#[test]
fn stored_job_states_decode_or_are_corrupt() {
    testkit::check("stored job states", testkit::bytes(states()), |bytes| {
        match JobState::decode("job/state", &bytes) {
            Ok(state) => go_on_from(&state),
            Err(e) => assert!(matches!(e, StoreError::Corrupt { .. }), "{e}"),
        }
        Ok(())
    });
}
