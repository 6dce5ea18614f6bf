//! What some tests need beyond the Rust toolchain (network namespaces, an
//! OpenSSH server), and what they do without it: skip with a note on a
//! developer's machine, fail where the environment promises it.
//!
//! Each [`Need`] has a variable (`ELASTICRUN_REQUIRE_NETNS`,
//! `ELASTICRUN_REQUIRE_SSHD`, `ELASTICRUN_REQUIRE_ETCD`,
//! `ELASTICRUN_REQUIRE_KUBERNETES_VALIDATE`, `ELASTICRUN_REQUIRE_SLURM`,
//! `ELASTICRUN_REQUIRE_PROMETHEUS`, `ELASTICRUN_REQUIRE_CHROMIUM`); `scripts/test.sh`
//! (which `.ci/run` runs) sets them all, so that in CI a test that
//! cannot get what it needs fails, naming what is missing, instead of passing
//! after "skipping".

/// Something a test needs that a machine may lack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Root and `ip netns` (iproute2): hosts as network namespaces.
    NetworkNamespaces,
    /// `/usr/sbin/sshd`, `ssh` and `ssh-keygen` (openssh-server,
    /// openssh-client): launching over ssh.
    Sshd,
    /// `etcd` (etcd-server): jobs whose coordinator is `elasticrun serve`.
    Etcd,
    /// `kubernetes-validate` (PyPI): the Kubernetes manifests checked
    /// against the API schema without a cluster.
    KubernetesValidate,
    /// `munged`, `slurmctld`, `slurmd` and Slurm's commands (munge,
    /// slurm-wlm): jobs inside a real Slurm allocation.
    Slurm,
    /// `prometheus` and `promtool` (prometheus): a real Prometheus scraping
    /// a job's metrics.
    Prometheus,
    /// `chromium` (Debian's): a real headless browser showing the status
    /// page.
    Chromium,
}

impl Need {
    /// The variable that, set to anything but empty or `0`, turns a skip for
    /// lack of this into a failure.
    pub fn variable(self) -> &'static str {
        match self {
            Need::NetworkNamespaces => "ELASTICRUN_REQUIRE_NETNS",
            Need::Sshd => "ELASTICRUN_REQUIRE_SSHD",
            Need::Etcd => "ELASTICRUN_REQUIRE_ETCD",
            Need::KubernetesValidate => "ELASTICRUN_REQUIRE_KUBERNETES_VALIDATE",
            Need::Slurm => "ELASTICRUN_REQUIRE_SLURM",
            Need::Prometheus => "ELASTICRUN_REQUIRE_PROMETHEUS",
            Need::Chromium => "ELASTICRUN_REQUIRE_CHROMIUM",
        }
    }

    /// Whether the environment promises this (its variable is set).
    pub fn required(self) -> bool {
        std::env::var_os(self.variable()).is_some_and(|v| !v.is_empty() && v != "0")
    }

    /// What a test that cannot have this does, `why` saying what is missing:
    /// fails when [`Need::required`], else prints `skipped: WHY` on stderr so
    /// that the test can return.
    ///
    /// # Panics
    ///
    /// When the environment requires it.
    #[track_caller]
    pub fn unavailable(self, why: &str) {
        let var = self.variable();
        assert!(
            !self.required(),
            "{why}; {var} is set, so this test must run here instead of skipping"
        );
        eprintln!("skipped: {why} ({var}=1 makes this a failure)");
    }

    /// `Some(v)` when `r` is `Ok(v)`; otherwise [`Need::unavailable`] with
    /// the error, then `None`.
    #[track_caller]
    pub fn or_skip<T>(self, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(why) => {
                self.unavailable(&why);
                None
            }
        }
    }
}

/// The first `program` on `PATH`, if any.
pub fn on_path(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
