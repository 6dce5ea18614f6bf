//! A throw-away OpenSSH server for launch tests: listens on a loopback address
//! other than 127.0.0.1 (so that elasticrun treats it as another host), on a
//! free high port, accepting only a key made for it. Stopped and removed on drop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SSHD: &str = "/usr/sbin/sshd";

/// A running test sshd.
#[derive(Debug)]
pub struct TestSshd {
    child: Child,
    dir: PathBuf,
    /// The address it listens on, as a host name for `-H`.
    pub host: String,
    pub port: u16,
    /// The private key it accepts.
    pub identity: PathBuf,
}

fn keygen(path: &Path) {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("ssh-keygen (apt openssh-client) runs");
    assert!(st.success(), "ssh-keygen failed");
}

fn free_port(ip: &str) -> u16 {
    TcpListener::bind((ip, 0))
        .expect("bind a free port")
        .local_addr()
        .expect("local addr")
        .port()
}

impl TestSshd {
    /// Starts sshd on `ip` (a 127.0.0.0/8 address).
    pub fn start(ip: &str) -> TestSshd {
        assert!(
            Path::new(SSHD).exists(),
            "{SSHD} is missing: apt-get install openssh-server (.ci/run does)"
        );
        let dir =
            std::env::temp_dir().join(format!("elasticrun-sshd-{}-{}", std::process::id(), ip));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("sshd dir");
        // Privilege separation needs this directory.
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        keygen(&dir.join("host_key"));
        keygen(&dir.join("id"));
        std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys")).expect("authorized_keys");
        for attempt in 0..5 {
            let port = free_port(ip);
            let config = dir.join("sshd_config");
            std::fs::write(&config, config_text(&dir, ip, port)).expect("sshd_config");
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

    /// Whether it accepts connections before `limit` (false if it exited).
    fn wait_ready(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let addr = SocketAddr::new(self.host.parse().expect("ip"), self.port);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
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

fn config_text(dir: &Path, ip: &str, port: u16) -> String {
    format!(
        "Port {port}\nListenAddress {ip}\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
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
