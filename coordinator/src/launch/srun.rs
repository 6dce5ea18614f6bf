//! Workers inside a Slurm allocation: each one a job step started with
//! `srun` on its host, never ssh (compute nodes often refuse it). The step
//! runs the same script as an ssh worker ([`super::ssh`]): the job secret and
//! the environment come on standard input, which then stays open, and when
//! it closes (elasticrun stops the worker, exits or dies) the worker's
//! process group is stopped. Slurm sees every worker as a step of the job:
//! `scancel` and the allocation's end stop them, and its accounting counts
//! them.
//!
//! srun exits 0 when the node under a step fails (it has no status from
//! the step's task), as when the task succeeds: a [`StepWatch`] reads the
//! line srun says it with on its stderr, so that such a worker counts as
//! failed (its node lost), not finished.
//!
//! The argument vector is built here and run by [`super::process`].

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::output::Tap;
use super::ssh::remote_script;

/// What srun writes when the node under a step fails (Slurm's
/// `srun: error: Node failure on NODE`).
const NODE_FAILURE: &[u8] = b"srun: error: Node failure on ";

/// A step's srun's stderr, watched for the news of its node's failure.
#[derive(Debug, Default)]
pub struct StepWatch {
    lost: AtomicBool,
    ended: AtomicBool,
}

impl StepWatch {
    /// Whether srun said the step's node failed.
    pub fn node_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Whether srun's stderr has been read to its end (after srun exits:
    /// whatever it said is known).
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }
}

impl Tap for StepWatch {
    fn line(&self, head: &[u8]) {
        if head.starts_with(NODE_FAILURE) {
            self.lost.store(true, Ordering::Release);
        }
    }

    fn ended(&self) {
        self.ended.store(true, Ordering::Release);
    }
}

/// `srun ... --nodelist HOST sh -c '...'`: one task on `host`, sharing the
/// allocation's resources with the other steps (`--overlap`), its CPUs
/// those of a task of the allocation (`cpus_per_task`, Slurm's
/// `SLURM_CPUS_PER_TASK`, when given), unbound.
pub fn command(
    host: &str,
    cpus_per_task: Option<u32>,
    cwd: &Path,
    command: &[OsString],
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = [
        "srun",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "--kill-on-bad-exit=0",
        "--cpu-bind=none",
        "--mpi=none",
        "--quiet",
        "--unbuffered",
        "--job-name=elasticrun-worker",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    argv.push(format!("--nodelist={host}").into());
    if let Some(n) = cpus_per_task.filter(|&n| n > 0) {
        argv.push(format!("--cpus-per-task={n}").into());
    }
    argv.push("sh".into());
    argv.push("-c".into());
    // As one argument: srun runs it without a shell.
    let script = remote_script(cwd, command);
    argv.push(OsString::from_vec(script));
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_hears_of_a_node_failure_only() {
        let w = StepWatch::default();
        w.line(b"srun: error: n2: task 0: Exited with exit code 3");
        w.line(b"[worker] srun: error: Node failure on n2");
        assert!(!w.node_lost() && !w.ended());
        w.line(b"srun: error: Node failure on n2");
        Tap::ended(&w);
        assert!(w.node_lost() && w.ended());
    }

    #[test]
    fn one_task_on_the_host_with_the_worker_script() {
        let argv = command("n01", Some(4), Path::new("/w"), &["./train".into()]);
        let text: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(text[0], "srun");
        for want in [
            "--overlap",
            "--nodes=1",
            "--ntasks=1",
            "--nodelist=n01",
            "--cpus-per-task=4",
        ] {
            assert!(text.iter().any(|a| a == want), "{want}: {text:?}");
        }
        let n = text.len();
        assert_eq!((&*text[n - 3], &*text[n - 2]), ("sh", "-c"));
        assert!(
            text[n - 1].contains("cd /w") && text[n - 1].contains("./train"),
            "{}",
            text[n - 1]
        );
        let bare = command("n01", None, Path::new("/w"), &["t".into()]);
        assert!(
            !bare
                .iter()
                .any(|a| a.to_string_lossy().starts_with("--cpus"))
        );
    }

    /// Slurm's warning signal reaches every process of a step at once: the
    /// script (which waits on) and the program. A program that ends on it
    /// passes its own exit code on. (The script had said 138 for a program
    /// that exited 0 when the signal cut its `wait` short after the shell
    /// had reaped the program: 3 times in 150 in a shell loop with the
    /// cores busy; these rounds reach that window seldom, and check every
    /// other interleaving.)
    #[test]
    fn a_signal_that_ends_the_program_leaves_the_programs_code() {
        use std::io::BufRead;
        let cmd: Vec<OsString> = [
            "sh",
            "-c",
            "trap 'exit 5' USR1; echo $$; while :; do sleep 5 & wait $!; done",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        // srun runs the step's script without a shell of its own.
        let argv = command("h", None, Path::new("/"), &cmd);
        for round in 0..100 {
            let (mut child, stdin) =
                super::super::ssh::spawn_script(argv.last().unwrap(), "secret", &[]);
            // The program's pid, once its trap is set (its group: setsid).
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            let program: i32 = line.trim().parse().expect("the program's pid");
            let script = i32::try_from(child.id()).unwrap();
            // Both sides settled in their waits, as when the warning comes.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !std::fs::read_to_string(format!("/proc/{script}/wchan"))
                .is_ok_and(|w| w.starts_with("sigsuspend"))
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the script did not wait on its program within 10 s"
                );
                std::thread::yield_now();
            }
            use nix::sys::signal::{Signal::SIGUSR1, kill};
            use nix::unistd::Pid;
            kill(Pid::from_raw(-program), SIGUSR1).unwrap();
            kill(Pid::from_raw(script), SIGUSR1).unwrap();
            let status = child.wait().unwrap();
            drop(stdin);
            assert_eq!(status.code(), Some(5), "round {round}: {status:?}");
        }
    }
}
