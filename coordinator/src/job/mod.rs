//! One job, start to end, static or elastic alike: the host set comes from the
//! command line (discovered once) or from a discovery script (re-run every
//! interval), the membership core of the `elastic` crate decides who runs where
//! in each generation, and the driver here starts and stops workers, forwards
//! their output and tells them about generations over their control
//! connections. A static job is one whose size is fixed (`min = max = np`) and
//! whose first failure ends it ([`elastic::OnFailure::EndJob`]). The driver
//! runs on [`Seams`] (launcher, arrivals, host feed, store, clock, signals):
//! [`run`] makes a job's, [`run_on`] takes an in-process cluster's.
//!
//! ```text
//!  discovery (script, or the host list once) ──host sets──┐
//!  control listener ──arrivals──────────────────────────────┤      ┌── Spawn / Stop (processes)
//!  link tasks ──rejoin, beats, lost links───────────────────├─> Membership core ──┼── Reset / HostsUpdated / Leave
//!  exits, stalls, clock ────────────────────────────────────┘      └── Assign (per-rank assignments)
//! ```

pub mod assign;
mod batch;
mod commands;
pub mod directory;
pub mod discovery;
mod driver;
mod journal;
pub mod links;
mod recovery;
mod rescale;
mod say;
mod setup;
mod stragglers;
mod waiting;
mod workers;

pub use driver::Watch;
pub use say::Say;
pub use setup::{Seams, run, run_on};
pub(crate) use setup::{drive_elastic, policy as policy_of, serve_metrics, watch};

use std::time::{Duration, SystemTime};

use control::{Knobs, Secret};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::config::{HostSpec, JobConfig, StallCheck};
use crate::launch::address::AddressError;
use elastic::hosts::{HostSlots, parse_hostfile};

/// How long stopped workers get between SIGTERM and SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Metrics(#[from] crate::metrics::http::ListenError),
    #[error(
        "-np is needed when no hosts are given: give -np N, or hosts with -H or \
         --hostfile (their slots then make the number)"
    )]
    NoNp,
    #[error(
        "an elastic job without a host discovery script is one whose workers register by \
         themselves: run it with `elasticrun serve`"
    )]
    NoDiscoveryScript,
    #[error("cannot read hostfile {}: {why}", path.display())]
    HostfileUnreadable {
        path: std::path::PathBuf,
        why: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Hostfile {
        path: std::path::PathBuf,
        why: elastic::HostsError,
    },
    #[error(transparent)]
    Layout(#[from] crate::layout::LayoutError),
    #[error("cannot make the job's secret: {why}")]
    Secret { why: String },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("the job store did not answer within {after:?}")]
    StoreTimeout { after: Duration },
    #[error(
        "host discovery gave fewer than --min-np {min_np} slots for {after:?} (--elastic-timeout)"
    )]
    TooFewHosts { min_np: usize, after: Duration },
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Server(#[from] crate::server::ServerError),
    #[error(transparent)]
    Output(#[from] crate::launch::output::OutputError),
}

impl JobError {
    /// Whether it is the user's command line or files that are wrong (no
    /// `-np`, a bad hostfile, more processes than slots): elasticrun then
    /// exits with 2, as for any other usage error.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            JobError::NoNp
                | JobError::NoDiscoveryScript
                | JobError::HostfileUnreadable { .. }
                | JobError::Hostfile { .. }
                | JobError::Layout(_)
        )
    }
}

/// How the job ended, as elasticrun's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Success,
    Failed,
    Interrupted,
    Terminated,
    /// This coordinator no longer leads the job (`elasticrun serve`): it
    /// stopped acting and left the workers to the next leader.
    SteppedDown,
    /// Discovery changed the world of a job run by restarts: every worker
    /// was stopped, to start again at the new size.
    Rescaled,
}

impl Ending {
    pub fn code(self) -> u8 {
        match self {
            Ending::Success => 0,
            Ending::Failed | Ending::SteppedDown | Ending::Rescaled => 1,
            Ending::Interrupted => 130,
            Ending::Terminated => 143,
        }
    }
}

