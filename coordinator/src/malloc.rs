//! How the coordinator's own allocator is set, and how the user's setting is
//! kept for every process it starts.
//!
//! A coordinator lives as long as its job and allocates a little for every
//! heartbeat, scrape and generation. With glibc's defaults (each thread
//! caching up to 7 freed blocks of each small size, which no other size can
//! use; the mmap threshold rising to the largest block freed) that steady
//! trickle left its resident memory creeping for the whole job, though what
//! it held stayed the same (docs/BENCHMARKS.md: "No thread cache for the
//! coordinator's allocator").
//! glibc reads the cache's size only when a program starts, from
//! `GLIBC_TUNABLES`, so `elasticrun` starts itself again with [`OURS`]
//! there and the user's value kept in [`SAVED_VAR`]; the second start puts
//! the user's value back before anything else runs, so workers, discovery
//! scripts, ssh and srun get the environment the user gave. [`step`] is the
//! decision; the binary's `sys` module does it.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// glibc's variable of settings, read by the loader at a program's start.
pub const TUNABLES_VAR: &str = "GLIBC_TUNABLES";

/// Where the user's `GLIBC_TUNABLES` waits while `elasticrun` starts again:
/// `=` and the value, or [`UNSET`].
pub const SAVED_VAR: &str = "ELASTICRUN_USER_GLIBC_TUNABLES";

/// [`SAVED_VAR`] when the user had no `GLIBC_TUNABLES`.
pub const UNSET: &str = "unset";

/// The coordinator's allocator: no per-thread cache of freed blocks, and
/// blocks of 64 KiB and more mapped on their own, however often they come
/// and go (glibc's threshold otherwise rises to the largest block freed,
/// and a scrape's 150 KiB page then comes from the heap and is freed again
/// under whatever the heap holds next). One arena as well was flatter
/// still while the coordinator ran on two runtime threads (which then
/// waited on its lock, a tenth more CPU at 10,000 workers); on its one
/// thread now (`crate::runtime`) it changes nothing.
pub const OURS: &str = "glibc.malloc.tcache_count=0:glibc.malloc.mmap_threshold=65536";

/// The mmap threshold [`OURS`] sets: a block this large or larger is
/// mapped on its own and given back whole when freed, never placed in the
/// heap. Buffers rendered afresh for each scrape are made at least this
/// large so that their size, which grows with the job, moves nothing in the
/// heap.
pub const MMAP_THRESHOLD: usize = 65536;

/// What `elasticrun` does with its environment when it starts.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Start again with `tunables` as `GLIBC_TUNABLES` and `saved` (the
    /// user's value after `=`, or [`UNSET`]) as [`SAVED_VAR`].
    Restart { tunables: OsString, saved: OsString },
    /// Started again: `GLIBC_TUNABLES` becomes the user's value again (none:
    /// unset) and [`SAVED_VAR`] goes.
    Restore(Option<OsString>),
    /// Nothing: the user sets glibc's allocator themselves.
    Keep,
}

/// The step for a process whose `GLIBC_TUNABLES` is `tunables` and whose
/// [`SAVED_VAR`] is `saved`.
pub fn step(tunables: Option<&OsStr>, saved: Option<&OsStr>) -> Step {
    if let Some(saved) = saved {
        let user = saved.as_bytes().strip_prefix(b"=");
        return Step::Restore(user.map(|v| OsStr::from_bytes(v).to_owned()));
    }
    let user = tunables.unwrap_or_default();
    if user.as_bytes().windows(13).any(|w| w == b"glibc.malloc.") {
        return Step::Keep;
    }
    let mut ours = OsString::from(OURS);
    if !user.is_empty() {
        ours.push(":");
        ours.push(user);
    }
    let saved = match tunables {
        Some(v) => OsStr::from_bytes(&[b"=", v.as_bytes()].concat()).to_owned(),
        None => UNSET.into(),
    };
    Step::Restart {
        tunables: ours,
        saved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn a_first_start_restarts_with_ours_and_keeps_the_users_value() {
        assert_eq!(
            step(None, None),
            Step::Restart {
                tunables: OURS.into(),
                saved: UNSET.into()
            }
        );
        // An empty value (glibc's defaults, for the workers) is kept too.
        assert_eq!(
            step(os(""), None),
            Step::Restart {
                tunables: OURS.into(),
                saved: "=".into()
            }
        );
        assert_eq!(
            step(os("glibc.rtld.optional_static_tls=2048"), None),
            Step::Restart {
                tunables: format!("{OURS}:glibc.rtld.optional_static_tls=2048").into(),
                saved: "=glibc.rtld.optional_static_tls=2048".into()
            }
        );
    }

    #[test]
    fn the_second_start_puts_the_users_value_back() {
        assert_eq!(step(os(OURS), os(UNSET)), Step::Restore(None));
        let threshold = format!("glibc.malloc.mmap_threshold={MMAP_THRESHOLD}");
        assert!(OURS.split(':').any(|t| t == threshold), "{OURS}");
        assert_eq!(step(os(OURS), os("=")), Step::Restore(Some("".into())));
        assert_eq!(
            step(os("x"), os("=glibc.rtld.optional_static_tls=2048")),
            Step::Restore(Some("glibc.rtld.optional_static_tls=2048".into()))
        );
        // Not UTF-8: given back byte for byte.
        let odd = OsStr::from_bytes(b"=glibc.cpu.x=\xff");
        assert_eq!(
            step(os(OURS), Some(odd)),
            Step::Restore(Some(OsStr::from_bytes(b"glibc.cpu.x=\xff").into()))
        );
    }

    #[test]
    fn a_user_who_sets_the_allocator_keeps_their_setting() {
        assert_eq!(step(os("glibc.malloc.tcache_count=7"), None), Step::Keep);
        assert_eq!(
            step(os("glibc.rtld.nns=2:glibc.malloc.arena_max=4"), None),
            Step::Keep
        );
    }
}
