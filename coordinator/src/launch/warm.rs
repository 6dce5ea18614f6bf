//! Python workers started ahead (`--prestart-imports MODULES`): for a
//! COMMAND of `python [OPTIONS] SCRIPT ARGS` or `python [OPTIONS] -m MODULE
//! ARGS`, each slot of this machine keeps a Python process that has already
//! imported MODULES (torch, typically: more than a second of every start)
//! and waits on its standard input. Starting a worker on the slot hands that
//! process the worker's environment and arguments in one JSON line; it runs
//! the program in itself (`runpy`, as `python SCRIPT` would) and the slot
//! gets a new one for its next start, [`PRESTART_DELAY`] later. So a restart after a failure
//! (`--max-restarts`) or a replacement skips Python's start and the imports.
//!
//! A variable read while the interpreter or the imports start
//! ([`STARTUP_VARS`]: thread counts, allocator tunables, preloads, visible
//! GPUs) that differs from the waiting process's makes it start the
//! program afresh (`exec`) instead, with the new environment: nothing of the
//! old start leaks into the new one. A waiting process whose coordinator
//! dies sees its standard input end and exits.
//!
//! ```text
//!  slot ──► python -c BOOTSTRAP MODULES (imports, waits) ──start──► JSON line ──► runpy(SCRIPT)
//!        └─► the next one, started at once, waits for the next start
//! ```

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

/// Read as the interpreter or the imports start: a waiting process whose
/// values differ from a start's runs that start afresh.
pub const STARTUP_VARS: [&str; 11] = [
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GLIBC_TUNABLES",
    "MALLOC_ARENA_MAX",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONUNBUFFERED",
];

/// The waiting process's program: imports, then one JSON line.
const BOOTSTRAP: &str = r#"
import json, os, runpy, sys
for m in sys.argv[1].split(","):
    if m:
        __import__(m)
line = sys.stdin.readline()
if not line:
    sys.exit(0)
job = json.loads(line)
env = dict(os.environ)
env.update(job["env"])
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
if any(os.environ.get(k) != env.get(k) for k in job["startup"]):
    os.execve(sys.executable, [sys.executable] + job["cold"], env)
os.environ.update(job["env"])
os.environ["ELASTICRUN_PRESTARTED"] = "1"
sys.argv = job["argv"]
if job["module"] is not None:
    sys.path[0] = os.getcwd()
    runpy.run_module(job.pop("module"), run_name="__main__", alter_sys=True)
else:
    sys.path[0] = os.path.dirname(os.path.realpath(job["argv"][0]))
    runpy.run_path(job["argv"][0], run_name="__main__")
"#;

/// What `python ...` runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonCommand {
    pub python: OsString,
    /// The interpreter's own options (`-u`, `-X dev`, ...).
    pub options: Vec<String>,
    /// `-m MODULE`, else a script (the first of `args`).
    pub module: Option<String>,
    /// The script (if no module) and its arguments.
    pub args: Vec<String>,
}

/// The interpreter options that take a value.
const OPTION_VALUES: [&str; 3] = ["-X", "-W", "--check-hash-based-pycs"];

/// `command` as a Python program, where it is one this can run ahead:
/// `python*` with a script or `-m MODULE` (not `-c`, not stdin), all UTF-8.
pub fn python_command(command: &[OsString]) -> Option<PythonCommand> {
    let (python, rest) = command.split_first()?;
    let name = std::path::Path::new(python).file_name()?.to_str()?;
    if !name.starts_with("python") {
        return None;
    }
    let mut words = rest.iter().map(|w| w.to_str().map(str::to_owned));
    let mut options = Vec::new();
    while let Some(w) = words.next() {
        let w = w?;
        match w.as_str() {
            "-m" => {
                let module = words.next()??;
                let args = words.collect::<Option<Vec<_>>>()?;
                return Some(PythonCommand {
                    python: python.clone(),
                    options,
                    module: Some(module),
                    args,
                });
            }
            "-c" | "-" => return None,
            o if OPTION_VALUES.contains(&o) => {
                options.push(w);
                options.push(words.next()??);
            }
            o if o.starts_with('-') => options.push(w),
            _ => {
                let mut args = vec![w];
                args.extend(words.collect::<Option<Vec<_>>>()?);
                return Some(PythonCommand {
                    python: python.clone(),
                    options,
                    module: None,
                    args,
                });
            }
        }
    }
    None
}

