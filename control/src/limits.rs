//! Process limits every elasticrun process sets at start. A coordinator holds
//! a connection per worker (and more while they arrive), a worker one per
//! peer on the data plane: the usual soft limit of 1024 open files is too few
//! for large jobs, while the hard limit (which any process may raise its soft
//! limit to, as Go's runtime does at start) is not.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The open-files limit before and after [`raise_open_files`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    pub was: u64,
    pub now: u64,
    pub hard: u64,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit; children
/// started afterwards inherit it.
///
/// # Errors
///
/// When the limit cannot be read or set (the caller goes on with it as is).
pub fn raise_open_files() -> nix::Result<OpenFiles> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= hard {
        return Ok(OpenFiles {
            was: soft,
            now: soft,
            hard,
        });
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok(OpenFiles {
        was: soft,
        now: hard,
        hard,
    })
}
