//! `elasticrun serve`'s own options (`--etcd`, `--job`, `--lease-ttl`,
//! `--secret-file`, `--port`, `--advertise-address`), each also settable
//! through its `ELASTICRUN_*` variable and the config file's `serve` section
//! (command line > environment > file); every other option is the job's, read
//! as for any elastic job.

use std::net::IpAddr;
use std::path::PathBuf;

use etcdjob::{DEFAULT_LEASE_TTL, Endpoints, JobName};

use super::file::Serve;
use crate::serve::ServeConfig;

/// `(flag, variable, what it is)` of every serve option.
pub const OPTIONS: [(&str, &str, &str); 6] = [
    (
        "etcd",
        "ELASTICRUN_ETCD",
        "etcd endpoints, http://host:port,... (required)",
    ),
    (
        "job",
        "ELASTICRUN_JOB",
        "the job's name: 1-63 of a-z 0-9 - _ . (required)",
    ),
    (
        "secret-file",
        "ELASTICRUN_SECRET_FILE",
        "file holding the job secret, 64 hex digits (required; a mounted Kubernetes Secret)",
    ),
    (
        "lease-ttl",
        "ELASTICRUN_LEASE_TTL",
        "seconds a dead coordinator keeps the lead before a standby takes over [default: 5, at least 2]",
    ),
    (
        "port",
        "ELASTICRUN_PORT",
        "port the control plane listens on [default: torchrun's PET_MASTER_PORT, else any free port]",
    ),
    (
        "advertise-address",
        "ELASTICRUN_ADVERTISE_ADDRESS",
        "address published for workers [default: POD_IP, else the one this host reaches etcd from]",
    ),
];

