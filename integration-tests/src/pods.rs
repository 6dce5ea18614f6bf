//! A job run the Kubernetes way on this machine: a real etcd, `elasticrun
//! serve` replicas, and "pods": `train` processes started with exactly the
//! environment a pod of the manifests in `deploy/kubernetes/` has
//! (`ELASTICRUN_ETCD`, `ELASTICRUN_JOB`, `ELASTICRUN_SECRET_FILE`,
//! `NODE_NAME`, `POD_NAME`, `POD_UID`). Every process still running when the
//! [`PodJob`] is dropped is killed.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::elastic::{Scratch, Train, check_done, check_no_rollback, done_lines};
use crate::etcd::Etcd;
use crate::netns::command_in;
use crate::{Finished, Running, elasticrun, start, wait_for};

/// A job of serve replicas and pods on one etcd.
#[derive(Debug)]
pub struct PodJob {
    pub etcd: Etcd,
    pub dir: Scratch,
    pub job: String,
    /// The pods' `ELASTICRUN_ETCD` when not every member's.
    pub pod_etcd: Option<String>,
    /// More of the pods' environment (`ELASTICRUN_TRANSPORT`, ...).
    pub pod_env: Vec<(String, String)>,
    serves: Vec<Option<Running>>,
    pods: Vec<Option<Running>>,
    /// Pods that lead process groups of their own (an `elasticrun` node and
    /// its children): killed as a group.
    groups: Vec<i32>,
}

/// Where a pod runs: its node's name (`NODE_NAME`), its network namespace
/// (none: this one) and its address there (`POD_IP`).
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub ns: Option<String>,
    pub ip: String,
}

impl Node {
    /// A node on this machine's loopback.
    pub fn local(name: &str) -> Node {
        Node {
            name: name.to_owned(),
            ns: None,
            ip: "127.0.0.1".to_owned(),
        }
    }
}

/// The job's options on every replica of a job of three pods: a 2 s lease
/// (etcd's least), so a dead leader is replaced within about 2 s.
pub const SERVE: [&str; 8] = [
    "-np",
    "3",
    "--min-np",
    "2",
    "--max-np",
    "3",
    "--lease-ttl",
    "2",
];

/// Checks that the run's first generation had 3 workers on the nodes
/// `nodes` (`name:count`, in any order).
pub fn check_first_generation(run: &Finished, nodes: &[&str]) {
    let first = run
        .stderr
        .lines()
        .find(|l| l.contains("generation 1: 3 workers ("))
        .unwrap_or_else(|| panic!("no generation 1 line:\n{}", run.stderr));
    assert!(nodes.iter().all(|n| first.contains(n)), "{first}");
}

/// The run ended well on `n` ranks as if nothing had happened: every step
/// once, the weights of an undisturbed run, and no worker ever reset.
pub fn undisturbed_and_never_reset(run: &Finished, train: &Train, n: u64) {
    run.expect_code(0);
    check_no_rollback(&run.stdout);
    let state = check_done(run, n, train.expected_steps());
    assert_eq!(state, train.undisturbed_state(n));
    for d in done_lines(&run.stdout) {
        assert_eq!(d["resets"].as_u64(), Some(0), "{d}\n{}", run.stderr);
    }
}

/// The secret every pod and replica of a [`PodJob`] reads.
const SECRET: &str = "5eb63bbbe01eeed093cb22bb8f5acdc3b94fa3a1f1b6a0a3c7fa1d2c3b4a5f60";

impl PodJob {
    pub fn new(test: &str, etcd: Etcd) -> Self {
        let dir = Scratch::new(test);
        dir.write("secret", SECRET);
        PodJob {
            etcd,
            dir,
            job: test.replace('_', "-").chars().take(60).collect(),
            pod_etcd: None,
            pod_env: Vec::new(),
            serves: Vec::new(),
            pods: Vec::new(),
            groups: Vec::new(),
        }
    }

    /// Starts a serve replica with `options` (the job's elastic options);
    /// its index.
    pub fn serve(&mut self, options: &[&str]) -> usize {
        let endpoints = self.etcd.endpoints();
        self.serve_on(&endpoints, options)
    }

