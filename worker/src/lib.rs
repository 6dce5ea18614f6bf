//! The runtime a training program links.
//!
//! [`init`] joins the job `elasticrun` started (or, run on its own, makes a world
//! of one); the returned [`Worker`] tells the program its place
//! ([`Worker::rank`], [`Worker::size`], local and cross ranks) and runs blocking
//! collectives on it. The asynchronous engine (negotiation, fusion, cycle time)
//! builds on this next.

pub mod engine;
mod env;
mod join;

use std::time::Duration;

use collectives::{
    CollectiveError, CollectiveOptions, Communicator, Generation, TcpConfig, TcpEndpoint,
    TcpTransport, Transport, TransportError,
};
use control::{HandshakeError, Knobs};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use collectives::{DType, Element, ReduceOp, bf16, f16};

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{var} {why}")]
    Environment { var: &'static str, why: String },
    #[error("cannot reach the coordinator at {0}")]
    Unreachable(std::net::SocketAddr),
    #[error("authentication with the coordinator failed: {0}")]
    Handshake(#[from] HandshakeError),
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    #[error("no assignment from the coordinator within {0:?}")]
    NoAssignment(Duration),
    #[error("data plane: {0}")]
    DataPlane(#[from] TransportError),
    #[error("{0}")]
    Io(String),
}

/// A collective failed; the message names the peer or the disagreement.
pub type Error = CollectiveError;

/// This process's place in the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub rank: usize,
    pub size: usize,
    pub local_rank: usize,
    pub local_size: usize,
    pub cross_rank: usize,
    pub cross_size: usize,
    pub generation: u64,
}

/// A joined worker. Dropping it without [`Worker::shutdown`] looks like a crash
/// to its peers.
#[derive(Debug)]
pub struct Worker {
    rt: tokio::runtime::Runtime,
    comm: Communicator<TcpTransport>,
    place: Place,
    knobs: Option<Knobs>,
}

/// Joins the job described by the environment `elasticrun` set, or makes a world
/// of one when there is none.
pub fn init() -> Result<Worker, InitError> {
    let launch = env::read(|k| std::env::var(k).ok())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("elasticrun-worker")
        .enable_all()
        .build()
        .map_err(|e| InitError::Io(e.to_string()))?;
    let Some(launch) = launch else {
        let comm = rt.block_on(alone())?;
        let place = Place {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            cross_rank: 0,
            cross_size: 1,
            generation: 0,
        };
        return Ok(Worker {
            rt,
            comm,
            place,
            knobs: None,
        });
    };
    let joined = rt.block_on(join::join(&launch))?;
    let a = &joined.assignment;
    let place = Place {
        rank: a.rank as usize,
        size: a.size as usize,
        local_rank: a.local_rank as usize,
        local_size: a.local_size as usize,
        cross_rank: a.cross_rank as usize,
        cross_size: a.cross_size as usize,
        generation: a.generation,
    };
    let knobs = Some(a.knobs.clone());
    rt.spawn(join::keep_alive(joined.link, a.generation));
    let comm = Communicator::new(joined.transport, CollectiveOptions::default());
    Ok(Worker {
        rt,
        comm,
        place,
        knobs,
    })
}

async fn alone() -> Result<Communicator<TcpTransport>, InitError> {
    let ep = TcpEndpoint::bind(([127, 0, 0, 1], 0).into(), TcpConfig::default()).await?;
    let addr = ep.local_addr()?;
    let t = ep.connect(0, Generation(0), &[addr]).await?;
    Ok(Communicator::new(t, CollectiveOptions::default()))
}

impl Worker {
    pub fn place(&self) -> Place {
        self.place
    }
    pub fn rank(&self) -> usize {
        self.place.rank
    }
    pub fn size(&self) -> usize {
        self.place.size
    }
    pub fn local_rank(&self) -> usize {
        self.place.local_rank
    }
    pub fn local_size(&self) -> usize {
        self.place.local_size
    }
    pub fn cross_rank(&self) -> usize {
        self.place.cross_rank
    }
    pub fn cross_size(&self) -> usize {
        self.place.cross_size
    }

    /// The engine settings elasticrun handed over (`None` when run alone).
    pub fn knobs(&self) -> Option<&Knobs> {
        self.knobs.as_ref()
    }

    /// Reduces `buf` over all ranks, in place.
    pub fn allreduce<T: Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<(), Error> {
        self.rt.block_on(self.comm.allreduce(buf, op))
    }

    /// Every rank's `input` (sizes may differ), concatenated in rank order.
    pub fn allgather<T: Element>(&self, input: &[T]) -> Result<Vec<T>, Error> {
        self.rt.block_on(self.comm.allgather(input)).map(|(v, _)| v)
    }

    /// Copies `root`'s `buf` into every rank's `buf`.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: usize) -> Result<(), Error> {
        self.rt.block_on(self.comm.broadcast(buf, root))
    }

    /// Sends block `j` of `input` (`splits[j]` elements) to rank `j`; returns what
    /// every rank sent here, in rank order, and how much each sent.
    pub fn alltoall<T: Element>(
        &self,
        input: &[T],
        splits: &[usize],
    ) -> Result<(Vec<T>, Vec<usize>), Error> {
        self.rt.block_on(self.comm.alltoall(input, splits))
    }

    /// Reduces `input` over all ranks and returns this rank's share (an even split,
    /// the first ranks taking one more element when it does not divide).
    pub fn reducescatter<T: Element>(&self, input: &[T], op: ReduceOp) -> Result<Vec<T>, Error> {
        let counts = collectives::schedule::even_counts(input.len(), self.size());
        let mut buf = input.to_vec();
        let mine = self
            .rt
            .block_on(self.comm.reducescatter(&mut buf, &counts, op))?;
        Ok(buf[mine].to_vec())
    }

    pub fn barrier(&self) -> Result<(), Error> {
        self.rt.block_on(self.comm.barrier())
    }

    /// Sends `value` from `root` to every rank (other ranks' values are ignored):
    /// any serde value, e.g. a model or a configuration.
    pub fn broadcast_object<V: Serialize + DeserializeOwned>(
        &self,
        value: &V,
        root: usize,
    ) -> Result<V, ObjectError> {
        let mut bytes = if self.rank() == root {
            bincode::serde::encode_to_vec(value, bincode::config::standard())
                .map_err(|e| ObjectError::Encode(e.to_string()))?
        } else {
            Vec::new()
        };
        let mut len = [bytes.len() as i64];
        self.broadcast(&mut len, root)?;
        let len =
            usize::try_from(len[0]).map_err(|_| ObjectError::Decode("negative length".into()))?;
        bytes.resize(len, 0);
        self.broadcast(&mut bytes, root)?;
        let (v, _) = bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
            .map_err(|e| ObjectError::Decode(e.to_string()))?;
        Ok(v)
    }

    /// Leaves the job cleanly (peers still finishing are not disturbed).
    pub fn shutdown(self) {
        let Worker { rt, comm, .. } = self;
        rt.block_on(comm.into_transport().shutdown());
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    #[error("cannot encode the object: {0}")]
    Encode(String),
    #[error("cannot decode the object: {0}")]
    Decode(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_is_a_world_of_one() {
        // The test process was not started by elasticrun.
        if std::env::var(env::COORDINATOR).is_ok() {
            return;
        }
        let w = init().unwrap();
        assert_eq!(
            (w.rank(), w.size(), w.local_size(), w.cross_size()),
            (0, 1, 1, 1)
        );
        let mut v = [1.0f32, 2.0];
        w.allreduce(&mut v, ReduceOp::Sum).unwrap();
        assert_eq!(v, [1.0, 2.0]);
        assert_eq!(w.allgather(&[7u8, 8]).unwrap(), vec![7, 8]);
        assert_eq!(
            w.broadcast_object(&("model".to_owned(), 3u32), 0).unwrap(),
            ("model".to_owned(), 3)
        );
        assert_eq!(
            w.reducescatter(&[1i64, 2, 3], ReduceOp::Max).unwrap(),
            vec![1, 2, 3]
        );
        w.barrier().unwrap();
        w.shutdown();
    }
}
