//! Addresses on demand, the worker's side: the data plane's lookups of the
//! peers its assignment left out ([`control::PeerTable::Some`]), asked of
//! the coordinator over the control connection and answered by id.
//!
//! ```text
//!  data plane ── PeerBook::get(r) ──► ControlLookup ── Lookup{id, g, ranks} ──► coordinator
//!                                        ▲ oneshot                                  │
//!  control task ── Addresses{id, ..} ── Lookups::answer ◄───────────────────────────┘
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use collectives::{Lookup, PeerBook, Rank};
use control::{Generation, PeerAddress, PeerTable, WorkerMsg};
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};

/// How long a lookup waits for its answer (a control connection that
/// dropped and came back lost it).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

type Waiter = oneshot::Sender<Vec<(u32, PeerAddress)>>;

/// The lookups waiting for their answers.
#[derive(Debug, Default)]
pub struct Lookups {
    next: AtomicU32,
    waiting: Mutex<HashMap<u32, Waiter>>,
}

impl Lookups {
    fn wait(&self) -> (u32, oneshot::Receiver<Vec<(u32, PeerAddress)>>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id, tx);
        (id, rx)
    }

    /// Hands the coordinator's answer `entries` to lookup `id` (an answer
    /// nobody waits for any more is dropped).
    pub fn answer(&self, id: u32, entries: Vec<(u32, PeerAddress)>) {
        if let Some(tx) = self.lock().remove(&id) {
            let _ = tx.send(entries);
        }
    }

    fn forget(&self, id: u32) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Waiter>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Looks addresses of `generation` up through the control task's queue.
#[derive(Debug)]
pub(crate) struct ControlLookup {
    generation: Generation,
    out: mpsc::Sender<WorkerMsg>,
    lookups: Arc<Lookups>,
}

impl Lookup for ControlLookup {
    fn look_up(
        &self,
        ranks: Vec<Rank>,
    ) -> BoxFuture<'static, Result<Vec<(Rank, PeerAddress)>, String>> {
        let (id, answer) = self.lookups.wait();
        let (out, lookups, generation) = (self.out.clone(), self.lookups.clone(), self.generation);
        Box::pin(async move {
            let ranks = ranks
                .into_iter()
                .filter_map(|r| u32::try_from(r).ok())
                .collect();
            let ask = WorkerMsg::Lookup {
                id,
                generation,
                ranks,
            };
            if out.send(ask).await.is_err() {
                lookups.forget(id);
                return Err("the control connection is gone".to_owned());
            }
            match tokio::time::timeout(LOOKUP_TIMEOUT, answer).await {
                Ok(Ok(entries)) => Ok(entries.into_iter().map(|(r, a)| (r as Rank, a)).collect()),
                Ok(Err(_)) => Err("the control task ended".to_owned()),
                Err(_) => {
                    lookups.forget(id);
                    Err(format!(
                        "the coordinator did not answer within {LOOKUP_TIMEOUT:?}"
                    ))
                }
            }
        })
    }
}

/// The book of an assignment's addresses: its whole table, or the part it
/// carried with lookups of the rest through `control` (`None`: a worker
/// without a coordinator, which is given whole tables only).
pub(crate) fn book(
    peers: &PeerTable,
    size: usize,
    generation: Generation,
    control: Option<(&mpsc::Sender<WorkerMsg>, &Arc<Lookups>)>,
) -> Arc<PeerBook> {
    Arc::new(match peers {
        PeerTable::Whole(all) => PeerBook::whole(all),
        PeerTable::Some(some) => {
            let lookup = control.map(|(out, lookups)| {
                Arc::new(ControlLookup {
                    generation,
                    out: out.clone(),
                    lookups: lookups.clone(),
                }) as Arc<dyn Lookup>
            });
            let given = some.iter().map(|(r, a)| (*r as Rank, a.clone()));
            PeerBook::partial(size, given, lookup)
        }
    })
}
