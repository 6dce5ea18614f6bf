//! Ending a generation from outside its transport.
//!
//! The owner of a transport (an elastic worker's control task) may learn that
//! the generation is over before the transport notices: the coordinator says
//! a peer failed. [`Transport::breaker`](super::Transport::breaker) hands out
//! a [`Breaker`] for that, whatever the transport; ending through it fails
//! every pending and later operation with [`TransportError::Ended`].

use std::fmt::Debug;
use std::sync::Arc;

use super::mailbox::Mailbox;
use crate::error::TransportError;
use crate::tag::Generation;

/// What a [`Breaker`] ends: for the mailbox transports, this rank's mailbox.
pub(crate) trait Ends: Send + Sync + Debug {
    fn end(&self, err: TransportError);
}

impl<D: Send + 'static> Ends for Mailbox<D> {
    fn end(&self, err: TransportError) {
        self.fail(err);
    }
}

/// Ends one transport's generation from outside it: every waiting and later
/// call fails with [`TransportError::Ended`] at once (an elastic worker does
/// this when the coordinator says peers failed, instead of waiting for its
/// own sockets or timeouts to notice). Cheap to clone; ending twice keeps the
/// first reason.
#[derive(Clone, Debug)]
pub struct Breaker {
    generation: Generation,
    target: Arc<dyn Ends>,
}

impl Breaker {
    pub(crate) fn new(generation: Generation, target: Arc<dyn Ends>) -> Self {
        Self { generation, target }
    }

    /// The generation this breaker ends.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Ends the generation, saying why.
    pub fn end(&self, why: &str) {
        self.target.end(TransportError::Ended {
            generation: self.generation,
            why: why.into(),
        });
    }
}
