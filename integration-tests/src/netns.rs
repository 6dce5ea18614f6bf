//! Hosts as Linux network namespaces, for elastic tests in which a host drops
//! off the network instead of only losing a process.
//!
//! A [`Cluster`] is a bridge namespace holding a bridge with one veth to each of
//! a coordinator namespace (`NET.1`) and N host namespaces (`NET.2`, `NET.3`,
//! ...), `lo` up everywhere, a throw-away sshd in every host namespace (the
//! config and keys of [`crate::sshd`]) and a scratch directory. Traffic to
//! those addresses only flows between the namespaces: elasticrun runs in the
//! coordinator namespace ([`Cluster::elasticrun`]), its workers (through ssh)
//! in the host namespaces, and the root namespace never sends to them, so the
//! private subnet cannot clash with anything. Taking a host's veth down on the
//! bridge ([`Cluster::set_link`]) makes it vanish from the network while its
//! processes live on. Dropping the cluster kills every process left in its
//! namespaces and deletes them, also when the test panics.
//!
//! Needs root, `ip netns` and OpenSSH; [`Cluster::create`] says why not
//! otherwise, so that the test can skip, or fail where
//! [`crate::needs::Need::NetworkNamespaces`] is required.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Finished;
use crate::needs::on_path;
use crate::sshd::{SSHD, config_text, keygen, openssh_available};

/// The port of every host's sshd (each namespace has ports of its own).
pub const SSH_PORT: u16 = 2222;
const BRIDGE: &str = "br0";
/// Every namespace name starts with this, then the test's pid.
const PREFIX: &str = "er";

/// `program`, run in network namespace `ns` if given (`ip netns exec NS
/// PROGRAM`, which execs it: the child is the program itself).
pub fn command_in(ns: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match ns {
        None => Command::new(program),
        Some(ns) => {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", ns]).arg(program);
            cmd
        }
    }
}

/// Namespaces, bridge, sshds and scratch directory of one test.
#[derive(Debug)]
pub struct Cluster {
    /// `er<pid><tag>`: the start of every namespace's name.
    prefix: String,
    /// The /24 as `10.A.B`.
    net: String,
    hosts: usize,
    /// Namespaces made so far, deleted on drop.
    created: Vec<String>,
    sshds: Vec<Child>,
    dir: PathBuf,
    /// The private key every host's sshd accepts.
    pub identity: PathBuf,
}

/// Runs `ip ARGS`; the error says what failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(r: Result<(), String>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// Pids of the processes in namespace `ns` (`ip netns pids`).
pub fn pids_in(ns: &str) -> Vec<i32> {
    Command::new("ip")
        .args(["netns", "pids", ns])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Kills every process in `ns`, then deletes it.
fn kill_and_delete(ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = pids_in(ns);
        if left.is_empty() || Instant::now() > deadline {
            break;
        }
        for p in left {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = ip(&["netns", "del", ns]);
}

/// Namespaces this module made in a test process that no longer runs (one
/// killed before its cleanup): `er<pid>s<n><role>`.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (pid, tag) = rest.split_at(digits);
        let ours = tag
            .strip_prefix('s')
            .is_some_and(|t| t.starts_with(|c: char| c.is_ascii_digit()));
        if ours && !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
            kill_and_delete(name);
        }
    }
}

/// The first `ssh` on `PATH`.
fn system_ssh() -> PathBuf {
    on_path("ssh").expect("ssh (apt openssh-client) is on PATH")
}

/// Replaces `path`'s content at once (a temporary file moved over it), as the
/// discovery script's file wants.
pub fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

impl Cluster {
    /// Makes namespaces `er<pid><tag>br` (the bridge), `...co` (the
    /// coordinator, `10.NET.1`) and `...a`, `...b`, ... (`hosts` hosts,
    /// `10.NET.2` up), with an sshd on [`SSH_PORT`] in each host. `tag` is
    /// `s` and a number, unique within the test binary. `Err` (why) when this
    /// cannot work here: not root, OpenSSH missing, or `ip netns add` fails.
    pub fn create(tag: &str, net: (u8, u8), hosts: usize) -> Result<Cluster, String> {
        Self::make(tag, net, hosts, true)
    }

