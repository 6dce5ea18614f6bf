//! A throw-away OpenSSH server for launch tests: listens on loopback addresses
//! other than 127.0.0.1 (so that elasticrun treats each as another host), on a
//! free high port, accepting only a key made for it. Stopped and removed on drop.
//! Tests start it with [`TestSshd::start_or_skip`]: without OpenSSH they skip,
//! or fail where [`Need::Sshd`] is required.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::needs::{Need, on_path};

pub(crate) const SSHD: &str = "/usr/sbin/sshd";

/// `Err` (what is missing) unless sshd, `ssh` and `ssh-keygen` are here.
pub fn openssh_available() -> Result<(), String> {
    if !Path::new(SSHD).exists() {
        return Err(format!(
            "{SSHD} is missing (apt-get install openssh-server; .ci/run does)"
        ));
    }
    for program in ["ssh", "ssh-keygen"] {
        if on_path(program).is_none() {
            return Err(format!(
                "`{program}` is not on PATH (apt-get install openssh-client; .ci/run does)"
            ));
        }
    }
    Ok(())
}

/// A running test sshd.
#[derive(Debug)]
pub struct TestSshd {
    child: Child,
    dir: PathBuf,
    /// The (first) address it listens on, as a host name for `-H`.
    pub host: String,
    /// Every address it listens on, all on `port`.
    pub hosts: Vec<String>,
    pub port: u16,
    /// The private key it accepts.
    pub identity: PathBuf,
}

pub(crate) fn keygen(path: &Path) {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("ssh-keygen (apt openssh-client) runs");
    assert!(st.success(), "ssh-keygen failed");
}

impl TestSshd {
    /// [`TestSshd::start_on`]; `None` (the test skips) when OpenSSH is
    /// missing and [`Need::Sshd`] is not required.
    #[track_caller]
    pub fn start_or_skip(ips: &[&str]) -> Option<TestSshd> {
        Need::Sshd.or_skip(openssh_available())?;
        Some(Self::start_on(ips))
    }

    /// Starts one sshd listening on every address of `ips` (127.0.0.0/8), all
    /// on the same port: several hosts that one `-p PORT` reaches.
    pub fn start_on(ips: &[&str]) -> TestSshd {
        let ip = ips[0];
        if let Err(why) = openssh_available() {
            panic!("{why}");
        }
        let dir = std::env::temp_dir().join(format!(
            "elasticrun-sshd-{}-{}",
            std::process::id(),
            ips.join("_")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("sshd dir");
        // Privilege separation needs this directory.
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        keygen(&dir.join("host_key"));
        keygen(&dir.join("id"));
        std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys")).expect("authorized_keys");
        for attempt in 0..5 {
            let port = crate::ports::unused_on(ip.parse().expect("an IP address"));
            let config = dir.join("sshd_config");
            std::fs::write(&config, config_text(&dir, ips, port)).expect("sshd_config");
            let child = Command::new(SSHD)
                .args(["-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start sshd");
            let mut sshd = TestSshd {
                child,
                dir: dir.clone(),
                host: ip.to_owned(),
                hosts: ips.iter().map(|&h| h.to_owned()).collect(),
                port,
                identity: dir.join("id"),
            };
            if sshd.wait_ready(Duration::from_secs(10)) {
                return sshd;
            }
            eprintln!("sshd did not come up on {ip}:{port} (attempt {attempt}); retrying");
        }
        panic!("could not start a test sshd on {ip}");
    }

    /// Whether it accepts connections on every address before `limit` (false
    /// if it exited).
    fn wait_ready(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let addrs: Vec<SocketAddr> = self
            .hosts
            .iter()
            .map(|h| SocketAddr::new(h.parse().expect("ip"), self.port))
            .collect();
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            let up = |a: &SocketAddr| TcpStream::connect_timeout(a, Duration::from_millis(200));
            if addrs.iter().all(|a| up(a).is_ok()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The sshd's process id (its sessions are its descendants).
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// `-p PORT -i KEY`, as elasticrun takes them.
    pub fn ssh_args(&self) -> Vec<String> {
        vec![
            "-p".into(),
            self.port.to_string(),
            "-i".into(),
            self.identity.display().to_string(),
        ]
    }
}

pub(crate) fn config_text(dir: &Path, ips: &[&str], port: u16) -> String {
    let listen: String = ips
        .iter()
        .map(|ip| format!("ListenAddress {ip}\n"))
        .collect();
    format!(
        "Port {port}\n{listen}HostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
         PidFile {d}/sshd.pid\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n\
         PasswordAuthentication no\nKbdInteractiveAuthentication no\nLogLevel ERROR\n",
        d = dir.display()
    )
}

impl Drop for TestSshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