    /// [`PodJob::serve`] with `endpoints` as its `--etcd`.
    pub fn serve_on(&mut self, endpoints: &str, options: &[&str]) -> usize {
        self.serve_in(None, endpoints, options)
    }

    /// [`PodJob::serve_on`] inside network namespace `ns` if given.
    pub fn serve_in(&mut self, ns: Option<&str>, endpoints: &str, options: &[&str]) -> usize {
        let mut cmd = command_in(ns, elasticrun());
        cmd.arg("serve")
            .args(["--etcd", endpoints, "--job", &self.job])
            .arg("--secret-file")
            .arg(self.dir.dir.join("secret"))
            .args(options);
        self.serves.push(Some(start(cmd)));
        self.serves.len() - 1
    }

    /// Starts a pod on `node` running `train` with `secret`; its index.
    pub fn pod_with_secret(&mut self, node: &str, train: &Train, secret: &str) -> usize {
        self.pod_as(&Node::local(node), train, secret)
    }

    /// Starts a pod on `node` (its name, namespace and address) running
    /// `train` with `secret`; its index.
    pub fn pod_as(&mut self, node: &Node, train: &Train, secret: &str) -> usize {
        let i = self.pods.len();
        let args = train.args();
        let mut cmd = command_in(node.ns.as_deref(), &args[0]);
        cmd.args(&args[1..]);
        self.pod_env_for(&mut cmd, node, secret);
        self.pods.push(Some(start(cmd)));
        i
    }

    /// Starts `elasticrun` running `train` in etcd mode as a pod on `node`
    /// with torchrun's variables `pet` (what Kubeflow Trainer gives a node),
    /// in a process group of its own; its index among the pods.
    pub fn node_pod(&mut self, node: &Node, train: &Train, pet: &[(&str, String)]) -> usize {
        use std::os::unix::process::CommandExt;
        let i = self.pods.len();
        let mut cmd = command_in(node.ns.as_deref(), elasticrun());
        cmd.args(train.args()).process_group(0);
        self.pod_env_for(&mut cmd, node, SECRET);
        cmd.envs(pet.iter().map(|(k, v)| (k, v)));
        let run = start(cmd);
        self.groups.push(run.pid());
        self.pods.push(Some(run));
        i
    }

    /// A pod's environment, as the manifests give it, for pod `i`.
    fn pod_env_for(&self, cmd: &mut std::process::Command, node: &Node, secret: &str) {
        let i = self.pods.len();
        let file = self.dir.write(&format!("secret-{i}"), secret);
        let etcd = self
            .pod_etcd
            .clone()
            .unwrap_or_else(|| self.etcd.endpoints());
        cmd.env("ELASTICRUN_ETCD", etcd)
            .env("ELASTICRUN_JOB", &self.job)
            .env("ELASTICRUN_SECRET_FILE", file)
            .env("ELASTICRUN_LEASE_TTL", "2")
            .env("NODE_NAME", &node.name)
            .env("POD_NAME", format!("{}-{i}", self.job))
            .env("POD_UID", format!("uid-{i}-{}", std::process::id()))
            .env("POD_IP", &node.ip);
        for k in control::env::ALL {
            cmd.env_remove(k);
        }
        cmd.envs(self.pod_env.iter().map(|(k, v)| (k, v)));
    }

    /// Starts a pod on `node` running `train`; its index.
    pub fn pod(&mut self, node: &str, train: &Train) -> usize {
        self.pod_with_secret(node, train, SECRET)
    }

    /// Starts a pod on `node` running `train`; its index.
    pub fn pod_on(&mut self, node: &Node, train: &Train) -> usize {
        self.pod_as(node, train, SECRET)
    }

    pub fn serve_pid(&self, i: usize) -> i32 {
        self.serves[i].as_ref().map_or(0, Running::pid)
    }

    pub fn pod_pid(&self, i: usize) -> i32 {
        self.pods[i].as_ref().map_or(0, Running::pid)
    }

    /// Everything the pods printed on stdout so far.
    pub fn pods_stdout(&self) -> String {
        self.pods
            .iter()
            .flatten()
            .map(Running::stdout_so_far)
            .collect()
    }