    /// Like [`Cluster::create`], without the sshds: for hosts whose
    /// processes start some other way (a Slurm node daemon in each).
    pub fn create_bare(tag: &str, net: (u8, u8), hosts: usize) -> Result<Cluster, String> {
        Self::make(tag, net, hosts, false)
    }

    fn make(tag: &str, net: (u8, u8), hosts: usize, sshd: bool) -> Result<Cluster, String> {
        assert!(
            tag.strip_prefix('s')
                .is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())),
            "tag {tag} is not s<number>"
        );
        assert!((1..=26).contains(&hosts));
        // /proc/self belongs to the effective user.
        let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        if uid.ok() != Some(0) {
            return Err("not root (network namespaces need it)".into());
        }
        if sshd {
            openssh_available()?;
        }
        remove_stale();
        let prefix = format!("{PREFIX}{}{tag}", std::process::id());
        let dir = std::env::temp_dir().join(format!("elasticrun-{prefix}"));
        let mut c = Cluster {
            net: format!("10.{}.{}", net.0, net.1),
            hosts,
            created: Vec::new(),
            sshds: Vec::new(),
            identity: dir.join("id"),
            dir,
            prefix,
        };
        // Left over from a run of the same pid, if any.
        for ns in c.all_ns() {
            if pids_in(&ns).is_empty() {
                let _ = ip(&["netns", "del", &ns]);
            }
        }
        let first = c.bridge_ns();
        ip(&["netns", "add", &first]).map_err(|e| format!("cannot make a namespace: {e}"))?;
        c.created.push(first);
        c.network();
        if sshd {
            c.start_sshds();
        } else {
            std::fs::create_dir_all(&c.dir).expect("scratch dir");
        }
        Ok(c)
    }

    fn bridge_ns(&self) -> String {
        format!("{}br", self.prefix)
    }

    /// The coordinator's namespace, where elasticrun runs (`co`: apart from
    /// the hosts' letters).
    pub fn coordinator_ns(&self) -> String {
        format!("{}co", self.prefix)
    }

    /// How many hosts there are.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// Host `i`'s namespace.
    pub fn host_ns(&self, i: usize) -> String {
        format!("{}{}", self.prefix, Self::letter(i))
    }

    fn letter(i: usize) -> char {
        char::from(b'a' + u8::try_from(i).expect("host index"))
    }

    /// Host `i`'s address, `10.A.B.(i+2)`: its name in host lists.
    pub fn host(&self, i: usize) -> String {
        format!("{}.{}", self.net, i + 2)
    }

    /// The scratch directory (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn all_ns(&self) -> Vec<String> {
        let mut v = vec![self.bridge_ns(), self.coordinator_ns()];
        v.extend((0..self.hosts).map(|i| self.host_ns(i)));
        v
    }

    /// The bridge, and a veth from it to every other namespace: `vco` to the
    /// coordinator's `eth0`, `va`, `vb`, ... to the hosts'.
    fn network(&mut self) {
        let br = self.bridge_ns();
        let mut ends = vec![(
            self.coordinator_ns(),
            "vco".to_owned(),
            format!("{}.1/24", self.net),
        )];
        ends.extend((0..self.hosts).map(|i| {
            (
                self.host_ns(i),
                format!("v{}", Self::letter(i)),
                format!("{}/24", self.host(i)),
            )
        }));
        for (ns, _, _) in &ends {
            must(ip(&["netns", "add", ns]));
            self.created.push(ns.clone());
        }
        for ns in self.all_ns() {
            must(ip(&["-n", &ns, "link", "set", "lo", "up"]));
        }
        must(ip(&["-n", &br, "link", "add", BRIDGE, "type", "bridge"]));
        must(ip(&["-n", &br, "link", "set", BRIDGE, "up"]));
        for (ns, veth, addr) in &ends {
            // Made directly in the two namespaces: nothing appears in ours.
            must(ip(&[
                "link", "add", veth, "netns", &br, "type", "veth", "peer", "name", "eth0", "netns",
                ns,
            ]));
            must(ip(&["-n", &br, "link", "set", veth, "master", BRIDGE]));
            must(ip(&["-n", &br, "link", "set", veth, "up"]));
            must(ip(&["-n", ns, "addr", "add", addr, "dev", "eth0"]));
            must(ip(&["-n", ns, "link", "set", "eth0", "up"]));
        }
    }

    /// Keys, a config and an sshd per host; waits until each accepts an ssh
    /// login from the coordinator's namespace. Also writes the `ssh` wrapper
    /// of [`Cluster::elasticrun`].
    fn start_sshds(&mut self) {
        std::fs::create_dir_all(self.dir.join("bin")).expect("scratch dir");
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        keygen(&self.identity);
        // Host keys are new every run: keep them out of root's known_hosts.
        let wrapper = self.dir.join("bin/ssh");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec {} -o UserKnownHostsFile=/dev/null -o GlobalKnownHostsFile=/dev/null \"$@\"\n",
                system_ssh().display()
            ),
        )
        .expect("ssh wrapper");
        std::fs::set_permissions(
            &wrapper,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        for i in 0..self.hosts {
            let d = self.dir.join(format!("sshd-{}", Self::letter(i)));
            std::fs::create_dir_all(&d).expect("sshd dir");
            keygen(&d.join("host_key"));
            std::fs::copy(self.dir.join("id.pub"), d.join("authorized_keys"))
                .expect("authorized_keys");
            let config = d.join("sshd_config");
            std::fs::write(&config, config_text(&d, &[&self.host(i)], SSH_PORT))
                .expect("sshd_config");
            let child = Command::new("ip")
                .args(["netns", "exec", &self.host_ns(i), SSHD, "-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start sshd");
            self.sshds.push(child);
        }
        for i in 0..self.hosts {
            self.wait_for_ssh(i, Duration::from_secs(15));
        }
    }

    fn wait_for_ssh(&self, i: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        let port = SSH_PORT.to_string();
        loop {
            let out = self
                .in_ns(&self.coordinator_ns(), self.dir.join("bin/ssh"))
                .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"])
                .args([
                    "-o",
                    "ConnectTimeout=2",
                    "-o",
                    "LogLevel=ERROR",
                    "-p",
                    &port,
                ])
                .arg("-i")
                .arg(&self.identity)
                .args([&self.host(i), "true"])
                .stdin(Stdio::null())
                .output()
                .expect("run ssh");
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no ssh login to {} within {limit:?}: {}",
                self.host(i),
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `ip netns exec NS PROGRAM`.
    pub fn in_ns(&self, ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        command_in(Some(ns), program)
    }

    /// `elasticrun -p PORT -i KEY ARGS...` in the coordinator's namespace
    /// (`ip netns exec` execs it, so the child is elasticrun itself), its
    /// `ssh` keeping the hosts' keys out of `known_hosts`.
    pub fn elasticrun(&self, args: &[&str]) -> Command {
        let mut cmd = self.in_ns(&self.coordinator_ns(), crate::elasticrun());
        cmd.args(["-p", &SSH_PORT.to_string(), "-i"])
            .arg(&self.identity)
            .args(args);
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![self.dir.join("bin")];
        dirs.extend(std::env::split_paths(&path));
        cmd.env("PATH", std::env::join_paths(dirs).expect("PATH"));
        cmd
    }

    /// Takes host `i`'s veth on the bridge down (it vanishes from the network:
    /// nothing it sends arrives, nothing reaches it) or up again.
    pub fn set_link(&self, i: usize, up: bool) {
        let veth = format!("v{}", Self::letter(i));
        let state = if up { "up" } else { "down" };
        must(ip(&["-n", &self.bridge_ns(), "link", "set", &veth, state]));
    }

    /// Waits up to `limit` for `ns` to hold nothing but `keep`; the pids left
    /// (with their command lines) otherwise.
    pub fn wait_empty(&self, ns: &str, keep: &[i32], limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let left: Vec<i32> = pids_in(ns)
                .into_iter()
                .filter(|p| !keep.contains(p))
                .collect();
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let named: Vec<String> = left
                    .iter()
                    .map(|p| {
                        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                        format!("{p}: {}", String::from_utf8_lossy(&cmd).replace('\0', " "))
                    })
                    .collect();
                return Err(format!("left in {ns}: {named:?}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Host `i`'s sshd's pid.
    pub fn sshd_pid(&self, i: usize) -> i32 {
        i32::try_from(self.sshds[i].id()).expect("pid")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for s in &mut self.sshds {
            let _ = s.kill();
            let _ = s.wait();
        }
        for ns in self.created.iter().rev() {
            kill_and_delete(ns);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A line a watched process printed, and when it arrived.
#[derive(Clone, Debug)]
pub struct Line {
    pub at: Instant,
    pub stderr: bool,
    pub text: String,
}

/// A process whose output lines are collected, with their arrival times, as
/// they come.
#[derive(Debug)]
pub struct Watched {
    child: Child,
    lines: Arc<Mutex<Vec<Line>>>,
    readers: Vec<JoinHandle<()>>,
}

fn collect(
    r: impl Read + Send + 'static,
    stderr: bool,
    to: Arc<Mutex<Vec<Line>>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for text in BufReader::new(r).lines().map_while(Result::ok) {
            let line = Line {
                at: Instant::now(),
                stderr,
                text,
            };
            to.lock().unwrap_or_else(PoisonError::into_inner).push(line);
        }
    })
}

impl Watched {
    /// Starts `cmd` with piped output.
    pub fn start(mut cmd: Command) -> Watched {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start process");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stdout.take().expect("stdout"), false, lines.clone()),
            collect(child.stderr.take().expect("stderr"), true, lines.clone()),
        ];
        Watched {
            child,
            lines,
            readers,
        }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<Line> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The first line that arrived at or after `since` and satisfies `pred`,
    /// waiting for it up to `limit`; fails the test, showing the output, when
    /// none comes (or the process exits first).
    pub fn wait_line(
        &mut self,
        what: &str,
        since: Instant,
        limit: Duration,
        pred: impl Fn(&Line) -> bool,
    ) -> Line {
        let deadline = Instant::now() + limit;
        loop {
            let exited = matches!(self.child.try_wait(), Ok(Some(_)));
            if exited {
                // Let the readers take the last lines.
                std::thread::sleep(Duration::from_millis(200));
            }
            let found = self.lines().into_iter().find(|l| l.at >= since && pred(l));
            if let Some(l) = found {
                return l;
            }
            assert!(
                !exited && Instant::now() < deadline,
                "{} waiting for {what} ({limit:?})\n{}",
                if exited {
                    "the process exited"
                } else {
                    "timed out"
                },
                render(&self.lines())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit within `limit` (kills the process and fails the
    /// test otherwise); everything it printed, also by line with times.
    pub fn finish(mut self, limit: Duration) -> (Finished, Vec<Line>) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "process did not exit within {limit:?}\n{}",
                    render(&self.lines())
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let lines = self.lines();
        let pick = |err: bool| -> String {
            lines
                .iter()
                .filter(|l| l.stderr == err)
                .map(|l| format!("{}\n", l.text))
                .collect()
        };
        let done = Finished {
            status,
            stdout: pick(false),
            stderr: pick(true),
        };
        (done, lines)
    }
}

/// The lines, stderr ones marked, for a failure message.
pub fn render(lines: &[Line]) -> String {
    let Some(first) = lines.first().map(|l| l.at) else {
        return "(no output)".into();
    };
    lines
        .iter()
        .map(|l| {
            format!(
                "{:7.3} {} {}\n",
                l.at.duration_since(first).as_secs_f64(),
                if l.stderr { "E" } else { " " },
                l.text
            )
        })
        .collect()
}

/// The JSON event (`{"event":...}`) a worker printed on a forwarded stdout
/// line, `[N]<stdout>:{...}`.
pub fn event(line: &Line) -> Option<serde_json::Value> {
    if line.stderr {
        return None;
    }
    let (_, json) = line.text.split_once("<stdout>:")?;
    if !json.starts_with("{\"") {
        return None;
    }
    serde_json::from_str(json).ok()
}
