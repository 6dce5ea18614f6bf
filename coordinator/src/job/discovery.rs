//! Runs the host discovery script every interval and hands each good result
//! to the driver. A run that fails, times out or prints garbage keeps the
//! last good host set (the driver hears nothing) and is logged with the
//! reason, once per distinct reason in a row so that a flapping script does
//! not flood the log.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use elastic::discovery::parse_discovered;
use elastic::hosts::HostSlots;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Most bytes of script output read; more is garbage.
const MAX_OUTPUT: u64 = 1 << 20;

#[derive(Clone, Debug)]
pub struct Discovery {
    /// A shell command line (`/bin/sh -c`).
    pub script: PathBuf,
    pub interval: Duration,
    pub timeout: Duration,
    pub slots_per_host: usize,
}

/// Runs the script once: its host set, or why there is none.
pub async fn discover_once(d: &Discovery) -> Result<Vec<HostSlots>, String> {
    // Through the shell, as horovodrun does: the script may carry arguments.
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(d.script.as_os_str())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run /bin/sh: {e}"))?;
    // Whatever the script started goes with it when it overstays.
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(nix::unistd::Pid::from_raw);
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("the script has no output pipes".into());
    };
    let run = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let (mut stdout, mut stderr) = (stdout.take(MAX_OUTPUT + 1), stderr.take(4096));
        let (o, e) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        o.and(e).map_err(|e| e.to_string())?;
        let status = child.wait().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, out, err))
    };
    let (status, out, err) = match tokio::time::timeout(d.timeout, run).await {
        Ok(r) => r?,
        Err(_) => {
            if let Some(g) = group {
                let _ = nix::sys::signal::killpg(g, nix::sys::signal::Signal::SIGKILL);
            }
            return Err(format!("no answer within {:?}", d.timeout));
        }
    };
    if !status.success() {
        let err = String::from_utf8_lossy(&err);
        return Err(format!("it failed ({status}): {}", err.trim()));
    }
    if out.len() as u64 > MAX_OUTPUT {
        return Err(format!("it printed more than {MAX_OUTPUT} bytes"));
    }
    let text = String::from_utf8(out).map_err(|_| "its output is not UTF-8".to_owned())?;
    parse_discovered(&text, d.slots_per_host).map_err(|e| e.to_string())
}

/// Where the driver's host sets come from: a static list (sent once), the
/// discovery script's results, or a test's; dropping it stops the script's
/// task.
#[derive(Debug)]
pub struct HostFeed {
    rx: mpsc::Receiver<Vec<HostSlots>>,
    task: Option<JoinHandle<()>>,
}

/// Host sets that may wait for the driver.
const FEED: usize = 4;

impl HostFeed {
    /// A feed of what is sent on the returned channel.
    pub fn channel() -> (mpsc::Sender<Vec<HostSlots>>, HostFeed) {
        let (tx, rx) = mpsc::channel(FEED);
        (tx, HostFeed { rx, task: None })
    }

    /// `hosts`, once.
    pub fn fixed(hosts: Vec<HostSlots>) -> HostFeed {
        let (tx, feed) = Self::channel();
        // The channel is new and empty: this cannot fail.
        let _ = tx.try_send(hosts);
        feed
    }

    /// The script's good results, every interval.
    pub fn script(d: Discovery) -> HostFeed {
        let (tx, mut feed) = Self::channel();
        feed.task = Some(tokio::spawn(watch(d, tx)));
        feed
    }

    /// The next host set; `None` once no more can come.
    pub async fn next(&mut self) -> Option<Vec<HostSlots>> {
        self.rx.recv().await
    }
}

impl Drop for HostFeed {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Runs the script every interval for as long as `to` is open, sending each
/// good host set.
pub async fn watch(d: Discovery, to: mpsc::Sender<Vec<HostSlots>>) {
    let mut tick = tokio::time::interval(d.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error: Option<String> = None;
    loop {
        tick.tick().await;
        match discover_once(&d).await {
            Ok(hosts) => {
                last_error = None;
                if to.send(hosts).await.is_err() {
                    return;
                }
            }
            Err(why) => {
                if last_error.as_ref() != Some(&why) {
                    eprintln!("elasticrun: host discovery: {why}; keeping the last good host set");
                }
                last_error = Some(why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn script(dir: &std::path::Path, name: &str, body: &str) -> Discovery {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Discovery {
            script: path,
            interval: Duration::from_millis(10),
            timeout: Duration::from_secs(2),
            slots_per_host: 2,
        }
    }

    #[tokio::test]
    async fn good_bad_and_slow_scripts() {
        let dir = std::env::temp_dir().join(format!("elasticrun-disc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = script(&dir, "ok.sh", "echo '# hosts'; echo a:4; echo; echo b");
        let hosts = discover_once(&ok).await.unwrap();
        assert_eq!(
            hosts.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["a:4", "b:2"]
        );
        let failing = script(&dir, "fail.sh", "echo boom >&2; exit 3");
        let e = discover_once(&failing).await.unwrap_err();
        assert!(e.contains("boom") && e.contains('3'), "{e}");
        let garbage = script(&dir, "garbage.sh", "echo 'a:4 ; rm -rf /'");
        assert!(discover_once(&garbage).await.is_err());
        let mut slow = script(&dir, "slow.sh", "sleep 5; echo a");
        slow.timeout = Duration::from_millis(200);
        let e = discover_once(&slow).await.unwrap_err();
        assert!(e.contains("no answer"), "{e}");
        let missing = Discovery {
            script: dir.join("nope.sh"),
            ..ok.clone()
        };
        let e = discover_once(&missing).await.unwrap_err();
        assert!(e.contains("127") && e.contains("nope.sh"), "{e}");
        let with_args = Discovery {
            script: format!("{} extra-arg", ok.script.display()).into(),
            ..ok
        };
        assert_eq!(discover_once(&with_args).await.unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
