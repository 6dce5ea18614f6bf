//! Assignments of a generation from the membership core's rank order: local
//! and cross ranks from [`crate::layout::placements`] (hosts numbered by their
//! first rank), every rank's data-plane address. Pure.

use control::pki::JobCa;
use control::{Assignment, DataEndpoint, Generation, Knobs, PeerAddress, TlsGrant};
use elastic::membership::SlotId;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::directory::{WHOLE_UP_TO, table_for};
use crate::layout::placements;

/// What every assignment of a generation shares.
#[derive(Debug)]
pub struct AssignmentBase<'a> {
    pub generation: Generation,
    pub knobs: &'a Knobs,
    pub data_token: u64,
    /// When the generation spans this machine and others: this machine's
    /// address towards the others, given out in place of the loopback
    /// address its own workers published (they listen on every interface).
    pub loopback_as: Option<IpAddr>,
    /// Certifies the TLS key of each worker on an encrypted (QUIC or TLS)
    /// data plane.
    pub ca: &'a JobCa,
}

/// A generation's assignments, and its whole address table (which
/// answers the lookups of the addresses they leave out).
#[derive(Debug)]
pub struct Assigned {
    pub each: Vec<Assignment>,
    pub table: Arc<[PeerAddress]>,
}

/// `addr` as every rank of the generation can reach it.
fn reachable(addr: &PeerAddress, loopback_as: Option<IpAddr>) -> PeerAddress {
    let Some(ip) = loopback_as else {
        return addr.clone();
    };
    let endpoints = addr
        .endpoints
        .iter()
        .map(|e| match e {
            DataEndpoint::Tcp(a) if a.ip().is_loopback() => {
                DataEndpoint::Tcp(SocketAddr::new(ip, a.port()))
            }
            DataEndpoint::Quic { addr, key } if addr.ip().is_loopback() => DataEndpoint::Quic {
                addr: SocketAddr::new(ip, addr.port()),
                key: *key,
            },
            DataEndpoint::Tls { addr, key } if addr.ip().is_loopback() => DataEndpoint::Tls {
                addr: SocketAddr::new(ip, addr.port()),
                key: *key,
            },
            other => *other,
        })
        .collect();
    PeerAddress { endpoints }
}

/// One assignment per rank of `ranks`, in rank order, each with the
/// addresses [`table_for`] gives it and the host table when the
/// generation is small or its collectives may be hierarchical; `Err`
/// names a rank with no known data-plane address.
pub fn assignments(
    g: &AssignmentBase<'_>,
    ranks: &[SlotId],
    addrs: &HashMap<SlotId, PeerAddress>,
) -> Result<Assigned, SlotId> {
    let table: Arc<[PeerAddress]> = ranks
        .iter()
        .map(|s| {
            addrs
                .get(s)
                .map(|a| reachable(a, g.loopback_as))
                .ok_or_else(|| s.clone())
        })
        .collect::<Result<_, _>>()?;
    let mut host_numbers: HashMap<&str, usize> = HashMap::new();
    let hosts: Vec<usize> = ranks
        .iter()
        .map(|s| {
            let next = host_numbers.len();
            *host_numbers.entry(s.host.as_str()).or_insert(next)
        })
        .collect();
    let mut by_host: Vec<Vec<usize>> = vec![Vec::new(); host_numbers.len()];
    for (rank, &h) in hosts.iter().enumerate() {
        by_host[h].push(rank);
    }
    let size = ranks.len() as u32;
    let host_ids: Arc<[u32]> = if ranks.len() <= WHOLE_UP_TO || hierarchical(g.knobs) {
        hosts.iter().map(|&h| h as u32).collect()
    } else {
        Arc::new([])
    };
    let each = placements(&hosts)
        .into_iter()
        .map(|p| Assignment {
            generation: g.generation,
            rank: p.rank as u32,
            size,
            local_rank: p.local_rank as u32,
            local_size: p.local_size as u32,
            cross_rank: p.cross_rank as u32,
            cross_size: p.cross_size as u32,
            peers: table_for(p.rank, &table, &by_host[p.host]),
            hosts: host_ids.clone(),
            data_token: g.data_token,
            knobs: g.knobs.clone(),
            tls: grant(g, p.rank, &table[p.rank]),
        })
        .collect();
    Ok(Assigned { each, table })
}

/// Whether the collectives may take the hierarchical paths, which group
/// the ranks by host: asked for, or the autotuner's to choose.
fn hierarchical(knobs: &Knobs) -> bool {
    knobs.tuning.hierarchical_allreduce
        || knobs.tuning.hierarchical_allgather
        || knobs.autotune.is_some()
}