/// The line a waiting process is given.
#[derive(Debug, Serialize)]
struct Job<'a> {
    env: HashMap<&'a str, &'a str>,
    argv: Vec<&'a str>,
    module: Option<&'a str>,
    startup: &'a [&'a str],
    /// The interpreter's arguments for a fresh start.
    cold: Vec<&'a str>,
}

impl PythonCommand {
    fn job_line(&self, env: &[(String, String)]) -> String {
        let mut cold: Vec<&str> = self.options.iter().map(String::as_str).collect();
        if let Some(m) = &self.module {
            cold.extend(["-m", m.as_str()]);
        }
        cold.extend(self.args.iter().map(String::as_str));
        let argv = match &self.module {
            // runpy puts the module's file in argv[0].
            Some(m) => std::iter::once(m.as_str())
                .chain(self.args.iter().map(String::as_str))
                .collect(),
            None => self.args.iter().map(String::as_str).collect(),
        };
        let job = Job {
            env: env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            argv,
            module: self.module.as_deref(),
            startup: &STARTUP_VARS,
            cold,
        };
        let mut line = serde_json::to_string(&job).unwrap_or_default();
        line.push('\n');
        line
    }
}

/// How long a rank other than 0 waits for rank 0 to listen before it is
/// started anyway.
pub const MASTER_WAIT: Duration = Duration::from_secs(2);

/// The process of the current start's rank 0 on this machine, once started
/// (0 until then).
pub type Rank0 = Arc<AtomicU32>;

/// Waits (up to [`MASTER_WAIT`]) until rank 0 of a static job on this
/// machine listens, when `env` is another rank's: at `MASTER_PORT` (torch's
/// store), or on any socket of rank 0's process `rank0` (a program on
/// elasticrun's runtime, whose rank 0 listens for its data plane and never
/// at `MASTER_PORT`). Started at once, a rank finds torch's store not yet
/// listening and its client backs off for about a second before trying
/// again, longer than the whole start otherwise takes. Looks at the
/// kernel's socket tables only (no connection is made to the store).
pub async fn after_master(env: &[(String, String)], rank0: &AtomicU32) {
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let (Some(rank), Some(port)) = (get("RANK"), get("MASTER_PORT")) else {
        return;
    };
    let Ok(port) = port.parse::<u16>() else {
        return;
    };
    let local = get("MASTER_ADDR").is_some_and(super::address::is_this_machine);
    if rank == "0" || !local {
        return;
    }
    let deadline = tokio::time::Instant::now() + MASTER_WAIT;
    while tokio::time::Instant::now() < deadline {
        let tables = ["/proc/net/tcp", "/proc/net/tcp6"].map(std::fs::read_to_string);
        let tables: Vec<&str> = tables.iter().flatten().map(String::as_str).collect();
        if tables.iter().any(|t| listening(t, port)) {
            return;
        }
        let pid = rank0.load(Ordering::Relaxed);
        if pid != 0 && !sockets(pid).is_disjoint(&listeners(&tables)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The rows of a socket table (`/proc/net/tcp`'s text) that listen: each
/// one's local port and socket inode.
fn listening_rows(table: &str) -> impl Iterator<Item = (u16, u64)> + '_ {
    const LISTEN: &str = "0A";
    table.lines().skip(1).filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(3) != Some(&LISTEN) {
            return None;
        }
        let (_, port) = f.get(1)?.rsplit_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        Some((port, f.get(9)?.parse().ok()?))
    })
}

/// Whether a socket table has a socket listening on `port`.
fn listening(table: &str, port: u16) -> bool {
    listening_rows(table).any(|(p, _)| p == port)
}

/// The inodes of the listening sockets in `tables`.
fn listeners(tables: &[&str]) -> HashSet<u64> {
    tables
        .iter()
        .flat_map(|t| listening_rows(t))
        .map(|(_, inode)| inode)
        .collect()
}

/// The inodes of the sockets process `pid` holds open.
fn sockets(pid: u32) -> HashSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    fds.filter_map(|fd| {
        let link = std::fs::read_link(fd.ok()?.path()).ok()?;
        let link = link.to_str()?;
        link.strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    })
    .collect()
}

