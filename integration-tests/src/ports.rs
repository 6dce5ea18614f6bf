//! Ports for daemons a test starts and tells their port (etcd, sshd,
//! Slurm's, a `MASTER_PORT`): chosen below the kernel's ephemeral range.
//!
//! A port found free by binding port 0 and let go comes from the ephemeral
//! range, where the kernel hands ports out to every other socket of the
//! machine: another test's `bind(0)`, or the source port of any outgoing
//! connection (a thousand-worker test makes thousands). Between letting it
//! go and the daemon binding it, one of those may take it, and the daemon
//! exits at start with "address in use" (seen: an etcd member of a test
//! running beside others). Below the range the kernel hands nothing out,
//! so only another test's choice could clash: each process starts at an
//! offset of its own, goes on from there, and checks that the port binds.

use std::net::{IpAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The ports chosen from: above the well-known and common service ports,
/// below Linux's default ephemeral range (32768-60999).
const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

/// Where this process is in the range (its offset plus the ports taken).
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// A port on `ip` that binds now and that the kernel does not hand out to
/// other sockets.
///
/// # Panics
/// When no port of the range binds.
pub fn unused_on(ip: IpAddr) -> u16 {
    let start = std::process::id().wrapping_mul(7919) % COUNT;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..COUNT {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + n % COUNT).expect("a port below 32,000");
        if TcpListener::bind((ip, port)).is_ok() {
            return port;
        }
    }
    panic!("no port of {FIRST}-{} binds on {ip}", FIRST + COUNT - 1);
}

/// [`unused_on`] 127.0.0.1.
pub fn unused() -> u16 {
    unused_on(IpAddr::from([127, 0, 0, 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_distinct_and_bindable() {
        let ports: Vec<u16> = (0..50).map(|_| unused()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for p in ports {
            assert!((20_000..32_000).contains(&p), "{p}");
            TcpListener::bind(("127.0.0.1", p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        }
    }

    #[test]
    fn a_port_in_use_is_passed_over() {
        let _ = unused();
        // The port the next call tries first (unless a test beside this
        // one takes it meanwhile), held.
        let next = NEXT.load(Ordering::Relaxed);
        let port = u16::try_from(FIRST + next % COUNT).unwrap();
        let held = TcpListener::bind(("127.0.0.1", port));
        let after = unused();
        if let Ok(held) = &held {
            assert_ne!(after, port, "a bound port was handed out");
            assert_eq!(held.local_addr().unwrap().port(), port);
        }
    }
}
