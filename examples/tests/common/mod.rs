//! What the example programs' tests share.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Runs `bin` with `args` on its own (no coordinator: a world of one);
/// kills it and fails the test after `limit`.
pub(crate) fn run(bin: &str, args: &[&str], limit: Duration) -> Output {
    let child = Command::new(bin)
        .args(args)
        .env_remove("ELASTICRUN_COORDINATOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("cannot wait for {bin}: {e}")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("{bin} {args:?} did not exit within {limit:?}");
        }
    }
}
