//! The swarm's coordinator process: elasticrun's job driver, server, codec
//! and authentication, as `elasticrun` runs them, with one seam replaced: its
//! launcher starts no process but orders the load generator to start a
//! simulated worker ([`super::pipe`]), and hears from it how each ended.
//! Living in its own process, its CPU time and memory are its own.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::sync::{Arc, Mutex, PoisonError};

use control::Secret;
use coordinator::HostSlots;
use coordinator::config::{self, cli::Cli, file::ConfigFile};
use coordinator::job::discovery::HostFeed;
use coordinator::job::{Say, Seams, Stops, WallClock};
use coordinator::launch::process::describe;
use coordinator::launch::{LaunchError, Launcher, Started};
use coordinator::metrics::JobMetrics;
use coordinator::server::Server;
use coordinator::store::MemoryStore;
use elastic::SlotId;
use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, watch};

use super::pipe::{self, Order};
use super::{SECRET_VAR, Shape};

/// Runs the job over `shape`'s hosts until it ends; its exit code is
/// elasticrun's for the same ending.
pub(crate) async fn run(shape: &Shape, options: &[String]) -> ExitCode {
    match drive(shape, options).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("swarm coordinator: {e}");
            ExitCode::from(2)
        }
    }
}

async fn drive(shape: &Shape, options: &[String]) -> Result<ExitCode, String> {
    let _ = control::limits::raise_open_files();
    let secret = std::env::var(SECRET_VAR)
        .map_err(|_| format!("{SECRET_VAR} is not set"))
        .and_then(|hex| Secret::from_hex(&hex).map_err(|e| e.to_string()))?;
    let cfg = job_config(shape, options)?;
    let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let server = Server::bind(any, secret.clone(), None)
        .await
        .map_err(|e| e.to_string())?;
    let table = Arc::new(Table::default());
    let orders = Orders::default();
    orders.send(&Order::Listening(server.local_addr()));
    tokio::spawn(hear_exits(table.clone()));
    let (hosts, feed) = HostFeed::channel();
    hosts
        .send(shape.hosts())
        .await
        .map_err(|_| "the job ended before its hosts came")?;
    let seams = Seams {
        launcher: Box::new(PipeLauncher {
            next: 0,
            orders,
            table,
        }),
        arrivals: server.into_arrivals(),
        hosts: feed,
        store: Box::new(MemoryStore::new()),
        clock: WallClock::System,
        stops: Stops::never(),
        say: Say::stderr(false),
        ca: coordinator::job::job_ca(&secret).map_err(|e| e.to_string())?,
        metrics: JobMetrics::new(),
    };
    let ending = coordinator::job::run_on(&cfg, seams)
        .await
        .map_err(|e| e.to_string())?;
    drop(hosts);
    Ok(ExitCode::from(ending.code()))
}

/// An elastic job of exactly `shape`'s workers, with `options` as given on
/// elasticrun's command line.
fn job_config(shape: &Shape, options: &[String]) -> Result<config::JobConfig, String> {
    let n = shape.workers.to_string();
    let mut argv: Vec<String> = ["elasticrun", "--host-discovery-script", "fed-by-the-swarm"]
        .map(String::from)
        .to_vec();
    argv.extend(["--min-np".into(), n.clone(), "--max-np".into(), n]);
    argv.extend(options.iter().cloned());
    argv.push("simulated-worker".into());
    let cli = Cli::parse_args(argv).map_err(|e| e.to_string())?;
    config::resolve(&cli, &|_| None, &ConfigFile::default()).map_err(|e| e.to_string())
}

impl Shape {
    /// `node-0000:S`, `node-0001:S`, ... enough for every worker.
    pub(crate) fn hosts(&self) -> Vec<HostSlots> {
        let per = self.slots_per_host.max(1);
        (0..self.workers.div_ceil(per))
            .map(|h| HostSlots {
                host: format!("node-{h:04}"),
                slots: per,
            })
            .collect()
    }
}

/// The launcher's orders, on stdout.
#[derive(Clone, Debug, Default)]
struct Orders {
    out: Arc<Mutex<()>>,
}

impl Orders {
    fn send(&self, order: &Order) {
        let _held = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = std::io::stdout().lock();
        // The load generator gone, the job ends when its workers' exits
        // never come: nothing better to do with a failed write.
        let _ = writeln!(out, "{}", order.line()).and_then(|()| out.flush());
    }
}

/// How the workers ended, as the load generator says.
#[derive(Debug, Default)]
struct Table {
    exits: Mutex<HashMap<u32, ExitStatus>>,
    /// Any exit: the driver's news (a permit waits if nobody does).
    news: Notify,
    /// Bumped on every exit: what a kill waits on.
    version: watch::Sender<u64>,
}

impl Table {
    fn status(&self, id: u32) -> Option<ExitStatus> {
        let exits = self.exits.lock().unwrap_or_else(PoisonError::into_inner);
        exits.get(&id).copied()
    }
}

/// Reads the load generator's exit lines until it closes the pipe, which
/// ends this process (after a grace in which a job ending anyway exits as
/// it does): nobody is left to run the workers.
async fn hear_exits(table: Arc<Table>) {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match pipe::parse_exit(&line) {
            Ok((id, status)) => {
                let mut exits = table.exits.lock().unwrap_or_else(PoisonError::into_inner);
                exits.insert(id, ExitStatus::from_raw(status));
                drop(exits);
                table.news.notify_one();
                table.version.send_modify(|v| *v += 1);
            }
            Err(e) => eprintln!("swarm coordinator: {e}"),
        }
    }
    // The load generator closes the pipe when it ends, which may be just
    // as this job ends too: a job still running after a grace is orphaned.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    eprintln!("swarm coordinator: the load generator is gone; ending");
    std::process::exit(3);
}

#[derive(Debug)]
struct PipeLauncher {
    next: u32,
    orders: Orders,
    table: Arc<Table>,
}

impl Launcher for PipeLauncher {
    fn start<'a>(
        &'a mut self,
        _label: usize,
        slot: &'a SlotId,
    ) -> BoxFuture<'a, Result<Box<dyn Started>, LaunchError>> {
        self.next += 1;
        let id = self.next;
        self.orders.send(&Order::Start {
            id,
            host: slot.host.clone(),
            slot: slot.slot,
        });
        let started: Box<dyn Started> = Box::new(Piped {
            id,
            orders: self.orders.clone(),
            table: self.table.clone(),
        });
        async move { Ok(started) }.boxed()
    }

    fn finish(&mut self) -> BoxFuture<'_, ()> {
        async {}.boxed()
    }

    fn exit_news(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(self.table.news.notified())
    }

    /// Every exit is news.
    fn exit_sweep(&self) -> std::time::Duration {
        coordinator::launch::EXIT_SWEEP
    }
}

/// A simulated worker, as the driver sees it.
#[derive(Debug)]
struct Piped {
    id: u32,
    orders: Orders,
    table: Arc<Table>,
}

impl Started for Piped {
    fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        Ok(self.table.status(self.id))
    }

    fn how(&self, status: ExitStatus) -> String {
        describe(status)
    }

    fn terminate(&mut self) {
        self.orders.send(&Order::Term { id: self.id });
    }

    fn kill(&mut self) -> BoxFuture<'_, ()> {
        self.orders.send(&Order::Kill { id: self.id });
        let mut version = self.table.version.subscribe();
        async move {
            while self.table.status(self.id).is_none() {
                if version.changed().await.is_err() {
                    return;
                }
            }
        }
        .boxed()
    }
}
