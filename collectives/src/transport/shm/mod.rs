//! Shared memory between ranks on one host, under the TCP and TLS
//! transports.
//!
//! Every TCP data-plane connection (inside its TLS session under
//! `--transport tls`), once its handshake has proven the peer, asks whether
//! the two ranks can share memory: the dialer offers a fresh segment
//! ([`segment`]) if its host key ([`host_key`]: the kernel's boot id and the
//! network and pid namespaces) is the peer's, and the acceptor takes it if
//! it can open it. Then the pair's frames go through two rings in the
//! segment ([`ring`]) instead of the socket (or the TLS session over it),
//! which stays open as the pair's proof of life beside two pipes, its
//! doorbells ([`link`]). Either side can decline (the off switch, another
//! host, a container that hides `/proc`), and the pair stays on its
//! connection; both sides always agree.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub(crate) mod link;
pub(crate) mod ring;
pub(crate) mod segment;

pub use link::{ShmRead, ShmWrite};
use segment::{Offer, Segment};

/// Settings of the shared-memory links.
#[derive(Clone, Copy, Debug)]
pub struct ShmConfig {
    /// Whether to offer and take shared memory at all. Default on.
    pub enabled: bool,
    /// Bytes of each direction's ring (rounded up to pages). Default 1 MiB:
    /// small enough that what one side writes is still in cache when the
    /// other reads it (16 MiB allreduces took 4.5 ms with 1 MiB rings, 6.4 ms
    /// with 4 MiB).
    pub ring_bytes: usize,
    /// How long a side that finds nothing to read (or no room to write)
    /// yields and looks again before it sleeps on the doorbell. Default 100 µs
    /// (zero where the ranks sharing memory outnumber the CPUs).
    pub spin: Duration,
    /// Bytes of each direction's ring where the links are told to sleep at
    /// once (a zero `spin`: a program whose own threads keep every core
    /// busy, as the Python package says), when more than `ring_bytes`.
    /// Default 16 MiB. There a side that fills its ring waits for its peer
    /// to be scheduled, a scheduler's time slice while the peer's core
    /// computes: a 28.9 MB DDP bucket took 73 ms through 1 MiB rings beside
    /// the backward pass, 15 ms through 16 MiB (docs/BENCHMARKS.md). A
    /// crowded host's links, which sleep at once too, keep `ring_bytes`: a
    /// pair's segment is allocated whole when the pair is made (0.4 ms for
    /// two 1 MiB rings, 4-12 ms for two of 16 MiB), which a reset pays for
    /// every new pair.
    pub busy_ring_bytes: usize,
}

/// Each direction's ring by default: [`ShmConfig::ring_bytes`].
pub(crate) const RING_BYTES: usize = 1 << 20;

impl ShmConfig {
    /// Each direction's ring of links made with these settings on a host
    /// that is not crowded: `busy_ring_bytes` where `spin` is zero and that
    /// is larger, `ring_bytes` otherwise (a full mesh or on-demand pairs may
    /// take less where memory is short).
    pub fn told_ring_bytes(&self) -> usize {
        if self.spin.is_zero() {
            self.ring_bytes.max(self.busy_ring_bytes)
        } else {
            self.ring_bytes
        }
    }
}

impl Default for ShmConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            ring_bytes: RING_BYTES,
            spin: Duration::from_micros(100),
            busy_ring_bytes: 16 << 20,
        }
    }
}

/// Says which host and namespaces a process lives in: peers with the same
/// key see the same processes under `/proc` and the same network, and are
/// one host to the job. `None` where it cannot be told.
pub(crate) fn host_key() -> Option<[u8; 32]> {
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let mut h = Sha256::new();
    h.update(boot.trim().as_bytes());
    for ns in ["net", "pid", "mnt"] {
        let m = std::fs::metadata(format!("/proc/self/ns/{ns}")).ok()?;
        h.update(m.dev().to_le_bytes());
        h.update(m.ino().to_le_bytes());
    }
    Some(h.finalize().into())
}