/// A process waiting to become a worker.
#[derive(Debug)]
pub struct Waiting {
    child: Child,
}

impl Waiting {
    /// Makes it the worker that `line` ([`WarmPool::line`]) describes, once
    /// the worker's rank 0 listens ([`after_master`]): the line is written
    /// then, the process is the worker's from now. `None` where it has ended
    /// meanwhile (its imports failed): the caller starts the worker as usual.
    pub fn start(
        mut self,
        line: String,
        env: Vec<(String, String)>,
        rank0: Rank0,
    ) -> Option<Child> {
        if !matches!(self.child.try_wait(), Ok(None)) {
            tracing::warn!(
                "the Python process started ahead had ended; starting the worker afresh"
            );
            return None;
        }
        let mut stdin = self.child.stdin.take()?;
        tokio::spawn(async move {
            after_master(&env, &rank0).await;
            let written = async {
                stdin.write_all(line.as_bytes()).await?;
                stdin.flush().await
            };
            // One that has ended by now ends as the worker it was to be.
            if let Err(e) = written.await {
                tracing::warn!(%e, "the Python process started ahead took no work");
            }
        });
        Some(self.child)
    }
}

/// The processes waiting, one per slot of this machine; kept across the
/// starts of a job (each restart has a launcher of its own) and killed
/// when the job ends.
#[derive(Debug)]
pub struct WarmPool {
    program: PythonCommand,
    imports: String,
    waiting: HashMap<u32, Waiting>,
    rank0: Rank0,
}

/// A job's pool, shared by its starts.
pub type SharedPool = Arc<Mutex<WarmPool>>;

/// How long after a worker's start the next process for its slot is
/// started: the imports would otherwise take the CPU from the program
/// starting (on a machine with as many workers as cores, they made a
/// restart a second slower than none started ahead).
pub const PRESTART_DELAY: Duration = Duration::from_secs(2);

/// Starts the next process for `slot` after [`PRESTART_DELAY`], unless the
/// job (its pool) is over by then.
pub fn prestart_later(pool: &SharedPool, slot: u32, env: Vec<(String, String)>) {
    let pool = Arc::downgrade(pool);
    tokio::spawn(async move {
        tokio::time::sleep(PRESTART_DELAY).await;
        let Some(pool) = pool.upgrade() else { return };
        let mut p = pool.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = p.prestart(slot, &env) {
            tracing::warn!(slot, %e, "cannot start a Python process ahead");
        }
    });
}

impl WarmPool {
    /// The job's pool, where `--prestart-imports` names modules and the
    /// command is a Python program.
    pub fn for_job(command: &[OsString], imports: &[String]) -> Option<SharedPool> {
        let program = python_command(command).filter(|_| !imports.is_empty())?;
        Some(Arc::new(Mutex::new(WarmPool {
            program,
            imports: imports.join(","),
            waiting: HashMap::new(),
            rank0: Rank0::default(),
        })))
    }

    /// Starts a process for `slot` (with `env` added to this one's, as a
    /// worker would be) that imports and waits.
    pub fn prestart(&mut self, slot: u32, env: &[(String, String)]) -> std::io::Result<()> {
        let mut cmd = Command::new(&self.program.python);
        cmd.args(&self.program.options)
            .arg("-c")
            .arg(BOOTSTRAP)
            .arg(&self.imports)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn()?;
        // One already waiting there is killed as it drops.
        self.waiting.insert(slot, Waiting { child });
        Ok(())
    }

