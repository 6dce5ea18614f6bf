//! A real headless browser (Debian's `chromium`) for the status page's
//! tests, driven over the DevTools protocol through a pipe
//! (`--remote-debugging-pipe`: the browser reads commands on descriptor 3
//! and writes answers on 4, each a JSON message ended by a NUL byte), so a
//! test reads the live page's DOM as the page's own script keeps it up to
//! date. Descriptors 3 and 4 are two named pipes in a scratch directory
//! that a shell opens before it becomes the browser; the browser, its
//! profile and the pipes are gone when the [`Browser`] drops.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::needs::{Need, on_path};

/// How long a command to the browser may take to be answered.
const ANSWER: Duration = Duration::from_secs(20);

/// A headless browser showing one page.
#[derive(Debug)]
pub struct Browser {
    child: Child,
    to: File,
    from: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    dir: PathBuf,
}

impl Browser {
    /// Opens `url` in a new headless browser; `None` (after saying so, or
    /// failing where [`Need::Chromium`] is required) without `chromium`.
    pub fn open(url: &str) -> Option<Browser> {
        let Some(program) = on_path("chromium") else {
            Need::Chromium.unavailable("no chromium on PATH (Debian's chromium package)");
            return None;
        };
        let mut b = Browser::start(&program);
        let target = b.call(None, "Target.createTarget", json!({ "url": url }));
        let target = target["targetId"].clone();
        let attached = b.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        b.session = attached["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session in {attached}"))
            .to_owned();
        Some(b)
    }

    fn start(program: &std::path::Path) -> Browser {
        static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("elasticrun-browser-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The browser's own temporary files (its shared memory, with
        // /dev/shm not used) go here too: killed, it cannot remove them.
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let (cmds, answers) = (dir.join("in"), dir.join("out"));
        for fifo in [&cmds, &answers] {
            nix::unistd::mkfifo(fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        }
        let child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<\"$IN\" 4>\"$OUT\"")
            .arg(program)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .arg("about:blank")
            .env("TMPDIR", &tmp)
            .env("IN", &cmds)
            .env("OUT", &answers)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: the browser's helper processes are
            // stopped with it.
            .process_group(0)
            .spawn()
            .expect("start chromium");
        // The shell opens the command pipe, then the answer pipe: opening
        // our ends in the same order meets it; a thread, so that a shell
        // that never opens them is a timeout, not a hang.
        let (opened_tx, opened) = mpsc::channel();
        std::thread::spawn(move || {
            let to = std::fs::OpenOptions::new().write(true).open(&cmds);
            let from = to.as_ref().ok().map(|_| File::open(&answers));
            let _ = opened_tx.send((to, from));
        });
        let (to, from) = match opened.recv_timeout(ANSWER) {
            Ok((Ok(to), Some(Ok(from)))) => (to, from),
            other => panic!("the browser's pipes did not open: {other:?}"),
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_answers(from, &tx));
        Browser {
            child,
            to,
            from: rx,
            next_id: 1,
            session: String::new(),
            dir,
        }
    }

    /// Sends `method` (to the page's session if `session`), and returns its
    /// result.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to the browser");
        let deadline = Instant::now() + ANSWER;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no answer to {method} from the browser: {e}"));
            if answer["id"] != json!(id) {
                continue;
            }
            if let Some(err) = answer.get("error") {
                panic!("the browser refused {method}: {err}");
            }
            return answer["result"].clone();
        }
    }

    /// Evaluates `expression` in the page and returns its value (as JSON).
    pub fn eval(&mut self, expression: &str) -> Value {
        let session = self.session.clone();
        let params = json!({ "expression": expression, "returnByValue": true });
        let r = self.call(Some(&session), "Runtime.evaluate", params);
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression} threw in the page: {e}");
        }
        r["result"]["value"].clone()
    }
}

/// Every NUL-ended message from the browser, parsed, until it closes.
fn read_answers(from: File, tx: &mpsc::Sender<Value>) {
    let mut r = BufReader::new(from);
    let mut msg = Vec::new();
    loop {
        msg.clear();
        match r.read_until(0, &mut msg) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if msg.last() == Some(&0) {
            msg.pop();
        }
        if let Ok(v) = serde_json::from_slice(&msg)
            && tx.send(v).is_err()
        {
            return;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let group = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
