//! etcd mode (`--etcd URL`): N simulated pods against two real
//! `elasticrun serve` replicas and a real etcd. Each pod does what a
//! worker pod's runtime does: connects to etcd, takes a lease (kept alive),
//! claims a slot of its node on it, follows the leader's election key, and
//! speaks the control protocol to whoever leads (the same simulated worker
//! as launcher mode, registering again in its generation when the leader
//! changes). Phases: every pod assigned; the leader's CPU over the
//! heartbeats; the leader killed (every pod registered again with the new
//! leader, no new generation); one pod killed (its connection dropped, its
//! lease left to lapse: every survivor assigned a new generation); every
//! pod finished. etcd's requests per phase come from its `/metrics`
//! (`grpc_server_msg_received_total` by method, watchers).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use control::Secret;
use etcdjob::{Endpoints, JobName, Keys, LeaderWatch, Lease, WorkerRecord};
use rand::{RngExt, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::stats::{Stats, Tally, usage};
use super::workers::{self, Identity, Leader, Reach, Roster};
use super::{Args, Shape, ms, round};

/// The pods' and replicas' etcd lease, in seconds (the tests' setting:
/// a dead leader is replaced about this soon).
const LEASE_TTL: u64 = 2;
const ETCD_WITHIN: Duration = Duration::from_secs(30);

/// A pod's view of the election, as its runtime follows it.
#[derive(Debug)]
struct Follow(LeaderWatch);

impl Leader for Follow {
    fn addr(&self) -> Option<SocketAddr> {
        self.0.current().map(|(_, r)| r.addr)
    }
}

/// The replicas, the pods, and where they meet.
struct Pods {
    replicas: Vec<Child>,
    leader: LeaderWatch,
    etcd: SocketAddr,
    stats: Arc<Stats>,
    roster: Arc<Roster>,
    within: Duration,
}

/// Runs the phases against etcd at `url`; the figures.
pub(crate) async fn measure(
    args: &Args,
    shape: Shape,
    url: &str,
    seed: u64,
) -> Result<serde_json::Value, String> {
    let n = shape.workers;
    let job = format!("swarm-{}", std::process::id());
    let dir = std::env::temp_dir().join(&job);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let secret = Arc::new(Secret::generate().map_err(|e| e.to_string())?);
    let secret_file = dir.join("secret");
    std::fs::write(&secret_file, secret.to_hex()).map_err(|e| e.to_string())?;
    let endpoints = Endpoints::parse(url).map_err(|e| e.to_string())?;
    let etcd = metrics_addr(url)?;
    let client = etcdjob::connect(&endpoints, ETCD_WITHIN)
        .await
        .map_err(|e| e.to_string())?;
    let keys = Keys::new(&JobName::new(&job).map_err(|e| e.to_string())?);
    let serve = Serve {
        url: url.to_owned(),
        job: job.clone(),
        secret_file,
        dir: dir.clone(),
        n,
    };
    let t0 = Instant::now();
    let first = serve.start(0)?;
    let leader = LeaderWatch::start(&client, &keys);
    leader
        .wait(ETCD_WITHIN)
        .await
        .ok_or("no replica led the job")?;
    let mut pods = Pods {
        replicas: vec![first, serve.start(1)?],
        leader,
        etcd,
        stats: Arc::new(Stats::default()),
        roster: Arc::new(Roster::default()),
        within: Duration::from_secs_f64(args.within),
    };
    let before = etcd_counts(etcd).await;
    for id in 0..n {
        let node = format!("node-{:04}", id / shape.slots_per_host);
        pods.start_pod(id, node, &endpoints, &keys, &secret);
    }
    let (g1, assigned) = pods
        .wait("every pod assigned a generation", |t| {
            t.newest().filter(|(_, a)| a.workers == n)
        })
        .await?;
    let start = delta(&before, &etcd_counts(etcd).await);
    let steady = pods.steady(args.steady).await?;
    let (failover, made) = pods.fail_over(g1).await?;
    let loss = pods.lose_one(seed, g1).await?;
    let exit = pods.end().await?;
    let tally = pods.stats.now();
    // The replicas' logs stay for reading when anything went wrong.
    let kept = if tally.failures.is_empty() && exit == 0 {
        let _ = std::fs::remove_dir_all(&dir);
        None
    } else {
        Some(dir.display().to_string())
    };
    Ok(serde_json::json!({
        "mode": "etcd",
        "pods": n,
        "slots_per_host": shape.slots_per_host,
        "seed": seed,
        "start_ms": ms(assigned.last - t0),
        "etcd_requests_start": start,
        "leader_heartbeat_cpu_pct": steady.0,
        "etcd_requests_per_s_steady": steady.1,
        "failover_ms": failover.took_ms,
        "failover_new_generations": made,
        "etcd_requests_failover": failover.requests,
        "pod_loss_recovery_ms": loss.took_ms,
        "etcd_requests_pod_loss": loss.requests,
        "leader_exit_code": exit,
        "pod_failures": tally.failures.len(),
        "first_failures": tally.failures.iter().take(3).collect::<Vec<_>>(),
        "replica_logs": kept,
    }))
}

/// How a replica is started.
struct Serve {
    url: String,
    job: String,
    secret_file: PathBuf,
    dir: PathBuf,
    n: usize,
}

impl Serve {
    /// Starts replica `i` (`elasticrun serve`, beside this program), its
    /// output in the run's folder.
    fn start(&self, i: usize) -> Result<Child, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let elasticrun = exe.with_file_name("elasticrun");
        let log = std::fs::File::create(self.dir.join(format!("serve-{i}.log")))
            .map_err(|e| e.to_string())?;
        let n = self.n.to_string();
        let min = self.n.saturating_sub(1).max(1).to_string();
        Command::new(&elasticrun)
            .args(["serve", "--etcd", &self.url, "--job", &self.job])
            .arg("--secret-file")
            .arg(&self.secret_file)
            .args(["-np", &n, "--min-np", &min, "--max-np", &n])
            .args([
                "--lease-ttl",
                &LEASE_TTL.to_string(),
                "--start-timeout",
                "600",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", elasticrun.display()))
    }
}

struct Phase {
    took_ms: f64,
    requests: BTreeMap<String, f64>,
}

impl Pods {
    async fn wait<T>(&self, what: &str, done: impl Fn(&Tally) -> Option<T>) -> Result<T, String> {
        self.stats.wait_for(what, self.within, done).await
    }

    /// Starts pod `id` on `node`: its etcd session, then its worker.
    fn start_pod(
        &self,
        id: usize,
        node: String,
        endpoints: &Endpoints,
        keys: &Keys,
        secret: &Arc<Secret>,
    ) {
        let id = u32::try_from(id).unwrap_or(u32::MAX);
        let commands = self.roster.add(id);
        let (stats, roster) = (self.stats.clone(), self.roster.clone());
        let (endpoints, keys, secret) = (endpoints.clone(), keys.clone(), secret.clone());
        tokio::spawn(async move {
            match enter(id, &node, &endpoints, &keys).await {
                Ok((lease, slot, leader)) => {
                    let who = Identity {
                        id,
                        host: node,
                        slot,
                        coordinator: Reach::Leader(Arc::new(leader)),
                        secret,
                    };
                    workers::run(who, stats, commands).await;
                    // A killed pod's lease lapses on its own, as etcd sees it.
                    drop(lease);
                }
                Err(why) => stats.failed(format!("pod {id} on {node}: {why}")),
            }
            roster.remove(id);
        });
    }

    /// The leader's CPU over `seconds` of heartbeats, and etcd's requests
    /// a second meanwhile.
    async fn steady(&self, seconds: f64) -> Result<(f64, BTreeMap<String, f64>), String> {
        let pid = self.leader_pid().ok_or("no leader")?;
        let before = (
            usage(pid).ok_or("the leader ended")?,
            etcd_counts(self.etcd).await,
        );
        let at = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        let after = (
            usage(pid).ok_or("the leader ended")?,
            etcd_counts(self.etcd).await,
        );
        let wall = at.elapsed().as_secs_f64();
        let cpu = round((after.0.cpu_s - before.0.cpu_s) / wall * 100.0);
        // Requests a second; the watchers gauge as it stands.
        let per_s = (delta(&before.1, &after.1).into_iter())
            .map(|(k, v)| {
                let rate = if k == "watchers" { v } else { round(v / wall) };
                (k, rate)
            })
            .collect();
        Ok((cpu, per_s))
    }

    /// Kills the leading replica; times until every pod registered again
    /// with the next leader, and how many generations it made meanwhile.
    async fn fail_over(&mut self, g1: u64) -> Result<(Phase, usize), String> {
        let pid = self.leader_pid().ok_or("no leader")?;
        let before = etcd_counts(self.etcd).await;
        let n = self.roster.ids().len();
        let leading = (self.replicas.iter()).position(|c| c.id() == Some(pid));
        let leading =
            leading.ok_or_else(|| format!("the leader {pid} is not a replica of this run"))?;
        let mut leading = self.replicas.remove(leading);
        let at = Instant::now();
        leading
            .start_kill()
            .map_err(|e| format!("cannot kill the leader {pid}: {e}"))?;
        tokio::spawn(async move { leading.wait().await });
        let last = self
            .wait("every pod registered with the new leader", |t| {
                (t.reattached >= n).then_some(t.last_reattached).flatten()
            })
            .await?;
        // Let a reset, if the new leader were to make one, show itself.
        tokio::time::sleep(Duration::from_secs(LEASE_TTL)).await;
        let made = self.stats.now().generations.range(g1 + 1..).count();
        let phase = Phase {
            took_ms: ms(last - at),
            requests: delta(&before, &etcd_counts(self.etcd).await),
        };
        Ok((phase, made))
    }

    /// Kills one pod, chosen by `seed`; times until every survivor was
    /// assigned a new generation.
    async fn lose_one(&self, seed: u64, g1: u64) -> Result<Phase, String> {
        let ids = self.roster.ids();
        if ids.is_empty() {
            return Err(format!(
                "no pod left to kill; {:?}",
                self.stats.now().failures.first()
            ));
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let victim = ids[rng.random_range(0..ids.len())];
        let survivors = ids.len() - 1;
        let before = etcd_counts(self.etcd).await;
        let at = Instant::now();
        self.roster.tell(victim, workers::Command::Kill);
        let last = self
            .wait("every surviving pod assigned a new generation", |t| {
                let after = t.generations.range(g1 + 1..).map(|(_, a)| a);
                after
                    .filter(|a| a.survivors >= survivors)
                    .map(|a| a.last_survivor)
                    .next()
            })
            .await?;
        Ok(Phase {
            took_ms: ms(last - at),
            requests: delta(&before, &etcd_counts(self.etcd).await),
        })
    }

    /// Every pod says it finished; the exit code of the replica that led
    /// the job to its end (the one left after the failover).
    async fn end(&mut self) -> Result<i32, String> {
        self.roster.tell_all(workers::Command::Finish);
        let Some(child) = self.replicas.first_mut() else {
            return Err("no replica left".into());
        };
        match tokio::time::timeout(self.within, child.wait()).await {
            Ok(Ok(status)) => Ok(status.code().unwrap_or(-1)),
            Ok(Err(e)) => Err(format!("cannot wait for the replica: {e}")),
            Err(_) => Err(format!(
                "the leader did not end within {:?} of the pods finishing",
                self.within
            )),
        }
    }

    /// The leading replica's process id (its election record says
    /// `host/pid`).
    fn leader_pid(&self) -> Option<u32> {
        let (_, record) = self.leader.current()?;
        record.instance.rsplit('/').next()?.parse().ok()
    }
}

/// A pod's etcd session: its lease, its slot and its view of the leader.
async fn enter(
    id: u32,
    node: &str,
    endpoints: &Endpoints,
    keys: &Keys,
) -> Result<(Lease, u32, Follow), String> {
    let client = etcdjob::connect(endpoints, ETCD_WITHIN)
        .await
        .map_err(|e| e.to_string())?;
    let lease = Lease::grant(&client, Duration::from_secs(LEASE_TTL), "worker")
        .await
        .map_err(|e| e.to_string())?;
    let record = WorkerRecord {
        pod: format!("swarm-pod-{id}"),
        uid: id.to_string(),
        // What the pod registers with (a simulated worker's `pid` is its
        // id): a new leader takes over the slot's worker by it.
        pid: id,
        ip: IpAddr::from([127, 0, 0, 1]),
        leaving: false,
        finished: false,
    };
    let slot = etcdjob::claim_slot(&client, keys, node, &lease, &record)
        .await
        .map_err(|e| e.to_string())?;
    Ok((lease, slot, Follow(LeaderWatch::start(&client, keys))))
}

/// The host and port of the first etcd endpoint (where its `/metrics` is).
fn metrics_addr(url: &str) -> Result<SocketAddr, String> {
    let first = url.split(',').next().unwrap_or_default();
    let hostport = first
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    hostport
        .parse()
        .map_err(|e| format!("{first}: not http://IP:PORT ({e})"))
}

/// etcd's request messages received so far, by gRPC method, and its
/// watchers now (`watchers`); empty if `/metrics` does not answer.
async fn etcd_counts(etcd: SocketAddr) -> BTreeMap<String, f64> {
    let text = tokio::time::timeout(Duration::from_secs(5), get_metrics(etcd)).await;
    let Ok(Ok(text)) = text else {
        return BTreeMap::new();
    };
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("grpc_server_msg_received_total{") {
            let method = rest
                .split("grpc_method=\"")
                .nth(1)
                .and_then(|m| m.split('"').next());
            let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            if let (Some(m), Some(v)) = (method, value) {
                *counts.entry(m.to_owned()).or_default() += v;
            }
        } else if let Some(v) = line.strip_prefix("etcd_debugging_mvcc_watcher_total ") {
            counts.insert("watchers".to_owned(), v.trim().parse().unwrap_or_default());
        }
    }
    counts
}

async fn get_metrics(etcd: SocketAddr) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(etcd).await?;
    let req = format!("GET /metrics HTTP/1.0\r\nHost: {etcd}\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut body = String::new();
    s.read_to_string(&mut body).await?;
    Ok(body)
}

/// What grew from `before` to `after` (watchers: the count after).
fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| {
            let grew = if k == "watchers" {
                *v
            } else {
                v - before.get(k).copied().unwrap_or_default()
            };
            (k.clone(), grew)
        })
        .filter(|(_, v)| *v > 0.0)
        .collect()
}
