//! Frames after the handshake: each carries an HMAC-SHA256 tag over its
//! sequence number in its direction and its bytes, under that direction's key
//! ([`crate::FrameKeys`]). The sequence number is counted at both ends, never
//! sent, so a frame that is injected, replayed, reordered, dropped or taken
//! from another connection does not verify, and the link ends on it.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Bytes of the tag after each sealed frame's message.
pub(crate) const TAG: usize = 32;

/// One direction's key and count.
#[derive(Clone)]
struct Direction {
    key: Hmac<Sha256>,
    count: u64,
}

impl Direction {
    fn new(key: &[u8; 32]) -> Self {
        // HMAC takes keys of any length, so this cannot fail for 32 bytes.
        let key = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        Direction { key, count: 0 }
    }

    fn mac(&self, body: &[u8]) -> Hmac<Sha256> {
        let mut m = self.key.clone();
        m.update(&self.count.to_be_bytes());
        m.update(body);
        m
    }
}

/// The keys of an authenticated link, one per direction.
#[derive(Clone)]
pub(crate) struct Sealing {
    send: Direction,
    recv: Direction,
}

impl std::fmt::Debug for Sealing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sealing(sent {}, received {})",
            self.send.count, self.recv.count
        )
    }
}

impl Sealing {
    pub(crate) fn new(send: &[u8; 32], recv: &[u8; 32]) -> Self {
        Sealing {
            send: Direction::new(send),
            recv: Direction::new(recv),
        }
    }

    /// The next outgoing frame's tag, which follows `body` on the wire.
    pub(crate) fn tag(&mut self, body: &[u8]) -> [u8; TAG] {
        let tag = self.send.mac(body).finalize().into_bytes().into();
        self.send.count += 1;
        tag
    }

    /// The message bytes of the next incoming frame, if its tag verifies;
    /// otherwise the number of the frame that failed.
    pub(crate) fn open<'a>(&mut self, frame: &'a [u8]) -> Result<&'a [u8], u64> {
        let n = self.recv.count;
        let Some(at) = frame.len().checked_sub(TAG) else {
            return Err(n);
        };
        let (body, tag) = frame.split_at(at);
        self.recv.mac(body).verify_slice(tag).map_err(|_| n)?;
        self.recv.count += 1;
        Ok(body)
    }
}
