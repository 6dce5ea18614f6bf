//! Runs the host discovery script (or asks Slurm which of the allocation's
//! nodes are usable) every interval and hands each good result to the
//! driver. A run that fails, times out or prints garbage keeps the last good
//! host set (the driver hears nothing) and is logged with the reason, once
//! per distinct reason in a row so that a flapping script does not flood the
//! log; an empty host list is told once too. Nothing the script starts
//! outlives elasticrun (see `GUARD`).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use elastic::discovery::parse_discovered;
use elastic::hosts::HostSlots;
use elastic::membership::SlotId;
use elastic::slurm::Allocation;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::Say;
use crate::config::HostDiscovery;
use crate::metrics::JobMetrics;

/// Most bytes of script output read; more is garbage.
const MAX_OUTPUT: u64 = 1 << 20;

#[derive(Clone, Debug)]
pub struct Discovery {
    /// The script (a shell command line, run by `/bin/sh -c`), or the
    /// allocation.
    pub source: HostDiscovery,
    pub interval: Duration,
    pub timeout: Duration,
    pub slots_per_host: usize,
}

/// How the script is run: `/bin/sh -c GUARD sh SCRIPT`, in a process group
/// of its own. The script line goes through the shell (`eval`), as horovodrun
/// does, so it may carry arguments. Beside it a watcher waits on fd 3, the
/// read end of a pipe whose write end only elasticrun holds: when elasticrun
/// ends, however it ends (SIGKILL included), the pipe closes and the watcher
/// kills the whole group, so nothing the script started outlives elasticrun.
const GUARD: &str = r#"exec 3<&0 </dev/null
( read -r _ <&3; kill -KILL 0 ) >/dev/null 2>&1 &
w=$!
( eval "$1" ) 3<&- &
s=$!
wait "$s"; rc=$?
kill "$w" 2>/dev/null
exit "$rc""#;

/// Most bytes of the script's stderr kept for an error message (the rest is
/// read and dropped, so a chatty script never blocks).
const MAX_STDERR: usize = 4096;

/// Runs the discovery once: its host set, or why there is none.
pub async fn discover_once(d: &Discovery) -> Result<Vec<HostSlots>, String> {
    match &d.source {
        HostDiscovery::Script(script) => run_script(script, d).await,
        HostDiscovery::Allocation(a) => usable_nodes(a, d.timeout).await,
    }
}

/// The allocation's nodes that Slurm does not hold unusable: `sinfo -h -N
/// -n NODELIST -o '%N %t'` (each node's state) read by
/// [`elastic::slurm::usable`].
async fn usable_nodes(a: &Allocation, timeout: Duration) -> Result<Vec<HostSlots>, String> {
    let run = Command::new("sinfo")
        .args(["-h", "-N", "-n", &a.nodelist, "-o", "%N %t"])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(timeout, run).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("cannot run sinfo: {e}")),
        Err(_) => return Err(format!("sinfo gave no answer within {timeout:?}")),
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("sinfo failed ({}): {}", out.status, err.trim()));
    }
    Ok(elastic::slurm::usable(
        &a.hosts,
        &String::from_utf8_lossy(&out.stdout),
    ))
}

/// Runs the script once.
async fn run_script(script: &Path, d: &Discovery) -> Result<Vec<HostSlots>, String> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(GUARD)
        .arg("sh")
        .arg(script.as_os_str())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run /bin/sh: {e}"))?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(nix::unistd::Pid::from_raw);
    // Held until the run is over: dropping it ends the script's group.
    let _lifeline = child.stdin.take();
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("the script has no output pipes".into());
    };
    let run = async {
        let (o, e) = tokio::join!(
            read_capped(stdout, MAX_OUTPUT as usize + 1),
            read_capped(stderr, MAX_STDERR)
        );
        let ((out, _), (err, _)) = (o.map_err(|e| e.to_string())?, e.map_err(|e| e.to_string())?);
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
    /// The slots of workers that register by themselves, when the job's
    /// slots come from them instead of a host list.
    slots: Option<mpsc::Receiver<Vec<SlotId>>>,
    task: Option<JoinHandle<()>>,
}

/// What a feed offers the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Hosts and how many slots each has.
    Hosts(Vec<HostSlots>),
    /// Exactly these slots (`elasticrun serve`: the workers' claimed slots).
    Slots(Vec<SlotId>),
}

/// Host sets that may wait for the driver.
const FEED: usize = 4;

impl HostFeed {
    /// A feed of what is sent on the returned channel.
    pub fn channel() -> (mpsc::Sender<Vec<HostSlots>>, HostFeed) {
        let (tx, rx) = mpsc::channel(FEED);
        let feed = HostFeed {
            rx,
            slots: None,
            task: None,
        };
        (tx, feed)
    }

    /// `hosts`, once.
    pub fn fixed(hosts: Vec<HostSlots>) -> HostFeed {
        let (tx, feed) = Self::channel();
        // The channel is new and empty: this cannot fail.
        let _ = tx.try_send(hosts);
        feed
    }

    /// The script's good results, every interval; its failures are said
    /// on `say`.
    pub fn script(d: Discovery, say: Say, metrics: JobMetrics) -> HostFeed {
        let (tx, mut feed) = Self::channel();
        feed.task = Some(tokio::spawn(watch(d, tx, say, metrics)));
        feed
    }

