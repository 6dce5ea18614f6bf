//! The elastic run loop.

use crate::{RejoinError, Session, Worker};
use futures::future::BoxFuture;
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

/// What the run loop does after an attempt of the training function.
enum Next<R> {
    Done(R),
    Rejoin,
}

/// The run loop's one decision, whichever driver runs it: after `attempt`,
/// finish, give up, or (after a failure, having restored the last commit)
/// move to the next generation.
fn after<T, R>(
    s: &Session,
    state: &mut State<T>,
    attempt: Result<R, Interrupt>,
) -> Result<Next<R>, ElasticError>
where
    T: Clone + Serialize + DeserializeOwned,
{
    match attempt {
        Ok(value) => Ok(Next::Done(value)),
        Err(Interrupt::Fatal(why)) => Err(ElasticError::Train(why)),
        Err(Interrupt::WorkersFailed(failed)) => {
            if !s.is_elastic() {
                return Err(ElasticError::NotElastic(failed.why));
            }
            let lost = failed.lost.map(|p| p.rank);
            tracing::info!(rank = s.rank(), ?lost, why = %failed.why, "workers failed; restoring the last commit");
            state.restore();
            s.set_steps(state.committed_steps());
            let generation = s.place().generation;
            s.observe.0.rolled_back(generation, state.committed_steps());
            Ok(Next::Rejoin)
        }
        Err(Interrupt::HostsUpdated) => {
            tracing::info!(
                rank = s.rank(),
                "hosts updated; moving to the next generation"
            );
            Ok(Next::Rejoin)
        }
    }
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
        match after(w, state, attempt)? {
            Next::Done(value) => return Ok(Outcome { value, resets }),
            Next::Rejoin => resets += 1,
        }
        rejoin(w)?;
    }
}

/// [`run()`] for async code, on a [`Session`]: `train` returns the future
/// of one attempt.
pub async fn run_async<T, R, F>(
    s: &mut Session,
    state: &mut State<T>,
    mut train: F,
) -> Result<Outcome<R>, ElasticError>
where
    T: Clone + Serialize + DeserializeOwned + Send,
    F: for<'a> FnMut(&'a Session, &'a mut State<T>) -> BoxFuture<'a, Result<R, Interrupt>>,
{
    let mut resets = 0;
    let mut reached = None;
    loop {
        let attempt = match state.sync_async(s).await {
            Ok(()) => {
                s.report_running(reached);
                train(s, state).await
            }
            Err(e) => Err(e),
        };
        reached = Some(s.steps());
        match after(s, state, attempt)? {
            Next::Done(value) => return Ok(Outcome { value, resets }),
            Next::Rejoin => resets += 1,
        }
        rejoin_async(s).await?;
    }
}

/// Joins the next generation, again as long as its data plane fails to come
/// up (a peer failing in between makes the coordinator start another): what
/// [`run`] does between two attempts, for run loops written elsewhere (the
/// Python package's `elastic.run`).
pub fn rejoin(w: &mut Worker) -> Result<(), ElasticError> {
    let Worker { rt, session } = w;
    rt.block_on(rejoin_async(session))
}

/// [`rejoin()`] for async code.
pub async fn rejoin_async(s: &mut Session) -> Result<(), ElasticError> {
    loop {
        match s.rejoin().await {
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
