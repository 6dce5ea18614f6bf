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
//!
//! With it come the pair's doorbells: two pipes, one a direction, whose
//! far ends the peer opens the same way (and checks to be pipes). Ringing
//! one is a byte written to a pipe, about a fifth of the CPU of a byte sent
//! over the loopback TCP connection, which stays as the proof of life.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use nix::fcntl::{FallocateFlags, FcntlArg, OFlag, SealFlag, fallocate, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::unistd::pipe2;

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
    /// The creator's descriptors of the pipe the peer reads its wake-ups
    /// from and of the one it rings the creator through.
    pub(crate) bells: [i32; 2],
}

/// One side's doorbells: the pipe it is woken through, the pipe it wakes
/// the peer through.
#[derive(Debug)]
pub(crate) struct Bells {
    pub(crate) wake_me: OwnedFd,
    pub(crate) ring_peer: OwnedFd,
}

/// A mapped segment holding the two rings of a pair of ranks.
#[derive(Debug)]
pub(crate) struct Segment {
    map: Arc<SharedMap>,
    /// The creator's descriptor, kept until the peer has opened its own.
    fd: Option<OwnedFd>,
    cap: usize,
    nonce: [u8; 16],
    /// This side's doorbells, until the link takes them.
    bells: Option<Bells>,
    /// The creator's copies of the peer's ends, kept until the peer has
    /// opened its own.
    peer_bells: Option<Bells>,
}

/// Opens process `pid`'s descriptor `fd`, which must be a pipe, for writing
/// or reading, without blocking.
fn open_pipe(pid: u32, fd: i32, write: bool) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let path = format!("/proc/{pid}/fd/{fd}");
    let file = File::options()
        .read(!write)
        .write(write)
        .custom_flags(OFlag::O_NONBLOCK.bits())
        .open(&path)?;
    if !file.metadata()?.file_type().is_fifo() {
        let what = "an offered doorbell is not a pipe";
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, what));
    }
    Ok(OwnedFd::from(file))
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
        let flags = OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        // `to_peer` wakes the peer, `to_me` wakes this side.
        let (to_peer_r, to_peer_w) = pipe2(flags)?;
        let (to_me_r, to_me_w) = pipe2(flags)?;
        Ok(Self {
            map: Arc::new(map),
            fd: Some(fd),
            cap,
            nonce,
            bells: Some(Bells {
                wake_me: to_me_r,
                ring_peer: to_peer_w,
            }),
            peer_bells: Some(Bells {
                wake_me: to_peer_r,
                ring_peer: to_me_w,
            }),
        })
    }

    /// What the peer needs to open this segment.
    pub(crate) fn offer(&self) -> Option<Offer> {
        let peer = self.peer_bells.as_ref()?;
        Some(Offer {
            pid: std::process::id(),
            fd: self.fd.as_ref()?.as_raw_fd(),
            cap: self.cap as u64,
            nonce: self.nonce,
            bells: [peer.wake_me.as_raw_fd(), peer.ring_peer.as_raw_fd()],
        })
    }

    /// Closes the creator's descriptors of what the peer has opened: the
    /// mappings keep the memory alive, and it goes when the last one goes;
    /// each pipe keeps the peer's end.
    pub(crate) fn release_fd(&mut self) {
        self.fd = None;
        self.peer_bells = None;
    }

    /// This side's doorbells, for its link (once).
    pub(crate) fn take_bells(&mut self) -> Option<Bells> {
        self.bells.take()
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
        let bells = Bells {
            wake_me: open_pipe(offer.pid, offer.bells[0], false)?,
            ring_peer: open_pipe(offer.pid, offer.bells[1], true)?,
        };
        Ok(Self {
            map: Arc::new(map),
            fd: None,
            cap,
            nonce: offer.nonce,
            bells: Some(bells),
            peer_bells: None,
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
    fn each_side_rings_the_other_through_its_pipe() {
        let mut a = Segment::create(4096).unwrap();
        let mut b = Segment::open(&a.offer().unwrap()).unwrap();
        a.release_fd();
        let (a, b) = (a.take_bells().unwrap(), b.take_bells().unwrap());
        for (from, to) in [(&a, &b), (&b, &a)] {
            let mut out = File::from(from.ring_peer.try_clone().unwrap());
            std::io::Write::write_all(&mut out, &[1]).unwrap();
            let mut inn = File::from(to.wake_me.try_clone().unwrap());
            let mut got = [0u8; 4];
            assert_eq!(std::io::Read::read(&mut inn, &mut got).unwrap(), 1);
        }
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
        // A doorbell that is the memory file, not a pipe.
        let not_a_pipe = Offer {
            bells: [good.fd, good.bells[1]],
            ..good
        };
        assert!(Segment::open(&not_a_pipe).is_err());
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
