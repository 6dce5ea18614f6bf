//! A real Slurm on this machine for the tests: `munged`, `slurmctld` and
//! `slurmd` (Debian's `slurm-wlm` and `munge`), their configuration, key,
//! state and logs in a directory of the test's. [`Slurm::start`] runs one
//! node, this machine under its short host name, on free loopback ports;
//! [`Slurm::start_on`] runs a node in each host namespace of a
//! [`Cluster`] (`n1`, `n2`, ...: each its own `slurmd` at its own address)
//! and the controller in its coordinator namespace, where the commands of
//! [`Slurm::command`] run too. The daemons enter a namespace with
//! `nsenter --net` (not `ip netns exec`, whose fresh `/sys` hides the
//! cgroup file system `slurmd` looks for). Dropping it cancels every job
//! and stops the daemons.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::needs::{Need, on_path};
use crate::netns::Cluster;

/// A running controller, node daemons and munge, for one test.
#[derive(Debug)]
pub struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
    /// The controller's network namespace, where the commands run.
    ns: Option<String>,
    nodes: Vec<String>,
}

/// A node of the configuration: its name, its address, and the network
/// namespace its `slurmd` runs in.
struct Node {
    name: String,
    addr: String,
    ns: Option<String>,
}

/// This machine's short host name: the node's name in the configuration.
pub fn node_name() -> String {
    let out = Command::new("hostname")
        .arg("-s")
        .output()
        .expect("run hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn config(dir: &Path, controller: (&str, &str), nodes: &[Node], cpus: usize) -> String {
    let d = dir.display();
    let (host, addr) = controller;
    let mut text = format!(
        "ClusterName=elasticrun\n\
         SlurmctldHost={host}({addr})\n\
         SlurmctldPort={ctld}\n\
         SlurmdPort={slurmd}\n\
         AuthType=auth/munge\n\
         AuthInfo=socket={d}/munge.sock\n\
         CredType=cred/munge\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         StateSaveLocation={d}/state\n\
         SlurmdSpoolDir={d}/spool/%n\n\
         SlurmctldPidFile={d}/slurmctld.pid\n\
         SlurmdPidFile={d}/slurmd-%n.pid\n\
         SlurmctldLogFile={d}/slurmctld.log\n\
         SlurmdLogFile={d}/slurmd-%n.log\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_Core\n\
         MpiDefault=none\n\
         ReturnToService=1\n\
         KillWait=2\n",
        ctld = crate::ports::unused(),
        slurmd = crate::ports::unused(),
    );
    for n in nodes {
        text.push_str(&format!(
            "NodeName={} NodeAddr={} CPUs={cpus} State=UNKNOWN\n",
            n.name, n.addr
        ));
    }
    text.push_str("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n");
    text
}

/// `program` in network namespace `ns`, if given, through `nsenter`.
fn in_ns(ns: Option<&str>, program: &str) -> Command {
    match ns {
        None => Command::new(program),
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net=/run/netns/{ns}")).arg(program);
            c
        }
    }
}

impl Slurm {
    /// Starts munge, the controller and the node daemon of this machine,
    /// and waits for the node to be idle; `None` (said, or a failure where
    /// required) without Slurm installed.
    pub fn start(test: &str) -> Option<Slurm> {
        let node = Node {
            name: node_name(),
            addr: "127.0.0.1".into(),
            ns: None,
        };
        Self::launch(test, None, vec![node])
    }

    /// Starts a node `n1`, `n2`, ... in each host namespace of `cluster`
    /// and the controller in its coordinator namespace; waits for every
    /// node to be idle.
    pub fn start_on(test: &str, cluster: &Cluster) -> Option<Slurm> {
        let nodes = (0..cluster.hosts())
            .map(|i| Node {
                name: format!("n{}", i + 1),
                addr: cluster.host(i),
                ns: Some(cluster.host_ns(i)),
            })
            .collect();
        Self::launch(test, Some(cluster.coordinator_ns()), nodes)
    }