/// Bytes of shared memory a full mesh of `local` ranks of one host
/// allocates up front: a segment of two rings per pair.
pub(crate) fn full_mesh_bytes(local: usize, ring_bytes: usize) -> u64 {
    let n = local as u64;
    n * n.saturating_sub(1) / 2 * 2 * ring_bytes as u64
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub(crate) fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `cfg` with the rings a full mesh of `local` ranks of this host can
/// have, and this host's key for it: `None` where shared memory is off, or
/// (said) where the mesh's segments would take more than half the memory
/// this host has available even with rings of the default size
/// ([`mesh_ring`]): 128 ranks' full mesh is 16 GiB of segments, allocated up
/// front, and the kernel's OOM killer ends the job long before a segment
/// fails. Its pairs then stay on their connections.
pub(crate) fn for_full_mesh(cfg: ShmConfig, local: usize) -> (ShmConfig, Option<[u8; 32]>) {
    if !cfg.enabled {
        return (cfg, None);
    }
    let available = available();
    let Some(ring_bytes) = mesh_ring(local, cfg.ring_bytes, available) else {
        let need = full_mesh_bytes(local, cfg.ring_bytes.min(RING_BYTES));
        tracing::warn!(
            local,
            need_mib = need >> 20,
            available_mib = available.unwrap_or(0) >> 20,
            "no shared memory in this full mesh: the segments of every pair of this host's \
             ranks would take more than half the memory available (--connections on-demand \
             makes only the pairs the collectives use)"
        );
        return (cfg, None);
    };
    (ShmConfig { ring_bytes, ..cfg }, host_key())
}

/// `cfg` with rings that `local` ranks' pairs made on demand can have:
/// those of a full mesh ([`mesh_ring`], the most that could be made), and
/// never more than asked; the default ones where not even those fit, as
/// before rings grew on busy hosts.
pub(crate) fn for_pairs(cfg: ShmConfig, local: usize) -> ShmConfig {
    if cfg.ring_bytes <= RING_BYTES {
        // Never halved below the default: nothing to look up.
        return cfg;
    }
    let ring_bytes = mesh_ring(local, cfg.ring_bytes, available()).unwrap_or(RING_BYTES);
    ShmConfig { ring_bytes, ..cfg }
}

/// This host's `MemAvailable`, in bytes (`None` where not known).
fn available() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| mem_available(&m))
}

/// The rings of a full mesh of `local` ranks whose segments take at most
/// half of `available` bytes (unknown: `wanted`): `wanted`, else halved down
/// to the default ([`RING_BYTES`], or `wanted` if smaller) if that fits,
/// else `None`.
pub(crate) fn mesh_ring(local: usize, wanted: usize, available: Option<u64>) -> Option<usize> {
    let Some(available) = available else {
        return Some(wanted);
    };
    let floor = wanted.min(RING_BYTES);
    let mut ring = wanted;
    while full_mesh_bytes(local, ring) > available / 2 {
        if ring <= floor {
            return None;
        }
        ring = (ring / 2).max(floor);
    }
    Some(ring)
}

const OFFER_LEN: usize = 32 + 4 + 4 + 8 + 16 + 4 + 4;
const NO_OFFER: u8 = 0;
const AN_OFFER: u8 = 1;
const TAKEN: u8 = 1;
const DECLINED: u8 = 0;

fn encode(host: &[u8; 32], o: &Offer) -> [u8; 1 + OFFER_LEN] {
    let mut b = [0u8; 1 + OFFER_LEN];
    b[0] = AN_OFFER;
    b[1..33].copy_from_slice(host);
    b[33..37].copy_from_slice(&o.pid.to_le_bytes());
    b[37..41].copy_from_slice(&o.fd.to_le_bytes());
    b[41..49].copy_from_slice(&o.cap.to_le_bytes());
    b[49..65].copy_from_slice(&o.nonce);
    b[65..69].copy_from_slice(&o.bells[0].to_le_bytes());
    b[69..73].copy_from_slice(&o.bells[1].to_le_bytes());
    b
}

fn decode(b: &[u8; OFFER_LEN]) -> ([u8; 32], Offer) {
    let mut host = [0u8; 32];
    host.copy_from_slice(&b[..32]);
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(&b[48..64]);
    let offer = Offer {
        pid: u32::from_le_bytes([b[32], b[33], b[34], b[35]]),
        fd: i32::from_le_bytes([b[36], b[37], b[38], b[39]]),
        cap: u64::from_le_bytes([b[40], b[41], b[42], b[43], b[44], b[45], b[46], b[47]]),
        nonce,
        bells: [
            i32::from_le_bytes([b[64], b[65], b[66], b[67]]),
            i32::from_le_bytes([b[68], b[69], b[70], b[71]]),
        ],
    };
    (host, offer)
}

/// The dialer's side: offers a segment if it can (`host`: this process's
/// [`host_key`], `None` with shared memory off), and returns it if the peer
/// took it. Its ring 0 carries the dialer's frames.
pub(crate) async fn offer<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    cfg: &ShmConfig,
    host: Option<[u8; 32]>,
) -> std::io::Result<Option<Segment>> {
    let made = match host {
        Some(host) => match Segment::create(cfg.ring_bytes) {
            Ok(seg) => seg.offer().map(|o| (host, o, seg)),
            Err(e) => {
                tracing::debug!(%e, "no shared-memory segment; staying on TCP");
                None
            }
        },
        None => None,
    };
    let Some((host, o, mut seg)) = made else {
        s.write_all(&[NO_OFFER]).await?;
        s.flush().await?;
        s.read_u8().await?;
        return Ok(None);
    };
    s.write_all(&encode(&host, &o)).await?;
    s.flush().await?;
    match s.read_u8().await? {
        TAKEN => {
            seg.release_fd();
            Ok(Some(seg))
        }
        _ => Ok(None),
    }
}