/// The hosts of the job and the number of processes.
pub(crate) async fn hosts_and_np(cfg: &JobConfig) -> Result<(Vec<HostSlots>, usize), JobError> {
    let hosts = match &cfg.hosts {
        HostSpec::Localhost => {
            let np = cfg.np.ok_or(JobError::NoNp)?;
            vec![HostSlots {
                host: "localhost".into(),
                slots: np,
            }]
        }
        HostSpec::List(h) => h.clone(),
        HostSpec::File(p) => {
            let text = crate::files::read_text(p, crate::files::MAX_TEXT_FILE).map_err(|why| {
                JobError::HostfileUnreadable {
                    path: p.clone(),
                    why,
                }
            })?;
            parse_hostfile(&text).map_err(|why| JobError::Hostfile {
                path: p.clone(),
                why,
            })?
        }
    };
    let np = cfg
        .np
        .unwrap_or_else(|| hosts.iter().map(|h| h.slots).sum());
    Ok((hosts, np))
}

pub(crate) fn knobs(cfg: &JobConfig) -> Knobs {
    let t = &cfg.tuning;
    Knobs {
        tuning: control::Tuning {
            fusion_threshold_bytes: t.fusion_threshold_bytes.value,
            cycle_time_us: t.cycle_time.value.as_micros() as u64,
            cache_enabled: t.cache_capacity.value > 0,
            hierarchical_allreduce: t.hierarchical_allreduce.value,
            hierarchical_allgather: t.hierarchical_allgather.value,
            segment_bytes: t.segment_bytes.value,
        },
        cache_capacity: u32::try_from(t.cache_capacity.value).unwrap_or(u32::MAX),
        timeline: cfg.timeline.as_ref().map(|t| t.file.display().to_string()),
        timeline_mark_cycles: cfg.timeline.as_ref().is_some_and(|t| t.mark_cycles),
        stall_warning_ms: match cfg.stall_check {
            StallCheck::Off => None,
            StallCheck::On { warning, .. } => Some(millis(warning)),
        },
        stall_shutdown_ms: match cfg.stall_check {
            StallCheck::Off | StallCheck::On { shutdown: None, .. } => None,
            StallCheck::On {
                shutdown: Some(d), ..
            } => Some(millis(d)),
        },
        autotune: cfg.autotune.as_ref().map(|a| control::Autotune {
            log_file: a.log_file.as_ref().map(|p| p.display().to_string()),
            warmup_samples: a.warmup_samples,
            steps_per_sample: a.steps_per_sample,
            max_samples: a.max_samples,
            gaussian_process_noise: a.gaussian_process_noise,
            fixed: t.user_set(),
        }),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The job's secret, which every control connection proves.
pub(crate) fn job_secret() -> Result<Secret, JobError> {
    Secret::generate().map_err(|e| JobError::Secret { why: e.to_string() })
}

/// The job's certificate authority: derived from its secret, the same in
/// every coordinator of the job (see [`control::pki`]).
pub fn job_ca(secret: &Secret) -> Result<std::sync::Arc<control::pki::JobCa>, JobError> {
    control::pki::JobCa::from_secret(secret)
        .map(std::sync::Arc::new)
        .map_err(|e| JobError::Secret { why: e.to_string() })
}

/// TLS for the control plane of a job on `transport`: with an encrypted data
/// plane (QUIC or TLS), the control connections are encrypted too.
pub fn control_tls(
    transport: control::env::TransportKind,
    ca: &control::pki::JobCa,
) -> Result<Option<control::tls::ControlAcceptor>, JobError> {
    if !transport.encrypted() {
        return Ok(None);
    }
    control::tls::ControlAcceptor::new(ca)
        .map(Some)
        .map_err(|e| JobError::Secret { why: e.to_string() })
}

/// The token every data-plane connection of the job's generations carries.
pub(crate) fn data_token() -> Result<u64, JobError> {
    let token_bytes = control::nonce().map_err(|e| JobError::Secret { why: e.to_string() })?;
    Ok(u64::from_le_bytes(
        token_bytes[..8].try_into().unwrap_or_default(),
    ))
}

/// SIGINT and SIGTERM to elasticrun, which end the job; and SIGUSR1 and
/// SIGUSR2, which it passes on to the workers (Slurm's warning signal,
/// `sbatch --signal=B:USR1@60`, that the time is nearly up).
pub struct Stops {
    /// `None`: nothing stops the job from outside (an in-process cluster).
    signals: Option<(Signal, Signal)>,
    /// SIGUSR1 and SIGUSR2, passed on.
    passed: Option<(Signal, Signal)>,
    /// Resolves, with why, once this coordinator may no longer lead the job
    /// (`elasticrun serve`: its lease may have lapsed).
    lapse: Option<futures::future::BoxFuture<'static, String>>,
    /// Resolves, with how, once discovery changed the world of a job run
    /// by restarts.
    rescale: Option<futures::future::BoxFuture<'static, String>>,
}

impl std::fmt::Debug for Stops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stops")
            .field("signals", &self.signals.is_some())
            .field("lapse", &self.lapse.is_some())
            .field("rescale", &self.rescale.is_some())
            .finish()
    }
}