    fn launch(test: &str, ns: Option<String>, nodes: Vec<Node>) -> Option<Slurm> {
        let missing: Vec<&str> = ["munged", "slurmctld", "slurmd", "srun", "salloc", "sinfo"]
            .into_iter()
            .filter(|p| on_path(p).is_none() && !Path::new("/usr/sbin").join(p).is_file())
            .collect();
        if !missing.is_empty() {
            Need::Slurm.unavailable(&format!(
                "no {} (apt install slurm-wlm munge)",
                missing.join(", ")
            ));
            return None;
        }
        let dir =
            std::env::temp_dir().join(format!("elasticrun-slurm-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state")).expect("make Slurm's directories");
        for n in &nodes {
            std::fs::create_dir_all(dir.join("spool").join(&n.name)).expect("a node's spool");
        }
        let key: Vec<u8> = (0..1024u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let key_file = dir.join("munge.key");
        std::fs::write(&key_file, key).expect("write munge's key");
        let owner_only =
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600);
        std::fs::set_permissions(&key_file, owner_only).expect("make munge's key private");
        let conf = dir.join("slurm.conf");
        // The machine's own count: slurmd drains a node that claims more.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let controller = match &ns {
            // The coordinator namespace's address (`NET.1`).
            Some(_) => nodes[0]
                .addr
                .rsplit_once('.')
                .map(|(n, _)| format!("{n}.1")),
            None => None,
        }
        .unwrap_or_else(|| "127.0.0.1".into());
        let text = config(&dir, (&node_name(), &controller), &nodes, cpus);
        std::fs::write(&conf, text).expect("write slurm.conf");
        let mut slurm = Slurm {
            dir: dir.clone(),
            conf: conf.clone(),
            daemons: Vec::new(),
            nodes: nodes.iter().map(|n| n.name.clone()).collect(),
            ns,
        };
        slurm.start_daemons(&nodes);
        Some(slurm)
    }

    fn start_daemons(&mut self, nodes: &[Node]) {
        let d = self.dir.display().to_string();
        self.daemon(
            None,
            &[
                "munged",
                "-F",
                &format!("--socket={d}/munge.sock"),
                &format!("--key-file={d}/munge.key"),
                &format!("--pid-file={d}/munged.pid"),
                &format!("--log-file={d}/munged.log"),
                &format!("--seed-file={d}/munge.seed"),
                "--force",
            ],
        );
        crate::wait_for("munge's socket", Duration::from_secs(20), || {
            Path::new(&d).join("munge.sock").exists().then_some(())
        });
        let c = self.conf.display().to_string();
        let ns = self.ns.clone();
        self.daemon(ns.as_deref(), &["slurmctld", "-D", "-f", &c]);
        for n in nodes {
            self.daemon(n.ns.as_deref(), &["slurmd", "-D", "-f", &c, "-N", &n.name]);
        }
        let want = self.nodes.len();
        crate::wait_for(
            "every Slurm node to be idle",
            Duration::from_secs(60),
            || {
                let out = self
                    .command("sinfo")
                    .args(["-h", "-N", "-o", "%N %t"])
                    .output()
                    .ok()?;
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                (text.lines().filter(|l| l.ends_with(" idle")).count() == want).then_some(())
            },
        );
    }

    /// Its configuration file, in `SLURM_CONF` of every process it starts
    /// (srun passes its environment on): tells this Slurm's processes from
    /// another test's.
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The nodes' names, in order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    fn daemon(&mut self, ns: Option<&str>, argv: &[&str]) {
        let name = format!("{}-{}.out", argv[0], self.daemons.len());
        let log = std::fs::File::create(self.dir.join(name)).expect("a daemon's log");
        let child = in_ns(ns, argv[0])
            .args(&argv[1..])
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", argv[0]));
        self.daemons.push(child);
    }

    /// `program` (salloc, sbatch, scancel, ...) against this Slurm.
    pub fn command(&self, program: &str) -> Command {
        let mut c = in_ns(self.ns.as_deref(), program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// The id of the job `squeue` lists (the tests' one), if any.
    pub fn job_id(&self) -> Option<String> {
        let out = self
            .command("squeue")
            .args(["-h", "-o", "%i"])
            .output()
            .ok()?;
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (!id.is_empty()).then_some(id)
    }

    /// What the daemons logged, for a failure's message.
    pub fn logs(&self) -> String {
        let mut files = vec!["slurmctld.log".to_owned()];
        files.extend(self.nodes.iter().map(|n| format!("slurmd-{n}.log")));
        files
            .iter()
            .map(|f| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = self
            .command("scancel")
            .args(["--full", "--user", "root"])
            .output();
        // SIGTERM first, so that each daemon stops (and reaps) its own
        // helpers; SIGKILL for one still there after five seconds.
        for d in self.daemons.iter_mut().rev() {
            if let Ok(pid) = i32::try_from(d.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while matches!(d.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
