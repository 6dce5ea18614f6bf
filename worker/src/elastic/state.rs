//! Training state that survives membership changes: committed in memory,
//! restored after a failure, synced from rank 0 into every new generation.

use collectives::{CollectiveError, TransportError};

use crate::{EngineError, ObjectError, ReduceOp, Session, Worker};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a training function stopped early.
#[derive(Debug, thiserror::Error)]
pub enum Interrupt {
    /// A peer failed (or the coordinator said so): roll back to the last
    /// commit and carry on in the next generation.
    #[error("workers failed: {0}")]
    WorkersFailed(WorkersFailed),
    /// Hosts were added or removed: carry on in the next generation from
    /// here, with no rollback. Raised by [`State::commit`].
    #[error("hosts were updated")]
    HostsUpdated,
    /// Anything else: the run ends with this error.
    #[error("{0}")]
    Fatal(String),
}

/// Which workers failed, as far as this rank saw it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct WorkersFailed {
    /// The peer this rank lost, when the data plane said which (a
    /// coordinator's `Reset` or a timeout does not).
    pub lost: Option<PeerLost>,
    pub why: String,
}

/// A peer's data-plane connection broke: rank `rank` of `generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLost {
    pub rank: usize,
    pub generation: collectives::Generation,
}

impl WorkersFailed {
    /// A failure this rank was told of, with no peer named.
    pub fn because(why: impl Into<String>) -> Self {
        Self {
            lost: None,
            why: why.into(),
        }
    }
}

impl From<EngineError> for Interrupt {
    fn from(e: EngineError) -> Self {
        match &e {
            // The data plane broke: a peer died, timed out or the generation
            // was ended.
            EngineError::Collective(c) => Interrupt::WorkersFailed(WorkersFailed {
                lost: peer_lost(c),
                why: e.to_string(),
            }),
            EngineError::ShutDown => {
                Interrupt::WorkersFailed(WorkersFailed::because(e.to_string()))
            }
            other => Interrupt::Fatal(other.to_string()),
        }
    }
}

/// The peer a collective lost, if that is why it failed.
fn peer_lost(e: &CollectiveError) -> Option<PeerLost> {
    match e {
        CollectiveError::Transport(TransportError::PeerLost {
            rank, generation, ..
        }) => Some(PeerLost {
            rank: *rank,
            generation: *generation,
        }),
        _ => None,
    }
}

impl From<ObjectError> for Interrupt {
    fn from(e: ObjectError) -> Self {
        match e {
            ObjectError::Collective(c) => c.into(),
            other => Interrupt::Fatal(other.to_string()),
        }
    }
}

/// A training state (model, optimizer state, epoch, batch: any serde value)
/// with a committed copy. Read and change it through [`State::get`] and
/// [`State::get_mut`].
#[derive(Clone, Debug)]
pub struct State<T> {
    current: T,
    committed: T,
    commits: u64,
    /// The worker's optimizer steps ([`Session::steps`]) at the last commit.
    committed_steps: u64,
}

/// Name of the tensor in which ranks agree on host updates.
const HOST_UPDATES: &str = "elastic.host_updates";

impl<T: Clone + Serialize + DeserializeOwned> State<T> {
    pub fn new(value: T) -> Self {
        Self {
            committed: value.clone(),
            current: value,
            commits: 0,
            committed_steps: 0,
        }
    }

    pub fn get(&self) -> &T {
        &self.current
    }

    pub fn get_mut(&mut self) -> &mut T {
        &mut self.current
    }

    /// The last committed value.
    pub fn committed(&self) -> &T {
        &self.committed
    }

    /// How many times this rank committed (syncs included).
    pub fn commits(&self) -> u64 {
        self.commits
    }

    /// The worker's optimizer steps ([`Session::steps`]) at the last commit:
    /// where a restore goes back to.
    pub fn committed_steps(&self) -> u64 {
        self.committed_steps
    }

    /// Keeps the current value (and the worker's step count) as the one to
    /// come back to, then [`State::check_host_updates`].
    pub fn commit(&mut self, w: &Worker) -> Result<(), Interrupt> {
        w.block_on(self.commit_async(w))
    }

