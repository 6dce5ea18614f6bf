//! Remote workers through the system `ssh`: the command line that starts a
//! worker on another host, in the same working directory and with the same
//! environment, and that stops it when the connection ends.
//!
//! Pure: the argument vector and what goes to ssh's standard input are built
//! here and run by [`super::process`]. No value of the environment is on any
//! command line (`ps` on either host shows none): the remote shell reads the
//! job secret and then the environment from ssh's standard input
//! ([`stdin_text`]), which then stays open: when it closes (elasticrun stops
//! the worker, exits or dies) the remote side stops the worker's process group,
//! SIGTERM then SIGKILL.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// How to reach remote hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SshOptions {
    pub port: Option<u16>,
    pub identity_file: Option<PathBuf>,
}

/// Seconds between SIGTERM and SIGKILL on the remote side.
pub const REMOTE_GRACE_SECS: u32 = 3;

/// Quotes `s` for a POSIX shell.
pub fn quote(s: &str) -> String {
    String::from_utf8(quote_bytes(s.as_bytes())).unwrap_or_else(|e| {
        // Quoting adds only ASCII around and between whole characters.
        String::from_utf8_lossy(e.as_bytes()).into_owned()
    })
}

/// Quotes the bytes `s` (any bytes but NUL, as a POSIX shell takes them).
pub fn quote_bytes(s: &[u8]) -> Vec<u8> {
    if !s.is_empty()
        && s.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"@%+=:,./_-".contains(b))
    {
        return s.to_vec();
    }
    let mut out = Vec::with_capacity(s.len() + 2);
    out.push(b'\'');
    for &b in s {
        if b == b'\'' {
            out.extend_from_slice(br"'\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// Whether elasticrun's own environment variable `name` goes to remote workers.
/// Everything does except what belongs to the remote login (home, user,
/// shell, terminal, ssh session) or cannot be passed through `env`.
pub fn forwarded(name: &str) -> bool {
    const LOGIN: &[&str] = &[
        "HOME",
        "USER",
        "LOGNAME",
        "MAIL",
        "SHELL",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "HOSTNAME",
        "_",
        "TERM",
        "DISPLAY",
        "LS_COLORS",
        "XDG_RUNTIME_DIR",
        "XDG_SESSION_ID",
        "SSH_AUTH_SOCK",
        "SSH_AGENT_PID",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        control::env::SECRET,
    ];
    let valid = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    valid && !LOGIN.contains(&name) && !name.starts_with("BASH_FUNC_")
}

/// What elasticrun writes to ssh's standard input: the job secret on one
/// line, the number of lines of the environment block, and the block: one
/// `export 'NAME=value'` per variable (a value may span lines inside its
/// quotes). The remote script reads exactly that much and `eval`s the block.
pub fn stdin_text(secret: &str, env: &[(String, String)]) -> String {
    let block: String = env
        .iter()
        .map(|(k, v)| format!("export {}\n", quote(&format!("{k}={v}"))))
        .collect();
    format!("{secret}\n{}\n{block}", block.matches('\n').count())
}

/// The shell script the remote login shell runs (through `sh -c`).
pub(super) fn remote_script(cwd: &Path, command: &[OsString]) -> Vec<u8> {
    let program: Vec<Vec<u8>> = command.iter().map(|a| quote_bytes(a.as_bytes())).collect();
    let cwd = quote_bytes(cwd.as_os_str().as_bytes());
    // The script around the program and the directory, which may hold any
    // bytes: its text, with markers where they go.
    let script = script_text();
    let mut out = Vec::with_capacity(script.len() + cwd.len() + 64);
    let (head, rest) = script.split_once(CWD).unwrap_or((&script, ""));
    let (middle, tail) = rest.split_once(PROGRAM).unwrap_or((rest, ""));
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(&cwd);
    out.extend_from_slice(middle.as_bytes());
    out.extend_from_slice(&program.join(&b' '));
    out.extend_from_slice(tail.as_bytes());
    out
}

/// Where the remote script's directory and program go in [`script_text`].
const CWD: &str = "\u{0}CWD\u{0}";
const PROGRAM: &str = "\u{0}PROGRAM\u{0}";

/// The remote script with [`CWD`] and [`PROGRAM`] for its directory and
/// program.
fn script_text() -> String {
    // The worker gets a session (so a process group) of its own through
    // `setsid`; a background job's standard input would be /dev/null, so the
    // watcher reads ssh's through fd 3. When it ends, the worker's group is
    // stopped (the group may not exist yet if setsid has not run: then the pid).
    // SIGUSR1 and SIGUSR2 (Slurm's warning signal, which reaches every
    // process of a step) are the program's alone: the script catches them
    // with a handler that does nothing (the program, exec'd, gets the
    // default back) and waits again, the watcher ignores them. A `wait`
    // that returns above 128 was either the program's death by a signal or
    // a signal to the script: if the program is gone, a second `wait` gives
    // its status where the shell still holds it (a signal that ended the
    // program may also have cut the first short after the shell reaped it:
    // dash then said 138 for a program that exited 0), 127 where it was
    // given already.
    format!(
        "IFS= read -r {secret} || exit 255; export {secret}; \
         IFS= read -r n || exit 255; e=; \
         while [ \"$n\" -gt 0 ]; do IFS= read -r l || exit 255; e=\"$e$l\n\"; n=$((n-1)); done; \
         eval \"$e\"; unset e l n; \
         cd {cwd} || exit 255; exec 3<&0; trap : USR1 USR2; \
         setsid {program} </dev/null & pid=$!; \
         {{ trap '' USR1 USR2; while read -r _; do :; done; \
         kill -TERM -$pid 2>/dev/null || kill -TERM $pid 2>/dev/null; \
         sleep {REMOTE_GRACE_SECS}; kill -KILL -$pid 2>/dev/null; }} <&3 & watch=$!; \
         exec 3<&-; while :; do wait $pid; rc=$?; [ $rc -le 128 ] && break; \
         kill -0 $pid 2>/dev/null && continue; wait $pid; r=$?; [ $r -eq 127 ] || rc=$r; break; done; \
         kill -KILL $watch 2>/dev/null; exit $rc",
        secret = control::env::SECRET,
        cwd = CWD,
        program = PROGRAM,
    )
}

/// `ssh ... HOST 'sh -c ...'`: the argument vector that runs `command` on
/// `host`; its environment and the secret go to standard input
/// ([`stdin_text`]).
pub fn command(host: &str, opts: &SshOptions, cwd: &Path, command: &[OsString]) -> Vec<OsString> {
    let mut argv: Vec<String> = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "LogLevel=ERROR",
        // A host that is down or vanishes ends ssh (and so that worker) in
        // seconds rather than at TCP's timeouts.
        "-o",
        "ConnectTimeout=10",
        "-o",
        "ServerAliveInterval=5",
        "-o",
        "ServerAliveCountMax=3",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if let Some(port) = opts.port {
        argv.extend(["-p".to_owned(), port.to_string()]);
    }
    if let Some(id) = &opts.identity_file {
        argv.extend(["-i".to_owned(), id.to_string_lossy().into_owned()]);
    }
    argv.push(host.to_owned());
    let mut last = b"sh -c ".to_vec();
    last.extend(quote_bytes(&remote_script(cwd, command)));
    let mut argv: Vec<OsString> = argv.into_iter().map(OsString::from).collect();
    argv.push(OsString::from_vec(last));
    argv
}

/// What a remote worker's exit code means: the remote shell reports a worker
/// killed by signal N as 128+N, and ssh itself fails with 255.
/// Whether a remote worker's exit code (through ssh) says a signal killed it.
pub fn killed_code(code: i32) -> bool {
    (129..=192).contains(&code) && nix::sys::signal::Signal::try_from(code - 128).is_ok()
}

pub fn describe_code(code: i32) -> String {
    match code {
        255 => "could not be started or lost its ssh connection (ssh exit code 255)".to_owned(),
        129..=192 => {
            let sig = code - 128;
            match nix::sys::signal::Signal::try_from(sig) {
                Ok(s) => format!("was killed by signal {sig} ({s})"),
                Err(_) => format!("exited with code {code}"),
            }
        }
        c => format!("exited with code {c}"),
    }
}

/// Runs the remote script `script` under a local `sh`, standing in for the
/// remote login shell or srun: the secret and `env` written to its standard
/// input, which stays open (as ssh's does) until the returned end is
/// dropped; its standard output piped.
#[cfg(test)]
pub(super) fn spawn_script(
    script: impl AsRef<std::ffi::OsStr>,
    secret: &str,
    env: &[(String, String)],
) -> (std::process::Child, std::process::ChildStdin) {
    use std::io::Write;
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(stdin_text(secret, env).as_bytes()).unwrap();
    (child, stdin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lossy(argv: Vec<OsString>) -> Vec<String> {
        argv.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// Program arguments that are not UTF-8 reach the program byte for
    /// byte through the remote script.
    #[test]
    fn arguments_pass_through_as_bytes() {
        let odd = OsString::from_vec(b"caf\xe9 \xff'x\"$y".to_vec());
        let cmd = [OsString::from("printf"), OsString::from("%s|"), odd.clone()];
        let argv = command("h", &SshOptions::default(), Path::new("/"), &cmd);
        use std::io::Read;
        let (mut child, stdin) = spawn_script(argv.last().unwrap(), "s", &[]);
        let mut got = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut got).unwrap();
        drop(stdin);
        assert!(child.wait().unwrap().success());
        let mut want = odd.into_vec();
        want.push(b'|');
        assert_eq!(got, want);
    }

    fn sh(script: &str) -> std::process::Output {
        std::process::Command::new("sh")
            .args(["-c", script])
            .output()
            .unwrap()
    }

    #[test]
    fn quoting_survives_the_shell() {
        for s in [
            "plain",
            "two words",
            "it's",
            "$HOME",
            "a\"b",
            "back\\slash",
            "",
            "new\nline",
            "*",
        ] {
            let out = sh(&format!("printf %s {}", quote(s)));
            assert_eq!(String::from_utf8(out.stdout).unwrap(), s);
        }
    }

    #[test]
    fn login_variables_stay_behind() {
        assert!(
            forwarded("PATH")
                && forwarded("LD_LIBRARY_PATH")
                && forwarded("ELASTICRUN_COORDINATOR")
        );
        assert!(
            !forwarded("HOME") && !forwarded("ELASTICRUN_SECRET") && !forwarded("BASH_FUNC_x%%")
        );
        assert!(!forwarded("1X") && !forwarded("A-B") && !forwarded(""));
    }

    #[test]
    fn ssh_options_precede_the_host() {
        let opts = SshOptions {
            port: Some(2222),
            identity_file: Some("/k/id".into()),
        };
        let argv = lossy(command(
            "node1",
            &opts,
            Path::new("/w"),
            &["./train".into()],
        ));
        let host = argv.iter().position(|a| a == "node1").unwrap();
        assert_eq!(argv.len(), host + 2);
        let before = argv[..host].join(" ");
        assert!(
            before.contains("-p 2222")
                && before.contains("-i /k/id")
                && before.contains("BatchMode=yes"),
            "{before}"
        );
    }

    /// Runs the remote script with a local shell standing in for the remote
    /// login shell: the secret comes from stdin and stays out of the command,
    /// the environment and the directory arrive, and the exit code passes on.
    #[test]
    fn the_remote_script_runs_the_command_where_and_as_asked() {
        let dir = std::env::temp_dir();
        let env = [
            ("GREETING".to_owned(), "hello 'world'".to_owned()),
            (
                "TOKEN".to_owned(),
                "t0ken\nsecond line $(x) `y`\n".to_owned(),
            ),
            ("EMPTY".to_owned(), String::new()),
        ];
        let cmd: Vec<OsString> = [
            "sh",
            "-c",
            "printf '%s|%s|%s|%s|%s' \"$GREETING\" \"$ELASTICRUN_SECRET\" \"$TOKEN\" \"${EMPTY-unset}\" \"$(pwd)\"; exit 7",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let argv = lossy(command("h", &SshOptions::default(), &dir, &cmd));
        let script = argv.last().unwrap();
        for value in ["s3cret", "hello", "t0ken"] {
            assert!(!argv.iter().any(|a| a.contains(value)), "{value} on argv");
        }
        use std::io::Read;
        let (mut child, stdin) = spawn_script(script, "s3cret", &env);
        let status = child.wait().unwrap();
        drop(stdin);
        let mut stdout = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        let cwd = std::fs::canonicalize(&dir).unwrap();
        assert_eq!(
            stdout,
            format!(
                "hello 'world'|s3cret|t0ken\nsecond line $(x) `y`\n||{}",
                cwd.display()
            )
        );
        assert_eq!(status.code(), Some(7));
    }

    /// Closing standard input (elasticrun stopping the worker, or the ssh
    /// connection ending) stops the worker, which here ignores nothing.
    #[test]
    fn closing_standard_input_stops_the_worker() {
        let cmd: Vec<OsString> = ["sleep", "30"].iter().map(OsString::from).collect();
        let argv = command("h", &SshOptions::default(), Path::new("/"), &cmd);
        let (mut child, stdin) = spawn_script(argv.last().unwrap(), "secret", &[]);
        // Close standard input only once the worker runs (the script has read
        // the secret and started `sleep` under it): wait for the child to appear.
        let started = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !has_child(child.id(), "sleep") {
            assert!(
                std::time::Instant::now() < started,
                "the worker did not start within 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        drop(stdin);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the worker outlived its standard input"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(128 + 15), "stopped by SIGTERM");
    }

    /// Whether a descendant of `pid` runs `name` (from /proc).
    fn has_child(pid: u32, name: &str) -> bool {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return false;
        };
        let mut parents = vec![pid];
        let stats: Vec<(u32, u32, String)> = dir
            .filter_map(|e| {
                let stat = std::fs::read_to_string(e.ok()?.path().join("stat")).ok()?;
                let (head, rest) = stat.rsplit_once(") ")?;
                let (pid, comm) = head.split_once(" (")?;
                let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
                Some((pid.parse().ok()?, ppid, comm.to_owned()))
            })
            .collect();
        while let Some(p) = parents.pop() {
            for (child, _, comm) in stats.iter().filter(|(_, pp, _)| *pp == p) {
                if comm == name {
                    return true;
                }
                parents.push(*child);
            }
        }
        false
    }

    #[test]
    fn remote_codes_are_explained() {
        assert_eq!(describe_code(137), "was killed by signal 9 (SIGKILL)");
        assert_eq!(describe_code(3), "exited with code 3");
        assert!(describe_code(255).contains("ssh"));
    }
}
