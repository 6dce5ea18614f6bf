//! Allreduces of lent host memory ([`crate::LentHost`]): the same names,
//! negotiation, response cache, fusion and errors as an owned tensor, the
//! elements reduced where they lie, and the lent memory handed back with the
//! result.

use super::error::{EngineError, Internal};
use super::messages::Kind;
use super::{Engine, Place, Reply, Storage};
use crate::sys::LentHost;

/// A submitted allreduce of lent memory: [`LentHandle::poll`] says whether it
/// is done, [`LentHandle::wait`] blocks until it is and gives the memory back.
#[derive(Debug)]
pub struct LentHandle {
    reply: Reply,
}

impl LentHandle {
    /// Whether the result is ready (then [`LentHandle::wait`] does not block).
    pub fn poll(&mut self) -> bool {
        self.reply.poll()
    }

    /// Blocks until the collective completes; the lent memory then holds the
    /// result. On an error the engine has let go of the memory too (its
    /// owner was dropped). Must not be called from inside an async runtime.
    pub fn wait(self) -> Result<LentHost, EngineError> {
        match self.reply.wait()?.data {
            Storage::Lent(l) => Ok(l),
            other => Err(Internal::NotLent {
                name: String::from("(a result)"),
                held: other.dtype(),
            }
            .into()),
        }
    }
}

impl Engine {
    /// Submits lent memory for `kind` (an allreduce) under `name`, as one
    /// tensor of `shape` whose grouped members have the lengths `parts`.
    pub fn submit_lent(
        &self,
        name: String,
        kind: Kind,
        data: LentHost,
        shape: Vec<usize>,
        parts: Vec<usize>,
    ) -> LentHandle {
        let at = Place {
            dtype: data.dtype(),
            shape,
            parts,
        };
        LentHandle {
            reply: self.submit_storage(name, kind, at, Storage::Lent(data), Vec::new()),
        }
    }
}