/// The acceptor's side: takes the peer's segment if it is on this host
/// (`host`, as for [`offer`]) and can be opened. Its ring 1 carries the
/// acceptor's frames.
pub(crate) async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    host: Option<[u8; 32]>,
) -> std::io::Result<Option<Segment>> {
    let kind = s.read_u8().await?;
    if kind != AN_OFFER {
        s.write_all(&[DECLINED]).await?;
        s.flush().await?;
        return Ok(None);
    }
    let mut b = [0u8; OFFER_LEN];
    s.read_exact(&mut b).await?;
    let (theirs, o) = decode(&b);
    let taken = if host == Some(theirs) {
        Segment::open(&o)
            .inspect_err(|e| tracing::debug!(%e, "peer's segment refused; staying on TCP"))
            .ok()
    } else {
        None
    };
    s.write_all(&[if taken.is_some() { TAKEN } else { DECLINED }])
        .await?;
    s.flush().await?;
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_meshs_segments_grow_with_the_square_of_its_local_ranks() {
        let mib = 1 << 20;
        assert_eq!(full_mesh_bytes(0, mib), 0);
        assert_eq!(full_mesh_bytes(1, mib), 0);
        assert_eq!(full_mesh_bytes(2, mib), 2 * mib as u64);
        // 128 ranks: 8,128 pairs of two 1 MiB rings, the 16 GiB that ran
        // a 23 GiB machine out of memory.
        assert_eq!(full_mesh_bytes(128, mib), 8_128 * 2 * mib as u64);
    }

    #[test]
    fn available_memory_is_read_from_meminfo_and_garbage_is_none() {
        let m = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   23000000 kB\n";
        assert_eq!(mem_available(m), Some(23_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots kB\n"), None);
        assert_eq!(mem_available(""), None);
    }

    #[test]
    fn a_full_mesh_too_large_for_this_host_takes_smaller_rings_or_none() {
        const MIB: usize = 1 << 20;
        let gib = |g: u64| Some(g << 30);
        // Two ranks' 16 MiB rings: 64 MiB of segments.
        assert_eq!(mesh_ring(2, 16 * MIB, gib(1)), Some(16 * MIB));
        // 16 ranks: 3.75 GiB with 16 MiB rings, 1.9 with 8.
        assert_eq!(mesh_ring(16, 16 * MIB, gib(4)), Some(8 * MIB));
        // 128 ranks: 16 GiB with the default rings.
        assert_eq!(mesh_ring(128, 16 * MIB, gib(64)), Some(2 * MIB));
        assert_eq!(mesh_ring(128, 16 * MIB, gib(24)), None);
        assert_eq!(mesh_ring(128, MIB, gib(24)), None);
        // Rings below the default are never made larger, nor halved.
        assert_eq!(mesh_ring(3, 4096, gib(1)), Some(4096));
        assert_eq!(mesh_ring(3, 4096, Some(4096)), None);
        // Memory not known: as asked.
        assert_eq!(mesh_ring(128, 16 * MIB, None), Some(16 * MIB));
        // 2 TiB rings: no machine running the tests has half of a
        // three-rank mesh's 12 TiB available; rings it has room for.
        let huge = ShmConfig {
            ring_bytes: 1 << 41,
            ..ShmConfig::default()
        };
        let (cfg, host) = for_full_mesh(huge, 3);
        assert!(
            (MIB..1 << 41).contains(&cfg.ring_bytes),
            "{}",
            cfg.ring_bytes
        );
        assert_eq!(host, host_key());
        let pairs = for_pairs(huge, 3).ring_bytes;
        assert!((MIB..1 << 41).contains(&pairs), "{pairs}");
        let (cfg, host) = for_full_mesh(ShmConfig::default(), 3);
        assert_eq!((cfg.ring_bytes, host), (MIB, host_key()));
        let off = ShmConfig {
            enabled: false,
            ..ShmConfig::default()
        };
        assert_eq!(for_full_mesh(off, 3).1, None);
    }

    #[test]
    fn an_offer_survives_its_encoding() {
        let o = Offer {
            pid: 4242,
            fd: -7,
            cap: 1 << 22,
            nonce: [9; 16],
            bells: [11, -12],
        };
        let b = encode(&[3; 32], &o);
        let mut body = [0u8; OFFER_LEN];
        body.copy_from_slice(&b[1..]);
        assert_eq!(decode(&body), ([3; 32], o));
    }

    #[test]
    fn this_process_has_a_host_key_and_it_is_stable() {
        let k = host_key().expect("a Linux host key");
        assert_eq!(host_key(), Some(k));
    }
}