    /// The slots sent on `rx` by `task` (ended with the feed).
    pub fn slots(rx: mpsc::Receiver<Vec<SlotId>>, task: JoinHandle<()>) -> HostFeed {
        let (_, mut feed) = Self::channel();
        feed.slots = Some(rx);
        feed.task = Some(task);
        feed
    }

    /// The next host or slot set; `None` once no more can come.
    pub async fn next(&mut self) -> Option<Offer> {
        match &mut self.slots {
            Some(rx) => rx.recv().await.map(Offer::Slots),
            None => self.rx.recv().await.map(Offer::Hosts),
        }
    }
}

impl Drop for HostFeed {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

/// Reads `r` to its end, keeping the first `cap` bytes; says whether there
/// was more.
async fn read_capped(
    mut r: impl AsyncRead + Unpin,
    cap: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut kept = Vec::new();
    let mut more = false;
    let mut buf = [0u8; 8192];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok((kept, more));
        }
        let room = cap - kept.len();
        more |= n > room;
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
}

/// What the last run of the script found, so that each change is told once.
#[derive(Debug, Default, PartialEq)]
enum Last {
    #[default]
    Nothing,
    Hosts,
    NoHosts,
    Failed(String),
}

/// Runs the script every interval for as long as `to` is open, sending each
/// good host set. A failure is told once per distinct reason in a row, and so
/// is an empty host list (the job pauses on it).
pub async fn watch(d: Discovery, to: mpsc::Sender<Vec<HostSlots>>, say: Say, metrics: JobMetrics) {
    let mut tick = tokio::time::interval(d.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Last::Nothing;
    let mut had_hosts = false;
    loop {
        tick.tick().await;
        let found = discover_once(&d).await;
        metrics.discovery(found.is_err());
        let now = match found {
            Ok(hosts) => {
                let empty = hosts.is_empty();
                if to.send(hosts).await.is_err() {
                    return;
                }
                if empty { Last::NoHosts } else { Last::Hosts }
            }
            Err(why) => Last::Failed(why),
        };
        if now != last {
            match &now {
                Last::NoHosts => {
                    say.line("host discovery: the script lists no hosts; the job waits for hosts")
                }
                Last::Failed(why) if had_hosts => say.line(format_args!(
                    "host discovery: {why}; keeping the last good host set"
                )),
                Last::Failed(why) => say.line(format_args!(
                    "host discovery: {why}; there is no good host set yet"
                )),
                Last::Hosts | Last::Nothing => {}
            }
        }
        had_hosts |= now == Last::Hosts;
        last = now;
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
            source: HostDiscovery::Script(path),
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
            source: HostDiscovery::Script(dir.join("nope.sh")),
            ..ok.clone()
        };
        let e = discover_once(&missing).await.unwrap_err();
        assert!(e.contains("127") && e.contains("nope.sh"), "{e}");
        let with_args = Discovery {
            source: HostDiscovery::Script(
                format!("{} extra-arg", dir.join("ok.sh").display()).into(),
            ),
            ..ok
        };
        assert_eq!(discover_once(&with_args).await.unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_chatty_script_is_heard_to_the_end() {
        let dir =
            std::env::temp_dir().join(format!("elasticrun-disc-chatty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let chatty = script(
            &dir,
            "chatty.sh",
            "i=0; while [ $i -lt 2000 ]; do echo 'a warning of some length, again and again' >&2; i=$((i+1)); done; echo a:2",
        );
        assert_eq!(discover_once(&chatty).await.unwrap().len(), 1);
        let failing = script(
            &dir,
            "chatty-fail.sh",
            "i=0; while [ $i -lt 2000 ]; do echo 'the same complaint' >&2; i=$((i+1)); done; exit 4",
        );
        let e = discover_once(&failing).await.unwrap_err();
        assert!(
            e.contains("the same complaint") && e.len() < 2 * MAX_STDERR,
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Whether `pid` is a process that has not exited.
    fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().chars().next()))
            .flatten()
            .is_some_and(|state| state != 'Z' && state != 'X')
    }

    /// A run dropped in flight (the job ended) takes the script's children with it.
    #[tokio::test]
    async fn nothing_the_script_started_outlives_its_run() {
        let dir = std::env::temp_dir().join(format!("elasticrun-disc-kids-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pids = dir.join("pids");
        let mut d = script(
            &dir,
            "kids.sh",
            &format!(
                "sleep 1000 & echo $! > {p}.tmp; mv {p}.tmp {p}; wait",
                p = pids.display()
            ),
        );
        d.timeout = Duration::from_secs(600);
        let child = {
            let run = discover_once(&d);
            tokio::pin!(run);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                tokio::select! {
                    r = &mut run => panic!("the script ended: {r:?}"),
                    () = tokio::time::sleep(Duration::from_millis(10)) => {}
                }
                if let Ok(p) = std::fs::read_to_string(&pids) {
                    break p.trim().parse::<i32>().unwrap();
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the script never started its child"
                );
            }
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while running(child) {
            assert!(
                std::time::Instant::now() < deadline,
                "pid {child} outlived the run"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
