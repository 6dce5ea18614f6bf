//! A real Slurm on this machine for the tests: `munged`, `slurmctld` and one
//! `slurmd` (Debian's `slurm-wlm` and `munge`), their configuration, key,
//! state and logs in a directory of the test's, on free loopback ports; the
//! node is this machine under its short host name. Dropping it cancels
//! every job and stops the daemons.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::needs::{Need, on_path};

/// A running controller, node daemon and munge, for one test.
#[derive(Debug)]
pub struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// This machine's short host name: the node's name in the configuration.
pub fn node_name() -> String {
    let out = Command::new("hostname")
        .arg("-s")
        .output()
        .expect("run hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn config(dir: &Path, node: &str, cpus: usize) -> String {
    let d = dir.display();
    format!(
        "ClusterName=elasticrun\n\
         SlurmctldHost={node}(127.0.0.1)\n\
         SlurmctldPort={ctld}\n\
         SlurmdPort={slurmd}\n\
         AuthType=auth/munge\n\
         AuthInfo=socket={d}/munge.sock\n\
         CredType=cred/munge\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         StateSaveLocation={d}/state\n\
         SlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\n\
         SlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/slurmctld.log\n\
         SlurmdLogFile={d}/slurmd.log\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_Core\n\
         MpiDefault=none\n\
         ReturnToService=2\n\
         KillWait=2\n\
         NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
         PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
        ctld = free_port(),
        slurmd = free_port(),
    )
}

impl Slurm {
    /// Starts munge, the controller and the node daemon, and waits for the
    /// node to be idle; `None` (said, or a failure where required) without
    /// Slurm installed.
    pub fn start(test: &str) -> Option<Slurm> {
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
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(dir.join(sub)).expect("make Slurm's directories");
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
        std::fs::write(&conf, config(&dir, &node_name(), cpus)).expect("write slurm.conf");
        let mut slurm = Slurm {
            dir: dir.clone(),
            conf: conf.clone(),
            daemons: Vec::new(),
        };
        let d = dir.display().to_string();
        slurm.daemon(&[
            "munged",
            "-F",
            &format!("--socket={d}/munge.sock"),
            &format!("--key-file={d}/munge.key"),
            &format!("--pid-file={d}/munged.pid"),
            &format!("--log-file={d}/munged.log"),
            &format!("--seed-file={d}/munge.seed"),
            "--force",
        ]);
        crate::wait_for("munge's socket", Duration::from_secs(20), || {
            dir.join("munge.sock").exists().then_some(())
        });
        let c = conf.display().to_string();
        slurm.daemon(&["slurmctld", "-D", "-f", &c]);
        slurm.daemon(&["slurmd", "-D", "-f", &c]);
        crate::wait_for("the Slurm node to be idle", Duration::from_secs(60), || {
            let out = slurm
                .command("sinfo")
                .args(["-h", "-o", "%t"])
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .contains("idle")
                .then_some(())
        });
        Some(slurm)
    }

    fn daemon(&mut self, argv: &[&str]) {
        let log = std::fs::File::create(self.dir.join(format!("{}.out", argv[0])))
            .expect("a daemon's log");
        let child = Command::new(argv[0])
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
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// What the daemons logged, for a failure's message.
    pub fn logs(&self) -> String {
        ["slurmctld.log", "slurmd.log"]
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
