//! A real etcd (Debian's `etcd-server`) for a test: one member or a cluster
//! of three, on free loopback ports with throw-away data directories, or one
//! member inside a network namespace on its address there; each member is
//! killed with its process when the [`Etcd`] is dropped.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::needs::{Need, on_path};
use crate::netns::command_in;
use crate::ports;

/// How long a member may take to answer `/health`.
const START_LIMIT: Duration = Duration::from_secs(30);
/// How many times a cluster whose member exits at start is started again.
const START_ATTEMPTS: usize = 3;

/// One member: its ports and data directory, and its process while it runs.
#[derive(Debug)]
struct Member {
    name: String,
    client: u16,
    peer: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// An etcd cluster of one or more members on 127.0.0.1, or on `ip` in the
/// network namespace `ns`.
#[derive(Debug)]
pub struct Etcd {
    members: Vec<Member>,
    cluster: String,
    ip: String,
    ns: Option<String>,
}

impl Etcd {
    /// A one-member etcd, or `None` (said, or a failure where required)
    /// without the `etcd` binary.
    pub fn start() -> Option<Etcd> {
        Self::cluster(1, false)
    }

    /// `n` members (with etcd's v2 API too when `v2`: torchrun's etcd-v2
    /// rendezvous needs it).
    pub fn cluster(n: usize, v2: bool) -> Option<Etcd> {
        Self::members(n, v2, "127.0.0.1", None)
    }

    /// One member listening on `ip` inside the network namespace `ns`
    /// (reached, health included, only from inside namespaces).
    pub fn start_in(ns: &str, ip: &str) -> Option<Etcd> {
        Self::members(1, false, ip, Some(ns.to_owned()))
    }

    fn members(n: usize, v2: bool, ip: &str, ns: Option<String>) -> Option<Etcd> {
        if on_path("etcd").is_none() {
            Need::Etcd.unavailable("no etcd on PATH (Debian package etcd-server)");
            return None;
        }
        // A member that exits at start lost its port after all (to a
        // daemon of a test beside this one): the cluster starts again on
        // other ports.
        let mut exits = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let mut etcd = Self::unstarted(n, ip, ns.clone());
            for i in 0..n {
                etcd.spawn(i, v2);
            }
            match (0..n).try_for_each(|i| etcd.wait_healthy(i)) {
                Ok(()) => return Some(etcd),
                Err(exit) => exits.push(exit),
            }
        }
        panic!("etcd did not start in {START_ATTEMPTS} attempts: {exits:?}");
    }

    /// `n` members on ports of their own, not started yet.
    fn unstarted(n: usize, ip: &str, ns: Option<String>) -> Etcd {
        let tag = format!("elasticrun-etcd-{}-{}", std::process::id(), ports::unused());
        let members: Vec<Member> = (0..n)
            .map(|i| {
                let dir = std::env::temp_dir().join(format!("{tag}-{i}"));
                let _ = std::fs::remove_dir_all(&dir);
                Member {
                    name: format!("m{i}"),
                    client: ports::unused(),
                    peer: ports::unused(),
                    dir,
                    child: None,
                }
            })
            .collect();
        let cluster = members
            .iter()
            .map(|m| format!("{}=http://{ip}:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        Etcd {
            members,
            cluster,
            ip: ip.to_owned(),
            ns,
        }
    }

    fn spawn(&mut self, i: usize, v2: bool) {
        let mut cmd = self.command(i);
        cmd.args(["--initial-cluster", &self.cluster]).args([
            "--initial-cluster-token",
            "elasticrun-test",
            "--initial-cluster-state",
            "new",
        ]);
        if v2 {
            cmd.arg("--enable-v2");
        }
        self.members[i].child = Some(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("cannot start etcd: {e}")),
        );
    }

    /// `etcd` as member `i`, on its ports and data directory.
    fn command(&self, i: usize) -> Command {
        let m = &self.members[i];
        let client = format!("http://{}:{}", self.ip, m.client);
        let peer = format!("http://{}:{}", self.ip, m.peer);
        let mut cmd = self.program("etcd");
        cmd.args(["--name", &m.name, "--data-dir"])
            .arg(&m.dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--log-level", "error", "--logger", "zap"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    /// `program`, in the namespace if there is one.
    fn program(&self, program: &str) -> Command {
        command_in(self.ns.as_deref(), program)
    }

    /// Waits until member `i` answers; `Err` (how it ended) when it exits
    /// first.
    fn wait_healthy(&mut self, i: usize) -> Result<(), String> {
        let port = self.members[i].client;
        let url = format!("http://{}:{port}", self.ip);
        crate::wait_for(&format!("etcd member {i} healthy"), START_LIMIT, || {
            if let Some(c) = self.members[i].child.as_mut()
                && let Ok(Some(st)) = c.try_wait()
            {
                return Some(Err(format!("member {i} exited at start: {st}")));
            }
            let ok = match self.ns {
                None => healthy(port),
                Some(_) => self
                    .program("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .args([
                        "--endpoints",
                        &url,
                        "--dial-timeout=2s",
                        "endpoint",
                        "health",
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success()),
            };
            ok.then_some(Ok(()))
        })
    }

    /// Every member's client URL, comma-separated (for `--etcd`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://{}:{}", self.ip, m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client port of member `i`.
    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client
    }

    /// SIGKILLs member `i` (its data stays).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `sig` to member `i` (SIGSTOP freezes it as a stalled disk
    /// would, SIGCONT wakes it).
    pub fn signal(&self, i: usize, sig: nix::sys::signal::Signal) {
        let child = self.members[i].child.as_ref().expect("member is running");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, sig).unwrap_or_else(|e| panic!("cannot signal etcd: {e}"));
    }

    /// Starts member `i` again on its data and waits until it is healthy.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        let child = self
            .command(i)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start etcd again: {e}"));
        self.members[i].child = Some(child);
        if let Err(exit) = self.wait_healthy(i) {
            panic!("etcd {exit} (restarted on its data)");
        }
    }

    /// `etcdctl` with this cluster's endpoints and `args`; its stdout.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self
            .program("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints()))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run etcdctl: {e}"));
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
            let _ = std::fs::remove_dir_all(&self.members[i].dir);
        }
    }
}

/// Whether the member on `port` says it is healthy.
fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut body = String::new();
    let started = Instant::now();
    let _ = s.read_to_string(&mut body);
    started.elapsed() < Duration::from_secs(2) && body.contains("\"health\":\"true\"")
}