    /// The replica that says it leads (waiting up to `limit`), skipping `not`.
    pub fn leader(&self, not: &[usize], limit: Duration) -> usize {
        wait_for("a serve replica to lead", limit, || {
            self.serves.iter().enumerate().find_map(|(i, s)| {
                let s = s.as_ref()?;
                (!not.contains(&i) && s.stderr_so_far().contains("elasticrun: leading job"))
                    .then_some(i)
            })
        })
    }

    /// Waits until replica `i` has said `text` (after what it said before
    /// `after` bytes of its output), and hands back where it said it.
    pub fn wait_serve_says(&self, i: usize, text: &str, after: usize, limit: Duration) -> usize {
        self.wait_serve_line(i, &format!("{text:?}"), after, limit, |l| l.contains(text))
    }

    /// Waits until replica `i` has said a line for which `pred` holds (after
    /// `after` bytes of its output), and hands back where that line starts.
    pub fn wait_serve_line(
        &self,
        i: usize,
        what: &str,
        after: usize,
        limit: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> usize {
        wait_for(&format!("replica {i} to say {what}"), limit, || {
            let said = self.serve_stderr(i);
            let rest = said.get(after..)?;
            let mut at = after;
            for line in rest.split_inclusive('\n') {
                if pred(line) {
                    return Some(at);
                }
                at += line.len();
            }
            None
        })
    }

    /// Waits until the pods have logged `n` steps past the highest logged
    /// so far.
    pub fn wait_for_more_steps(&self, n: u64, limit: Duration) {
        let now = crate::elastic::steps(&self.pods_stdout())
            .iter()
            .map(|s| s.step)
            .max();
        self.wait_for_step(now.unwrap_or(0) + n, limit);
    }

    /// Waits until the pods have logged step `n`.
    pub fn wait_for_step(&self, n: u64, limit: Duration) {
        wait_for(&format!("step {n}"), limit, || {
            crate::elastic::steps(&self.pods_stdout())
                .iter()
                .any(|s| s.step >= n)
                .then_some(())
        });
    }

    /// Sends `sig` to pod `i`.
    pub fn signal_pod(&self, i: usize, sig: Signal) {
        let _ = kill(Pid::from_raw(self.pod_pid(i)), sig);
    }

    /// Sends `sig` to replica `i`.
    pub fn signal_serve(&self, i: usize, sig: Signal) {
        let _ = kill(Pid::from_raw(self.serve_pid(i)), sig);
    }

    /// Waits for pod `i` to exit.
    pub fn finish_pod(&mut self, i: usize, limit: Duration) -> Finished {
        let run = self.pods[i]
            .take()
            .unwrap_or_else(|| panic!("pod {i} is gone"));
        run.finish(limit)
    }

    /// Waits for replica `i` to exit.
    pub fn finish_serve(&mut self, i: usize, limit: Duration) -> Finished {
        let run = self.serves[i]
            .take()
            .unwrap_or_else(|| panic!("replica {i} is gone"));
        run.finish(limit)
    }

    /// Waits for every pod still there, and hands back one [`Finished`]
    /// holding all their output (stdout: the pods'; stderr: the pods' and
    /// every replica's so far), with the status of the last failure if any.
    pub fn finish_pods(&mut self, limit: Duration) -> Finished {
        let mut stdout = String::new();
        let mut stderr = String::new();
        let mut status = None;
        for p in self.pods.iter_mut() {
            if let Some(run) = p.take() {
                let f = run.finish(limit);
                stdout.push_str(&f.stdout);
                stderr.push_str(&f.stderr);
                if !f.status.success() || status.is_none() {
                    status = Some(f.status);
                }
            }
        }
        for s in self.serves.iter().flatten() {
            stderr.push_str(&s.stderr_so_far());
        }
        Finished {
            status: status.unwrap_or_else(|| panic!("no pod ran")),
            stdout,
            stderr,
        }
    }

    /// What replica `i` said so far.
    pub fn serve_stderr(&self, i: usize) -> String {
        self.serves[i]
            .as_ref()
            .map(Running::stderr_so_far)
            .unwrap_or_default()
    }
}

impl Drop for PodJob {
    fn drop(&mut self) {
        for &g in &self.groups {
            let _ = kill(Pid::from_raw(-g), Signal::SIGKILL);
        }
        for r in self.pods.iter_mut().chain(self.serves.iter_mut()).flatten() {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
    }
}
