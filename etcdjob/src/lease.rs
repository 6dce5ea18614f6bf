//! A lease kept alive for as long as its holder lives: renewed every third
//! of its TTL over a keep-alive stream that is opened again when it breaks
//! (an etcd restart, a lost member), each outage said once when it starts
//! and once when it ends. A lease that expired anyway is [`LeaseHealth::Lost`]
//! and stays so; its holder must stop acting on it.

use std::time::Duration;

use etcd_client::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{EtcdError, MIN_LEASE_TTL, REQUEST_TIMEOUT, timed};

/// How a lease stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseHealth {
    /// Renewed last at this time.
    Alive { renewed: Instant },
    /// Expired (or revoked): every key on it is gone.
    Lost { why: String },
}

/// A lease and the task that keeps it alive (ended on drop).
#[derive(Debug)]
pub struct Lease {
    id: i64,
    ttl: Duration,
    health: watch::Receiver<LeaseHealth>,
    keeper: JoinHandle<()>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

impl Lease {
    /// Grants a lease of `ttl` (at least [`MIN_LEASE_TTL`], whole seconds)
    /// and starts keeping it alive; `holder` names it in log lines.
    pub async fn grant(client: &Client, ttl: Duration, holder: &str) -> Result<Lease, EtcdError> {
        let ttl = Duration::from_secs(ttl.max(MIN_LEASE_TTL).as_secs_f64().ceil() as u64);
        let secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        let mut c = client.clone();
        let granted = timed("granting a lease", c.lease_grant(secs, None)).await?;
        let id = granted.id();
        let (tx, health) = watch::channel(LeaseHealth::Alive {
            renewed: Instant::now(),
        });
        let keeper = tokio::spawn(keep(client.clone(), id, ttl, tx, holder.to_owned()));
        Ok(Lease {
            id,
            ttl,
            health,
            keeper,
        })
    }

    pub fn id(&self) -> i64 {
        self.id
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn health(&self) -> LeaseHealth {
        self.health.borrow().clone()
    }

    /// Resolves once the lease cannot be counted on: lost, or not renewed
    /// for `ttl - margin` (it may expire before the next renewal could land).
    pub async fn lapsed(&self, margin: Duration) -> String {
        lapsed(self.health.clone(), self.ttl, margin).await
    }

    /// [`Lease::lapsed`], as a future that owns what it watches.
    pub fn lapse(
        &self,
        margin: Duration,
    ) -> impl std::future::Future<Output = String> + Send + 'static + use<> {
        lapsed(self.health.clone(), self.ttl, margin)
    }

    /// Resolves, with why, once etcd says the lease is gone.
    pub fn lost(&self) -> impl std::future::Future<Output = String> + Send + 'static + use<> {
        let mut rx = self.health.clone();
        async move {
            loop {
                if let LeaseHealth::Lost { why } = &*rx.borrow_and_update() {
                    return why.clone();
                }
                if rx.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        }
    }

    /// Ends the lease now (its keys go at once), best effort.
    pub async fn revoke(self, client: &Client) {
        self.keeper.abort();
        let mut c = client.clone();
        if let Err(e) = timed("revoking a lease", c.lease_revoke(self.id)).await {
            tracing::debug!(%e, "cannot revoke the lease; it expires by itself");
        }
    }
}

/// Keeps lease `id` alive until it is lost.
async fn keep(
    client: Client,
    id: i64,
    ttl: Duration,
    tx: watch::Sender<LeaseHealth>,
    holder: String,
) {
    let every = ttl / 3;
    let mut renewed = Instant::now();
    let mut outage: Option<String> = None;
    loop {
        let why = match renew_stream(&client, id, every, &tx, &mut renewed, &mut outage).await {
            Ok(()) => return,
            Err(why) => why,
        };
        // Past its TTL it may be gone, or not: etcd extends every lease when
        // it elects a leader (after a restart, a lost member), so only etcd's
        // own answer says it is lost. A holder that must not act on a lease
        // that may have lapsed asks `lapsed`.
        if outage.is_none() {
            tracing::warn!(%holder, "etcd: cannot renew the lease ({why}); retrying");
            outage = Some(why);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Renews over one keep-alive stream until it fails (`Err`) or etcd says the
/// lease is gone (`Ok`, after sending [`LeaseHealth::Lost`]).
async fn renew_stream(
    client: &Client,
    id: i64,
    every: Duration,
    tx: &watch::Sender<LeaseHealth>,
    renewed: &mut Instant,
    outage: &mut Option<String>,
) -> Result<(), String> {
    let mut c = client.clone();
    let opened = tokio::time::timeout(REQUEST_TIMEOUT, c.lease_keep_alive(id)).await;
    let (mut keeper, mut stream) = match opened {
        Ok(Ok(kept)) => kept,
        // etcd's first answer on the stream says the lease is gone.
        Ok(Err(etcd_client::Error::LeaseKeepAliveError(e))) if e == "lease not found" => {
            return gone(id, tx);
        }
        Ok(Err(e)) => return Err(format!("opening a lease keep-alive failed: {e}")),
        Err(_) => {
            return Err(format!(
                "opening a lease keep-alive: no answer within {REQUEST_TIMEOUT:?}"
            ));
        }
    };
    loop {
        let wait = every.max(Duration::from_millis(500));
        match tokio::time::timeout(wait, keeper.keep_alive()).await {
            Ok(sent) => sent.map_err(|e| e.to_string())?,
            Err(_) => return Err("the keep-alive request was not taken".into()),
        }
        let answer = tokio::time::timeout(wait, stream.message());
        match answer.await {
            Ok(Ok(Some(r))) if r.ttl() > 0 => {
                *renewed = Instant::now();
                let _ = tx.send(LeaseHealth::Alive { renewed: *renewed });
                if outage.take().is_some() {
                    tracing::warn!("etcd: the lease is renewed again");
                }
            }
            Ok(Ok(Some(_))) => return gone(id, tx),
            Ok(Ok(None)) => return Err("the keep-alive stream ended".into()),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("no keep-alive answer".into()),
        }
        tokio::time::sleep(every).await;
    }
}

/// Says, and tells the lease's holder, that etcd no longer has lease `id`:
/// the end of its keeping ([`renew_stream`]'s `Ok`).
fn gone(id: i64, tx: &watch::Sender<LeaseHealth>) -> Result<(), String> {
    let why = "etcd no longer has it (expired)".to_owned();
    tracing::warn!(lease = format_args!("{id:x}"), "etcd lease lost: {why}");
    let _ = tx.send(LeaseHealth::Lost { why });
    Ok(())
}

/// The error of acting on a lost lease.
pub(crate) fn lost(id: i64, why: String) -> EtcdError {
    EtcdError::LeaseLost { id, why }
}

/// See [`Lease::lapsed`].
async fn lapsed(mut rx: watch::Receiver<LeaseHealth>, ttl: Duration, margin: Duration) -> String {
    loop {
        let renewed = match &*rx.borrow_and_update() {
            LeaseHealth::Lost { why } => return why.clone(),
            LeaseHealth::Alive { renewed } => *renewed,
        };
        let by = renewed + ttl.saturating_sub(margin);
        tokio::select! {
            () = tokio::time::sleep_until(by) => {
                if matches!(&*rx.borrow(), LeaseHealth::Alive { renewed: r } if *r == renewed) {
                    return format!("not renewed for {:?}", renewed.elapsed());
                }
            }
            changed = rx.changed() => {
                if changed.is_err() {
                    return "its keeper stopped".to_owned();
                }
            }
        }
    }
}
