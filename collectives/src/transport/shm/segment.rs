//! The shared segment of one pair of ranks: an anonymous memory file
//! (`memfd_create`), never a name in `/dev/shm`, so that nothing of it
//! outlives the last process that maps it, whatever kills them.
//!
//! ```text
//!  0            PAGE                       PAGE + stride
//!  | (unused)   | ring 0: header + cap     | ring 1: header + cap |
//! ```
//! The dialing rank creates it, sizes it with `fallocate` (a full memory
//! cgroup fails here, not with `SIGBUS` later), seals its size, and offers
//! `(pid, fd, cap, nonce)` over the already authenticated TCP connection;
//! the peer opens `/proc/<pid>/fd/<fd>` only if that link names the memory
//! file carrying the nonce, so it never maps anything else.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use nix::fcntl::{FallocateFlags, FcntlArg, SealFlag, fallocate, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

use super::ring::{HEADER, Ring};
use crate::sys::SharedMap;

const PAGE: usize = 4096;
const NAME_PREFIX: &str = "elasticrun-";

/// Seals every segment carries: its size can never change again.
fn seals() -> SealFlag {
    SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
}

/// What the creator tells its peer so that it can open the same segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Offer {
    pub(crate) pid: u32,
    pub(crate) fd: i32,
    pub(crate) cap: u64,
    pub(crate) nonce: [u8; 16],
}

/// A mapped segment holding the two rings of a pair of ranks.
#[derive(Debug)]
pub(crate) struct Segment {
    map: Arc<SharedMap>,
    /// The creator's descriptor, kept until the peer has opened its own.
    fd: Option<OwnedFd>,
    cap: usize,
    nonce: [u8; 16],
}

/// Bytes from one ring's start to the next's.
fn stride(cap: usize) -> usize {
    (HEADER + cap).div_ceil(PAGE) * PAGE
}

fn total_len(cap: usize) -> usize {
    PAGE + 2 * stride(cap)
}

fn name(nonce: &[u8; 16]) -> String {
    let hex: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
    format!("{NAME_PREFIX}{hex}")
}

impl Segment {
    /// Creates a segment whose rings hold `cap` bytes each (rounded up to pages).
    pub(crate) fn create(cap: usize) -> std::io::Result<Self> {
        let cap = cap.max(1).div_ceil(PAGE) * PAGE;
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(std::io::Error::other)?;
        let flags = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
        let fd = memfd_create(name(&nonce).as_str(), flags)?;
        let len = total_len(cap);
        fallocate(&fd, FallocateFlags::empty(), 0, len as i64)?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals()))?;
        let map = SharedMap::map(&fd, len)?;
        Ok(Self {
            map: Arc::new(map),
            fd: Some(fd),
            cap,
            nonce,
        })
    }

    /// What the peer needs to open this segment.
    pub(crate) fn offer(&self) -> Option<Offer> {
        Some(Offer {
            pid: std::process::id(),
            fd: self.fd.as_ref()?.as_raw_fd(),
            cap: self.cap as u64,
            nonce: self.nonce,
        })
    }

    /// Closes the creator's descriptor once the peer holds the segment: the
    /// mappings keep it alive, and it goes when the last one goes.
    pub(crate) fn release_fd(&mut self) {
        self.fd = None;
    }

    /// Opens the segment a peer on this host offered, after checking that
    /// the descriptor is that peer's sealed memory file of the right size.
    pub(crate) fn open(offer: &Offer) -> std::io::Result<Self> {
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let cap = usize::try_from(offer.cap).map_err(|_| bad("ring size out of range"))?;
        if cap == 0 || !cap.is_multiple_of(PAGE) || cap > 1 << 32 {
            return Err(bad("ring size is not a page multiple up to 4 GiB"));
        }
        let path = format!("/proc/{}/fd/{}", offer.pid, offer.fd);
        let expected = format!("/memfd:{} (deleted)", name(&offer.nonce));
        if std::fs::read_link(&path)?.as_os_str() != expected.as_str() {
            return Err(bad("the offered descriptor is not the offered memory file"));
        }
        let file = File::options().read(true).write(true).open(&path)?;
        let len = total_len(cap);
        if file.metadata()?.size() != len as u64 {
            return Err(bad("the memory file's size is not the offered one"));
        }
        let fd = OwnedFd::from(file);
        let sealed = SealFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GET_SEALS)?);
        if !sealed.contains(seals()) {
            return Err(bad("the memory file's size is not sealed"));
        }
        let map = SharedMap::map(&fd, len)?;
        Ok(Self {
            map: Arc::new(map),
            fd: None,
            cap,
            nonce: offer.nonce,
        })
    }

    /// Ring `i` (0 or 1) of this segment.
    pub(crate) fn ring(&self, i: usize) -> Option<Ring> {
        if i > 1 {
            return None;
        }
        Ring::new(self.map.clone(), PAGE + i * stride(self.cap), self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_opens_the_offered_segment_and_sees_the_same_bytes() {
        let mut a = Segment::create(5000).unwrap();
        let offer = a.offer().unwrap();
        assert_eq!(offer.cap, 8192);
        let b = Segment::open(&offer).unwrap();
        a.release_fd();
        let mut p = super::super::ring::Producer::new(a.ring(1).unwrap());
        let mut c = super::super::ring::Consumer::new(b.ring(1).unwrap());
        p.push(b"across").unwrap();
        let mut got = [0u8; 6];
        assert_eq!(c.pop(&mut got).unwrap(), 6);
        assert_eq!(&got, b"across");
        assert!(a.offer().is_none());
    }

    #[test]
    fn offers_naming_anything_else_are_refused() {
        let a = Segment::create(4096).unwrap();
        let good = a.offer().unwrap();
        let wrong_nonce = Offer {
            nonce: [0; 16],
            ..good
        };
        assert!(Segment::open(&wrong_nonce).is_err());
        let stdin = Offer { fd: 0, ..good };
        assert!(Segment::open(&stdin).is_err());
        let wrong_size = Offer {
            cap: good.cap * 2,
            ..good
        };
        assert!(Segment::open(&wrong_size).is_err());
        let odd = Offer { cap: 100, ..good };
        assert!(Segment::open(&odd).is_err());
        let nobody = Offer {
            pid: u32::MAX,
            ..good
        };
        assert!(Segment::open(&nobody).is_err());
    }
}