    /// The process waiting on `slot`, if any.
    pub fn take(&mut self, slot: u32) -> Option<Waiting> {
        self.waiting.remove(&slot)
    }

    /// Where the current start's rank 0 process is told to the others.
    pub fn rank0(&self) -> Rank0 {
        Arc::clone(&self.rank0)
    }

    /// The line that makes a waiting process the worker of `env`.
    pub fn line(&self, env: &[(String, String)]) -> String {
        self.program.job_line(env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn python_scripts_and_modules_are_recognized_with_their_options() {
        let p = python_command(&words("/venv/bin/python3 -u -X dev train.py --lr 0.1")).unwrap();
        assert_eq!(p.python, "/venv/bin/python3");
        assert_eq!(p.options, ["-u", "-X", "dev"]);
        assert_eq!(
            (p.module.as_deref(), p.args.as_slice()),
            (
                None,
                &["train.py".to_owned(), "--lr".into(), "0.1".into()][..]
            )
        );
        let m = python_command(&words("python -m pkg.train --epochs 2")).unwrap();
        assert_eq!(m.module.as_deref(), Some("pkg.train"));
        assert_eq!(m.args, ["--epochs", "2"]);
        for not in [
            "./train --epochs 1",
            "python -c print(1)",
            "python",
            "python -u",
            "python -m",
        ] {
            assert_eq!(python_command(&words(not)), None, "{not}");
        }
    }

    #[test]
    fn a_listening_port_is_found_in_the_kernels_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 4242 1\n\
            1: 0100007F:A3B2 0100007F:7530 01 00000000:00000000 00:00000000 00000000 0 0 4343 1\n";
        assert!(listening(table, 0x7530));
        assert_eq!(listeners(&[table]), HashSet::from([4242]));
        // Connected, not listening; and absent.
        assert!(!listening(table, 0xA3B2));
        assert!(!listening(table, 80));
        assert!(!listening("garbage\nmore garbage", 80));
    }

    #[tokio::test]
    async fn rank_0_and_other_hosts_masters_are_not_waited_for() {
        let env = |rank: &str, addr: &str| {
            vec![
                ("RANK".to_owned(), rank.to_owned()),
                ("MASTER_ADDR".to_owned(), addr.to_owned()),
                ("MASTER_PORT".to_owned(), "1".to_owned()),
            ]
        };
        let quick = Duration::from_millis(500);
        let nobody = AtomicU32::new(0);
        for e in [env("0", "127.0.0.1"), env("1", "192.0.2.1"), vec![]] {
            tokio::time::timeout(quick, after_master(&e, &nobody))
                .await
                .unwrap();
        }
        // Rank 1 of a master here that never listens: waits its bound.
        let started = std::time::Instant::now();
        after_master(&env("1", "127.0.0.1"), &nobody).await;
        assert!(started.elapsed() >= MASTER_WAIT);
        // A rank 0 that listens anywhere (here: this test's process).
        let _listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let me = AtomicU32::new(std::process::id());
        tokio::time::timeout(quick, after_master(&env("1", "127.0.0.1"), &me))
            .await
            .unwrap();
    }

    #[test]
    fn the_job_line_carries_the_environment_the_arguments_and_a_cold_start() {
        let p = python_command(&words("python -u t.py a")).unwrap();
        let line = p.job_line(&[("RANK".into(), "1".into())]);
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line}"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["env"]["RANK"], "1");
        assert_eq!(v["argv"], serde_json::json!(["t.py", "a"]));
        assert_eq!(v["cold"], serde_json::json!(["-u", "t.py", "a"]));
        assert!(v["module"].is_null());
        assert!(
            v["startup"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s == "OMP_NUM_THREADS")
        );
        let m = python_command(&words("python -m pkg x")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&m.job_line(&[])).unwrap();
        assert_eq!(v["cold"], serde_json::json!(["-m", "pkg", "x"]));
        assert_eq!(v["argv"], serde_json::json!(["pkg", "x"]));
    }
}
