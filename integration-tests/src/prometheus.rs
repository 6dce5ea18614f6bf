//! A real Prometheus for the tests (Debian's `prometheus`): started on a
//! free loopback port with its data in a directory of the test's, scraping
//! one target every 200 ms; queried through its HTTP API; stopped and its
//! files removed on drop. Also `promtool check metrics` on an exposition.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::needs::{Need, on_path};

/// A running Prometheus.
#[derive(Debug)]
pub struct Prometheus {
    dir: PathBuf,
    child: Child,
    pub addr: SocketAddr,
}

fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], crate::ports::unused()))
}

/// `GET path` from `addr` over HTTP/1.1: the status code and the body.
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)
    } else {
        body.to_owned()
    };
    Ok((code, body))
}

/// The address in elasticrun's `metrics at http://ADDR/metrics, the
/// status page at http://ADDR/` line, if `line` is that line.
pub fn said_address(line: &str) -> Option<SocketAddr> {
    line.split_once("metrics at http://")?
        .1
        .split_once("/metrics")?
        .0
        .parse()
        .ok()
}

/// The value of the sample `name` (with its labels, as exposed) in an
/// exposition.
pub fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' '))
        })
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

/// A chunked body's data.
fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// `%XX` for every byte of `s` but letters and digits.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Prometheus {
    /// Scrapes `target` (`HOST:PORT`, its `/metrics`) every 200 ms; `None`
    /// (said, or a failure where required) without Prometheus installed.
    pub fn start(test: &str, target: SocketAddr) -> Option<Prometheus> {
        if on_path("prometheus").is_none() || on_path("promtool").is_none() {
            Need::Prometheus.unavailable("no prometheus or promtool (apt install prometheus)");
            return None;
        }
        let dir =
            std::env::temp_dir().join(format!("elasticrun-prom-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("Prometheus's directory");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 200ms\n  scrape_timeout: 200ms\n\
                 scrape_configs:\n  - job_name: elasticrun\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .expect("prometheus.yml");
        let addr = free_addr();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("its log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log"))
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { dir, child, addr };
        crate::wait_for("Prometheus ready", Duration::from_secs(60), || {
            matches!(get(p.addr, "/-/ready"), Ok((200, _))).then_some(())
        });
        Some(p)
    }

    /// The value of instant query `q`'s first sample, if any.
    pub fn query(&self, q: &str) -> Option<f64> {
        let (code, body) = get(self.addr, &format!("/api/v1/query?query={}", encode(q))).ok()?;
        if code != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// What Prometheus logged, for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `promtool check metrics` on `exposition`: its verdict (`Err` with what
/// it said).
pub fn promtool_check(exposition: &str) -> Result<(), String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run promtool: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(exposition.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
