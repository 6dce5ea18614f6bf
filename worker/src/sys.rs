//! The worker runtime's `unsafe` code, all of it (see the `unsafe` policy in
//! docs/architecture.md).

/// Removes `name` from this process's environment, so that the programs the
/// training program starts do not inherit it.
pub(crate) fn remove_env(name: &str) {
    // SAFETY: `remove_var` is unsafe because another thread may read the
    // environment at the same time. Rust's own readers take std's environment
    // lock, so only C code reading `environ` concurrently is exposed; this runs
    // in `init()`, before the runtime's threads exist, and glibc never frees
    // an environment string, so such a reader sees the variable or not, never
    // freed memory.
    unsafe { std::env::remove_var(name) };
}
