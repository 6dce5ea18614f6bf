//! The elastic run loop.

use crate::{RejoinError, Worker};
use serde::Serialize;
use serde::de::DeserializeOwned;

#[cfg(test)]
use super::state::WorkersFailed;
use super::state::{Interrupt, State};

/// Why [`run`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum ElasticError {
    /// The training function failed for a reason other than membership.
    #[error("{0}")]
    Train(String),
    /// Workers failed in a job that is not elastic: nothing to recover with.
    #[error("{0} (not an elastic job, so this is final)")]
    NotElastic(String),
    /// This worker has no place in the job any more (its host was removed):
    /// the process should exit cleanly.
    #[error("{0}")]
    Left(String),
    #[error("cannot rejoin the job: {0}")]
    Rejoin(RejoinError),
}

/// What a completed [`run`] hands back.
#[derive(Debug)]
pub struct Outcome<R> {
    pub value: R,
    /// Generations this worker moved through after its first (each failure
    /// or host update it lived through).
    pub resets: u32,
}

/// Runs `train` until it returns a value: first syncs `state` from rank 0;
/// on [`Interrupt::WorkersFailed`] restores the last commit, joins the next
/// generation and syncs again; on [`Interrupt::HostsUpdated`] joins the next
/// generation and syncs with no rollback. `train` gets the worker of the
/// current generation each time (rank and size may have changed).
pub fn run<T, R, F>(
    w: &mut Worker,
    state: &mut State<T>,
    mut train: F,
) -> Result<Outcome<R>, ElasticError>
where
    T: Clone + Serialize + DeserializeOwned,
    F: FnMut(&Worker, &mut State<T>) -> Result<R, Interrupt>,
{
    let mut resets = 0;
    // The step this worker had reached in the generation it left.
    let mut reached = None;
    loop {
        let attempt = state.sync(w).and_then(|()| {
            w.report_running(reached);
            train(w, state)
        });
        reached = Some(w.steps());
        match attempt {
            Ok(value) => return Ok(Outcome { value, resets }),
            Err(Interrupt::Fatal(why)) => return Err(ElasticError::Train(why)),
            Err(Interrupt::WorkersFailed(failed)) => {
                if !w.is_elastic() {
                    return Err(ElasticError::NotElastic(failed.why));
                }
                let lost = failed.lost.map(|p| p.rank);
                tracing::info!(rank = w.rank(), ?lost, why = %failed.why, "workers failed; restoring the last commit");
                state.restore();
                w.set_steps(state.committed_steps());
            }
            Err(Interrupt::HostsUpdated) => {
                tracing::info!(
                    rank = w.rank(),
                    "hosts updated; moving to the next generation"
                );
            }
        }
        resets += 1;
        rejoin(w)?;
    }
}

/// Joins the next generation, again as long as its data plane fails to come
/// up (a peer failing in between makes the coordinator start another): what
/// [`run`] does between two attempts, for run loops written elsewhere (the
/// Python package's `elastic.run`).
pub fn rejoin(w: &mut Worker) -> Result<(), ElasticError> {
    loop {
        match w.rejoin() {
            Ok(()) => return Ok(()),
            Err(RejoinError::Mesh { generation, source }) => {
                tracing::info!(%generation, %source, "data plane did not come up; rejoining");
            }
            Err(RejoinError::Left { reason }) => return Err(ElasticError::Left(reason)),
            Err(e) => return Err(ElasticError::Rejoin(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn outside_an_elastic_job_a_failure_is_final() {
        let mut w = crate::worker::alone();
        let mut st = State::new(0u32);
        let mut calls = 0;
        let e = run(&mut w, &mut st, |_, s| {
            calls += 1;
            *s.get_mut() += 1;
            Err::<(), _>(Interrupt::WorkersFailed(WorkersFailed::because(
                "peer rank 1 lost",
            )))
        })
        .unwrap_err();
        assert!(matches!(e, ElasticError::NotElastic(_)), "{e}");
        assert_eq!(calls, 1);
        let done = run(&mut w, &mut st, |_, s| Ok(*s.get())).unwrap();
        // Outside an elastic job nothing is restored: the next run starts
        // from the value the failed call left (its first sync commits it).
        assert_eq!((done.value, done.resets), (1, 0));
        w.shutdown();
    }
}