impl Stops {
    /// `None` (and says so) when the handlers cannot be installed.
    pub fn install(say: &Say) -> Option<Stops> {
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(int), Ok(term)) => Some(Stops {
                signals: Some((int, term)),
                passed: match (
                    signal(SignalKind::user_defined1()),
                    signal(SignalKind::user_defined2()),
                ) {
                    (Ok(u1), Ok(u2)) => Some((u1, u2)),
                    _ => None,
                },
                lapse: None,
                rescale: None,
            }),
            _ => {
                say.line("cannot install signal handlers");
                None
            }
        }
    }

    /// No signal ends the job: the process keeps its own handlers (a test).
    pub fn never() -> Stops {
        Stops {
            signals: None,
            passed: None,
            lapse: None,
            rescale: None,
        }
    }

    /// Also ends the job, as [`Ending::SteppedDown`], when `lapse` resolves.
    pub fn or_lapse(mut self, lapse: futures::future::BoxFuture<'static, String>) -> Stops {
        self.lapse = Some(lapse);
        self
    }

    /// Also ends the job, as [`Ending::Rescaled`] (every worker stopped),
    /// when `rescale` resolves.
    pub(crate) fn or_rescale(
        mut self,
        rescale: futures::future::BoxFuture<'static, String>,
    ) -> Stops {
        self.rescale = Some(rescale);
        self
    }

    /// The next signal to pass on, or the next of the two that end the
    /// job, said, as the job's ending.
    pub(crate) async fn next(&mut self, say: &Say) -> Outside {
        let passed = async {
            use nix::sys::signal::Signal as Sig;
            match &mut self.passed {
                Some((u1, u2)) => tokio::select! {
                    _ = u1.recv() => Sig::SIGUSR1,
                    _ = u2.recv() => Sig::SIGUSR2,
                },
                None => std::future::pending().await,
            }
        };
        let Stops {
            signals,
            lapse,
            rescale,
            ..
        } = self;
        // A coordinator that may step down (serve) leaves the workers be.
        let after = if lapse.is_some() {
            "resigning; the workers keep training"
        } else {
            "stopping every worker"
        };
        let lapse = async {
            match lapse {
                Some(l) => l.await,
                None => std::future::pending().await,
            }
        };
        let signal = async {
            match signals {
                Some((int, term)) => tokio::select! {
                    _ = int.recv() => Ending::Interrupted,
                    _ = term.recv() => Ending::Terminated,
                },
                None => std::future::pending().await,
            }
        };
        let rescale = async {
            match rescale {
                Some(r) => r.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            sig = passed => Outside::PassOn(sig),
            how = rescale => {
                say.line(format_args!(
                    "hosts changed: {how}; stopping every worker to start again at the new size"
                ));
                Outside::End(Ending::Rescaled)
            }
            why = lapse => {
                say.line(format_args!(
                    "no longer leading the job ({why}); stepping down, the workers keep training"
                ));
                Outside::End(Ending::SteppedDown)
            }
            ending = signal => {
                if ending == Ending::Interrupted {
                    say.line(format_args!("interrupted; {after}"));
                } else {
                    say.line(format_args!("terminated; {after}"));
                }
                Outside::End(ending)
            }
        }
    }
}

/// What came to the job from outside.
#[derive(Debug)]
pub(crate) enum Outside {
    /// It ends so.
    End(Ending),
    /// A signal for the workers.
    PassOn(nix::sys::signal::Signal),
}

/// The wall clock a job's epoch and age are read from (the job's durable
/// state counts time from its epoch, a wall-clock time).
#[derive(Clone, Copy, Debug)]
pub enum WallClock {
    /// The system's.
    System,
    /// Tokio's clock, which a test pauses and advances: `at` when tokio's
    /// clock read `origin`.
    Tokio {
        at: SystemTime,
        origin: tokio::time::Instant,
    },
}

impl WallClock {
    /// A clock that follows tokio's from `at` on.
    pub fn tokio_from(at: SystemTime) -> Self {
        WallClock::Tokio {
            at,
            origin: tokio::time::Instant::now(),
        }
    }

    pub fn now(&self) -> SystemTime {
        match self {
            WallClock::System => SystemTime::now(),
            WallClock::Tokio { at, origin } => *at + origin.elapsed(),
        }
    }
}
