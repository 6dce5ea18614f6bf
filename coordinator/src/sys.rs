//! The unsafe things the `elasticrun` binary does: its environment set
//! while it is the only thread (the allocator's settings, `malloc.rs`).

#[cfg(all(target_os = "linux", target_env = "gnu"))]
use coordinator::malloc::{SAVED_VAR, Step, TUNABLES_VAR, step};

/// Starts `elasticrun` again with its allocator set ([`coordinator::malloc`]),
/// or, when this is that second start, gives `GLIBC_TUNABLES` back the
/// user's value. Called first thing in `main`, before any thread starts.
/// A start again that fails leaves this one running as it was.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn settle_allocator() {
    use std::os::unix::process::CommandExt;
    let tunables = std::env::var_os(TUNABLES_VAR);
    let saved = std::env::var_os(SAVED_VAR);
    match step(tunables.as_deref(), saved.as_deref()) {
        Step::Restart { tunables, saved } => {
            let mut args = std::env::args_os();
            let mut again = std::process::Command::new("/proc/self/exe");
            if let Some(name) = args.next() {
                again.arg0(name);
            }
            // Returns only if it could not start again, having set SIGPIPE
            // back to its default for the program it meant to run: it is
            // ignored again, as Rust's runtime had it (a write to a closed
            // pipe is then an error, not the end of the coordinator).
            let _ = again
                .args(args)
                .env(TUNABLES_VAR, tunables)
                .env(SAVED_VAR, saved)
                .exec();
            use nix::sys::signal::{SigHandler, Signal, signal};
            // SAFETY: no handler is installed (SIG_IGN), and this process
            // has no other thread yet.
            let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
        }
        Step::Restore(user) => {
            match user {
                // SAFETY: called first thing in `main`, before this process
                // has started a thread: nothing reads the environment
                // meanwhile (the same for the two below).
                Some(v) => unsafe { std::env::set_var(TUNABLES_VAR, v) },
                // SAFETY: as above.
                None => unsafe { std::env::remove_var(TUNABLES_VAR) },
            }
            // SAFETY: as above.
            unsafe { std::env::remove_var(SAVED_VAR) };
            keep_name();
        }
        Step::Keep => {}
    }
}

/// Gives the process the name it had before it started again (the kernel
/// names it after the file it runs, here `exe`): what `ps -C`, `pgrep -x`
/// and `top` show, the last part of `argv[0]` (what the kernel took it
/// from) up to the kernel's 15 bytes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_name() {
    use std::os::unix::ffi::OsStrExt;
    let Some(arg0) = std::env::args_os().next() else {
        return;
    };
    let path = std::path::Path::new(&arg0);
    let base = path.file_name().map_or(&[][..], |n| n.as_bytes());
    let name = &base[..base.len().min(15)];
    if let Ok(name) = std::ffi::CString::new(name) {
        let _ = nix::sys::prctl::set_name(&name);
    }
}

/// Elsewhere glibc's settings do not apply: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn settle_allocator() {}