/// The TLS grant of the worker at `addr`, rank `rank`: `None` for a worker
/// that offers no encrypted (QUIC or TLS) endpoint (or, never seen, one whose
/// leaf cannot be signed: its set-up then says no certificate was granted).
fn grant(g: &AssignmentBase<'_>, rank: usize, addr: &PeerAddress) -> Option<TlsGrant> {
    let key = addr.leaf_key()?;
    g.ca.grant(&key, rank, g.generation)
        .inspect_err(|e| tracing::warn!(rank, %e, "no leaf certificate for a worker"))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::knobs;
    use control::PeerTable;

    fn slot(host: &str, slot: u32) -> SlotId {
        SlotId {
            host: host.into(),
            slot,
        }
    }

    fn ca() -> JobCa {
        JobCa::from_secret(&control::Secret::from_hex(&"5a".repeat(32)).unwrap()).unwrap()
    }

    /// Workers on QUIC or TLS get the job's CA and a leaf for their own key,
    /// named for their rank and generation; a worker on TCP gets none.
    #[test]
    fn quic_and_tls_workers_are_granted_a_leaf_for_their_rank() {
        let ranks = vec![slot("a", 0), slot("a", 1), slot("b", 0)];
        let key = |i: u8| control::pki::LeafKey::generate().map(|k| (i, k.public()));
        let keys: Vec<_> = (0..2).map(|i| key(i).unwrap().1).collect();
        let addrs: HashMap<SlotId, PeerAddress> = [
            (
                ranks[0].clone(),
                PeerAddress::quic(([127, 0, 0, 1], 9000).into(), keys[0]),
            ),
            (
                ranks[1].clone(),
                PeerAddress::tls(([127, 0, 0, 1], 9001).into(), keys[1]),
            ),
            (
                ranks[2].clone(),
                PeerAddress::tcp(([10, 0, 0, 2], 9002).into()),
            ),
        ]
        .into();
        let k = knobs();
        let ca = ca();
        let g = AssignmentBase {
            generation: Generation(4),
            knobs: &k,
            data_token: 7,
            loopback_as: Some([10, 0, 0, 1].into()),
            ca: &ca,
        };
        let a = assignments(&g, &ranks, &addrs).unwrap().each;
        let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
        for r in 0..2 {
            let grant = a[r].tls.as_ref().expect("a grant for a QUIC or TLS worker");
            assert_eq!(grant.ca, ca.certificate());
            assert!(
                has(&grant.leaf, &keys[r].0),
                "rank {r}'s leaf certifies its key"
            );
            let name = control::pki::leaf_name(r, Generation(4));
            assert!(
                has(&grant.leaf, name.as_bytes()),
                "rank {r}'s leaf is named {name}"
            );
        }
        assert!(a[2].tls.is_none());
        // Handed to the other host with this machine's routable address.
        assert_eq!(
            a[2].peers.get(0).unwrap().quic_addr(),
            Some((SocketAddr::from(([10, 0, 0, 1], 9000)), keys[0]))
        );
        assert_eq!(
            a[2].peers.get(1).unwrap().tls_addr(),
            Some((SocketAddr::from(([10, 0, 0, 1], 9001)), keys[1]))
        );
    }

    #[test]
    fn ranks_keep_the_given_order_and_hosts_number_by_first_rank() {
        // Survivors a/0, b/0, a/1, then a newcomer on c.
        let ranks = vec![slot("a", 0), slot("b", 0), slot("a", 1), slot("c", 0)];
        let addrs: HashMap<SlotId, PeerAddress> = ranks
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    s.clone(),
                    PeerAddress::tcp(([127, 0, 0, 1], 9000 + i as u16).into()),
                )
            })
            .collect();
        let k = knobs();
        let g = AssignmentBase {
            generation: Generation(3),
            knobs: &k,
            data_token: 7,
            loopback_as: None,
            ca: &ca(),
        };
        let a = assignments(&g, &ranks, &addrs).unwrap().each;
        assert!(a.iter().all(|x| *x.hosts == [0, 1, 0, 2] && x.size == 4));
        let t: Vec<(u32, u32, u32, u32)> = a
            .iter()
            .map(|x| (x.local_rank, x.local_size, x.cross_rank, x.cross_size))
            .collect();
        assert_eq!(t, [(0, 2, 0, 3), (0, 1, 1, 3), (1, 2, 0, 1), (0, 1, 2, 3)]);
        assert_eq!(
            a[3].peers.get(3).unwrap().tcp_addr().map(|a| a.port()),
            Some(9003)
        );
        assert!(
            a.iter()
                .all(|x| x.generation == Generation(3) && x.data_token == 7)
        );
        let mut short = addrs.clone();
        short.remove(&slot("b", 0));
        assert_eq!(assignments(&g, &ranks, &short).unwrap_err(), slot("b", 0));
    }

    /// A generation across this machine and others: the loopback addresses
    /// of this machine's workers are handed out as its routable address,
    /// ports kept; every other address is left as it is.
    #[test]
    fn loopback_addresses_become_routable_when_the_generation_spans_hosts() {
        let ranks = vec![slot("localhost", 0), slot("10.0.0.2", 0)];
        let addrs: HashMap<SlotId, PeerAddress> = [
            (
                ranks[0].clone(),
                PeerAddress::tcp(([127, 0, 0, 1], 9000).into()),
            ),
            (
                ranks[1].clone(),
                PeerAddress::tcp(([10, 0, 0, 2], 9001).into()),
            ),
        ]
        .into();
        let k = knobs();
        let g = AssignmentBase {
            generation: Generation(1),
            knobs: &k,
            data_token: 7,
            loopback_as: Some([10, 0, 0, 1].into()),
            ca: &ca(),
        };
        let a = assignments(&g, &ranks, &addrs).unwrap().each;
        let PeerTable::Whole(whole) = &a[1].peers else {
            panic!("a small generation's whole table")
        };
        let peers: Vec<_> = whole.iter().map(|p| p.tcp_addr().unwrap()).collect();
        assert_eq!(
            peers,
            [
                SocketAddr::from(([10, 0, 0, 1], 9000)),
                SocketAddr::from(([10, 0, 0, 2], 9001))
            ]
        );
        assert_eq!(a[0].peers, a[1].peers);
    }
}
