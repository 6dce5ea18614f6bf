//! Joining through etcd in a program built without etcd mode (the worker
//! crate's cargo feature `etcd` off, as it is by default): such a program
//! links no etcd client, and refuses `ELASTICRUN_ETCD` saying how to build
//! it instead of ignoring it.

use std::sync::Arc;

use control::tls::ControlConnector;

use crate::InitError;
use crate::reconnect::Tcp;

/// The variable that asks for etcd mode.
pub(crate) const ETCD: &str = "ELASTICRUN_ETCD";

/// Never made: without etcd mode no worker joins through etcd.
#[derive(Debug)]
pub(crate) enum PodEnv {}

/// Never made: without etcd mode no worker is registered in etcd.
#[derive(Debug)]
pub(crate) enum Pod {}

/// `None` unless `ELASTICRUN_ETCD` is set, and then an error saying how to
/// build the program with etcd mode.
pub(crate) fn read(get: &impl Fn(&str) -> Option<String>) -> Result<Option<PodEnv>, InitError> {
    match get(ETCD).filter(|v| !v.trim().is_empty()) {
        None => Ok(None),
        Some(_) => Err(InitError::Environment {
            var: ETCD,
            why: "asks for etcd mode, which this program was built without: build it with the \
                  worker crate's cargo feature `etcd` (docs/etcd.md)"
                .into(),
        }),
    }
}

/// Enters the job through etcd: unreachable, as no [`PodEnv`] exists.
pub(crate) fn enter_job(
    _rt: &tokio::runtime::Runtime,
    pe: PodEnv,
) -> Result<(crate::env::Launch, Arc<Pod>), InitError> {
    match pe {}
}

impl Pod {
    /// The coordinator as the control task redials it: unreachable, as no
    /// [`Pod`] exists (any [`Connect`](crate::reconnect::Connect) would do as
    /// the type).
    pub(crate) fn connect(&self, _tls: Option<ControlConnector>) -> Tcp {
        match *self {}
    }

    /// Marks the pod finished in etcd: unreachable, as no [`Pod`] exists.
    pub(crate) async fn finished(&self) {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_mode_is_refused_with_how_to_build_it() {
        let set = |k: &str| (k == ETCD).then(|| "http://127.0.0.1:2379".to_owned());
        let err = read(&set).expect_err("ELASTICRUN_ETCD without the feature");
        let text = err.to_string();
        assert!(
            text.contains("ELASTICRUN_ETCD") && text.contains("`etcd`"),
            "{text}"
        );
        let blank = |k: &str| (k == ETCD).then(|| " ".to_owned());
        assert!(matches!(read(&blank), Ok(None)));
        assert!(matches!(read(&|_: &str| None), Ok(None)));
    }
}