    /// [`State::commit`] for async code.
    pub async fn commit_async(&mut self, s: &Session) -> Result<(), Interrupt> {
        self.save(s);
        self.check_host_updates_async(s).await
    }

    fn save(&mut self, s: &Session) {
        self.committed = self.current.clone();
        self.committed_steps = s.steps();
        self.commits += 1;
    }

    /// Goes back to the last commit (and, in [`super::run()`], the worker's
    /// step count to [`State::committed_steps`]).
    pub fn restore(&mut self) {
        self.current = self.committed.clone();
    }

    /// Makes every rank's state and step count rank 0's (and commits it).
    pub fn sync(&mut self, w: &Worker) -> Result<(), Interrupt> {
        w.block_on(self.sync_async(w))
    }

    /// [`State::sync`] for async code.
    pub async fn sync_async(&mut self, s: &Session) -> Result<(), Interrupt> {
        // One object: each broadcast is a round of the whole generation.
        let (current, steps) = s
            .broadcast_object_as::<_, (T, u64)>(&(&self.current, s.steps()), 0)
            .await?;
        self.current = current;
        s.set_steps(steps);
        self.save(s);
        Ok(())
    }

    /// [`Interrupt::HostsUpdated`] when the coordinator announced a host
    /// update to any rank; every rank decides the same (they take the
    /// maximum of their flags), so all of them leave at the same commit.
    pub fn check_host_updates(&self, w: &Worker) -> Result<(), Interrupt> {
        w.block_on(self.check_host_updates_async(w))
    }

    /// [`State::check_host_updates`] for async code.
    pub async fn check_host_updates_async(&self, s: &Session) -> Result<(), Interrupt> {
        if !s.is_elastic() {
            return Ok(());
        }
        let flag = vec![u8::from(s.hosts_updated())];
        let any = s
            .allreduce_async(Some(HOST_UPDATES), flag, ReduceOp::Max)
            .finish()
            .await?;
        if any.data.first().copied().unwrap_or(0) > 0 {
            return Err(Interrupt::HostsUpdated);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn commit_restore_and_sync_in_a_world_of_one() {
        let w = crate::worker::alone();
        assert!(!w.is_elastic());
        let mut st = State::new((vec![1.0f32, 2.0], 0u64));
        st.get_mut().1 = 5;
        st.commit(&w).unwrap();
        assert_eq!(st.commits(), 1);
        st.get_mut().0[0] = 9.0;
        st.get_mut().1 = 7;
        st.restore();
        assert_eq!(st.get(), &(vec![1.0, 2.0], 5));
        st.get_mut().1 = 6;
        st.sync(&w).unwrap();
        assert_eq!(st.committed(), &(vec![1.0, 2.0], 6));
        assert_eq!(st.commits(), 2);
        w.shutdown();
    }

    #[test]
    fn only_data_plane_failures_are_worker_failures() {
        assert!(matches!(
            Interrupt::from(EngineError::ShutDown),
            Interrupt::WorkersFailed(WorkersFailed { lost: None, .. })
        ));
        // A lost peer is named, typed, up to the elastic layer.
        let lost = TransportError::PeerLost {
            rank: 3,
            generation: collectives::Generation(5),
            cause: collectives::LossCause::Closed,
        };
        let e = EngineError::Collective(std::sync::Arc::new(lost.into()));
        match Interrupt::from(e) {
            Interrupt::WorkersFailed(f) => {
                assert_eq!(
                    f.lost,
                    Some(PeerLost {
                        rank: 3,
                        generation: collectives::Generation(5)
                    })
                );
                assert!(
                    f.why.contains("peer rank 3 lost in generation 5"),
                    "{}",
                    f.why
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Interrupt::from(EngineError::from(crate::engine::Mismatch::NoSubmitter {
                name: "grad.0".into()
            })),
            Interrupt::Fatal(_)
        ));
        assert!(matches!(
            Interrupt::from(ObjectError::Decode("bad".into())),
            Interrupt::Fatal(_)
        ));
    }
}
