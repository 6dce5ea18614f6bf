//! The handle a process keeps across its generations so that each one's
//! TCP links (and the shared memory riding on them) may carry on into the
//! next ([`crate::transport::stream`]'s `carry.rs` says how).

use std::sync::Arc;

use super::{TcpRead, TcpWrite};
use crate::transport::stream::carry::Carried;

/// This process's links between generations: give the same one to the
/// [`super::TcpConfig::carry`] of every generation it enters. Its endpoint
/// then publishes the process ([`control::PeerAddress::process`]), and a
/// peer in the next generation that held a link to it takes that link up
/// instead of dialing. Connections on demand only; TLS links are made anew
/// each generation (each generation's certificates admit them).
#[derive(Clone)]
pub struct LinkCarry {
    plain: Arc<Carried<TcpRead, TcpWrite>>,
}

impl LinkCarry {
    /// A handle for this process, under a number drawn at random.
    pub fn new() -> Self {
        let mut key = [0u8; 8];
        // A clock's nanoseconds stand in where the system gives no randomness.
        if getrandom::fill(&mut key).is_err() {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            let nanos = t.map(|d| d.as_nanos() as u64).unwrap_or_default();
            key = (nanos ^ u64::from(std::process::id())).to_le_bytes();
        }
        Self {
            plain: Arc::new(Carried::new(u64::from_le_bytes(key))),
        }
    }

    /// The number peers know this process by.
    pub fn process(&self) -> u64 {
        self.plain.me()
    }

    /// Links this process took up from one generation into a later one.
    pub fn carried(&self) -> u64 {
        self.plain.carried()
    }

    pub(crate) fn plain(&self) -> &Arc<Carried<TcpRead, TcpWrite>> {
        &self.plain
    }
}

impl Default for LinkCarry {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for LinkCarry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkCarry")
            .field("process", &format_args!("{:016x}", self.process()))
            .field("carried", &self.carried())
            .finish()
    }
}