/// Why the serve options were refused.
#[derive(Debug, thiserror::Error)]
pub enum ServeArgsError {
    #[error("--{flag} needs a value")]
    NoValue { flag: &'static str },
    #[error("--{flag} (or {var}, or the config file's serve.{}) is required by `elasticrun serve`", flag.replace('-', "_"))]
    Missing {
        flag: &'static str,
        var: &'static str,
    },
    #[error("--{flag}: {why}")]
    Invalid { flag: &'static str, why: String },
}

/// Serve options found on the command line: `(flag, value)`.
pub type Given = Vec<(&'static str, String)>;

/// Splits `args` (after `serve`) into the serve options' values and the
/// rest, which are the job's options.
pub fn split(args: &[String]) -> Result<(Given, Vec<String>), ServeArgsError> {
    let mut found = Vec::new();
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(name) = a.strip_prefix("--") else {
            rest.push(a.clone());
            continue;
        };
        let (name, inline) = match name.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (name, None),
        };
        match OPTIONS.iter().find(|(f, _, _)| *f == name) {
            Some(&(flag, _, _)) => {
                let value = match inline {
                    Some(v) => v,
                    None => it.next().cloned().ok_or(ServeArgsError::NoValue { flag })?,
                };
                found.push((flag, value));
            }
            None => rest.push(a.clone()),
        }
    }
    Ok((found, rest))
}

/// The serve configuration from the options `split` found, the environment
/// (`env`) where an option is not given, and the config file's `serve`
/// section where neither is.
pub fn resolve(
    given: &[(&'static str, String)],
    env: &dyn Fn(&str) -> Option<String>,
    file: &Serve,
) -> Result<ServeConfig, ServeArgsError> {
    let value = |i: usize| -> Option<String> {
        let (flag, var, _) = OPTIONS[i];
        given
            .iter()
            .rev()
            .find(|(f, _)| *f == flag)
            .map(|(_, v)| v.clone())
            .or_else(|| env(var).filter(|v| !v.trim().is_empty()))
            .or_else(|| file.get(flag))
    };
    let need = |i: usize| {
        let (flag, var, _) = OPTIONS[i];
        value(i).ok_or(ServeArgsError::Missing { flag, var })
    };
    let invalid = |i: usize, why: String| ServeArgsError::Invalid {
        flag: OPTIONS[i].0,
        why,
    };
    let endpoints = Endpoints::parse(&need(0)?).map_err(|e| invalid(0, e.to_string()))?;
    let job = JobName::new(need(1)?.trim()).map_err(|e| invalid(1, e.to_string()))?;
    let secret_file = PathBuf::from(need(2)?);
    let lease_ttl = match value(3) {
        None => DEFAULT_LEASE_TTL,
        Some(v) => etcdjob::parse_lease_ttl(&v).map_err(|why| invalid(3, why))?,
    };
    // torchrun's PET_MASTER_PORT is the default, where a Trainer runtime
    // gives one.
    let pet = super::torchrun::MASTER_PORT;
    let port = match (value(4), env(pet).filter(|v| !v.trim().is_empty())) {
        (None, None) => 0,
        (Some(v), _) => v
            .trim()
            .parse()
            .map_err(|_| invalid(4, format!("{v:?} is not a port")))?,
        (None, Some(v)) => v
            .trim()
            .parse()
            .map_err(|_| invalid(4, format!("{pet}={v:?} is not a port")))?,
    };
    let advertise = match value(5).or_else(|| env("POD_IP").filter(|v| !v.trim().is_empty())) {
        None => None,
        Some(v) => Some(
            v.trim()
                .parse::<IpAddr>()
                .map_err(|_| invalid(5, format!("{v:?} is not an IP address")))?,
        ),
    };
    Ok(ServeConfig {
        endpoints,
        job,
        lease_ttl,
        secret_file,
        port,
        advertise,
    })
}

/// `elasticrun serve --help`'s own part (the job's options follow it).
pub fn help() -> String {
    let mut out = String::from(
        "Usage: elasticrun serve --etcd URL[,URL...] --job NAME --secret-file FILE [OPTIONS]\n\n\
         A coordinator for workers that start by themselves (Kubernetes pods with ELASTICRUN_ETCD,\n\
         ELASTICRUN_JOB and ELASTICRUN_SECRET_FILE) and find it through etcd. Run any number of\n\
         replicas: one leads through an etcd election on its lease, the others stand by and take\n\
         the job over from its state in etcd (same generation, assignment, blacklist and resets).\n\
         The elastic options below apply (--min-np, --max-np, --reset-limit, --elastic-timeout,\n\
         --blacklist-cooldown-range, stall check, tuneables, autotune, timeline; -np is the size\n\
         the first generation waits for); hosts are the workers' nodes, so -H, --hostfile and\n\
         --host-discovery-script do not apply.\n\n\
         etcd mode:\n",
    );
    for (flag, var, what) in OPTIONS {
        out.push_str(&format!(
            "      --{flag} <VALUE>\n          {what}\n          (env: {var}; config file: serve.{})\n",
            flag.replace('-', "_")
        ));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn serve_options_split_from_the_job_options() {
        let (found, rest) = split(&args(&[
            "--etcd=http://127.0.0.1:2379",
            "--min-np",
            "2",
            "--job",
            "j",
            "--secret-file",
            "/s",
            "--lease-ttl",
            "3",
        ]))
        .unwrap();
        assert_eq!(rest, args(&["--min-np", "2"]));
        let cfg = resolve(&found, &|_| None, &Serve::default()).unwrap();
        assert_eq!(cfg.job.as_str(), "j");
        assert_eq!(cfg.lease_ttl, Duration::from_secs(3));
        assert_eq!(cfg.port, 0);
        assert_eq!(cfg.advertise, None);
    }

    #[test]
    fn the_environment_fills_in_and_bad_values_are_named() {
        let env = |k: &str| match k {
            "ELASTICRUN_ETCD" => Some("e:1".to_owned()),
            "ELASTICRUN_JOB" => Some("job-a".to_owned()),
            "ELASTICRUN_SECRET_FILE" => Some("/run/secret".to_owned()),
            "POD_IP" => Some("10.1.2.3".to_owned()),
            _ => None,
        };
        let cfg = resolve(&[], &env, &Serve::default()).unwrap();
        assert_eq!(cfg.endpoints.urls(), ["http://e:1"]);
        assert_eq!(cfg.port, 0);
        let trainer = |k: &str| match k {
            "PET_MASTER_PORT" => Some("29400".to_owned()),
            k => env(k),
        };
        assert_eq!(
            resolve(&[], &trainer, &Serve::default()).unwrap().port,
            29400
        );
        let given = [("port", "29500".to_owned())];
        assert_eq!(
            resolve(&given, &trainer, &Serve::default()).unwrap().port,
            29500
        );
        assert_eq!(cfg.advertise, Some("10.1.2.3".parse().unwrap()));
        let e = resolve(&[], &|_| None, &Serve::default()).unwrap_err();
        assert!(e.to_string().contains("ELASTICRUN_ETCD"), "{e}");
        for (flag, v, says) in [
            ("lease-ttl", "1", "from 2 to 3600"),
            ("job", "Big/Job", "job name"),
            ("etcd", "https://x:1", "TLS"),
            ("port", "http", "not a port"),
        ] {
            let e = resolve(&[(flag, v.to_owned())], &env, &Serve::default()).unwrap_err();
            assert!(
                e.to_string().contains(says) && e.to_string().contains(flag),
                "{e}"
            );
        }
        assert!(matches!(
            split(&args(&["--job"])),
            Err(ServeArgsError::NoValue { flag: "job" })
        ));
    }

    #[test]
    fn the_file_counts_where_flag_and_environment_do_not() {
        let file = Serve {
            etcd: Some("http://f:1".into()),
            job: Some("from-file".into()),
            secret_file: Some("/f".into()),
            lease_ttl: Some(7),
            port: Some(29400),
            advertise_address: Some("10.0.0.9".into()),
        };
        let cfg = resolve(&[], &|_| None, &file).unwrap();
        assert_eq!(cfg.job.as_str(), "from-file");
        assert_eq!(cfg.lease_ttl, Duration::from_secs(7));
        assert_eq!(cfg.port, 29400);
        assert_eq!(cfg.advertise, Some("10.0.0.9".parse().unwrap()));
        let env = |k: &str| (k == "ELASTICRUN_JOB").then(|| "from-env".to_owned());
        let cfg = resolve(&[("lease-ttl", "3".into())], &env, &file).unwrap();
        assert_eq!(cfg.job.as_str(), "from-env");
        assert_eq!(cfg.lease_ttl, Duration::from_secs(3));
        let bad = Serve {
            lease_ttl: Some(1),
            ..file
        };
        let e = resolve(&[], &|_| None, &bad).unwrap_err();
        assert!(e.to_string().contains("lease-ttl"), "{e}");
    }
}
