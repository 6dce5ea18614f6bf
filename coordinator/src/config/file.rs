//! The YAML `--config-file`, in horovodrun's layout (so existing files carry over)
//! plus a `launch` section for the launcher's own options:
//!
//! ```yaml
//! launch:      { np: 4, hosts: "a:2,b:2", hostfile: hosts.txt, ssh_port: 2222,
//!                ssh_identity_file: ~/.ssh/id, start_timeout: 60, max_restarts: 3,
//!                network_interface: eth0, output_filename: logs,
//!                prefix_output_with_timestamp: true }
//! params:      { fusion_threshold_mb: 32, cycle_time_ms: 2.5, cache_capacity: 2048,
//!                disable_cache: false, hierarchical_allreduce: false,
//!                hierarchical_allgather: false, segment_bytes: 524288 }
//! autotune:    { enabled: true, log_file: autotune.csv, warmup_samples: 3,
//!                steps_per_sample: 10, bayes_opt_max_samples: 20,
//!                gaussian_process_noise: 0.8 }
//! timeline:    { filename: timeline.json, mark_cycles: true }
//! stall_check: { enabled: true, warning_time_seconds: 60, shutdown_time_seconds: 0 }
//! logging:     { level: info, hide_timestamp: false }
//! library_options: { gloo_timeout_seconds: 60, thread_affinity: [0, 2], tcp: true,
//!                    transport: tcp, shared_memory: true }
//! elastic:     { host_discovery_script: ./discover.sh, min_np: 2, max_np: 8,
//!                slots_per_host: 4, elastic_timeout: 600, replacement_wait: 0.5,
//!                reset_limit: 10, blacklist_cooldown_range: [60, 300], discovery_interval: 1,
//!                discovery_timeout: 10 }
//! serve:       { etcd: "http://etcd:2379", job: resnet, secret_file: /run/secret/job,
//!                lease_ttl: 5, port: 29400, advertise_address: 10.0.0.5 }
//! ```
//! (`serve` is read by `elasticrun serve` only.)
//! (horovodrun's file has no elastic options; the `elastic` section uses the
//! command line's names, as `launch` does.)
//! Unknown keys are errors (with line and column), so a typo is never ignored.

use serde::Deserialize;

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub launch: Launch,
    #[serde(default)]
    pub params: Params,
    #[serde(default)]
    pub autotune: Autotune,
    #[serde(default)]
    pub timeline: Timeline,
    #[serde(default)]
    pub stall_check: StallCheck,
    #[serde(default)]
    pub logging: Logging,
    #[serde(default)]
    pub library_options: LibraryOptions,
    #[serde(default)]
    pub elastic: Elastic,
    #[serde(default)]
    pub serve: Serve,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    pub np: Option<usize>,
    pub hosts: Option<String>,
    pub hostfile: Option<String>,
    pub ssh_port: Option<u16>,
    pub ssh_identity_file: Option<String>,
    pub start_timeout: Option<f64>,
    pub coordinator_timeout: Option<f64>,
    pub heartbeat_timeout: Option<f64>,
    pub max_restarts: Option<u32>,
    pub network_interface: Option<String>,
    pub output_filename: Option<String>,
    pub prefix_output_with_timestamp: Option<bool>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub fusion_threshold_mb: Option<f64>,
    pub cycle_time_ms: Option<f64>,
    pub cache_capacity: Option<usize>,
    pub disable_cache: Option<bool>,
    pub hierarchical_allreduce: Option<bool>,
    pub hierarchical_allgather: Option<bool>,
    /// In bytes, as the autotuner's `params:` section writes it.
    pub segment_bytes: Option<u64>,
}

/// horovodrun's `autotune` section, with its keys.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Autotune {
    pub enabled: Option<bool>,
    pub log_file: Option<String>,
    pub warmup_samples: Option<u32>,
    pub steps_per_sample: Option<u32>,
    pub bayes_opt_max_samples: Option<u32>,
    pub gaussian_process_noise: Option<f64>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Timeline {
    pub filename: Option<String>,
    pub mark_cycles: Option<bool>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StallCheck {
    pub enabled: Option<bool>,
    pub warning_time_seconds: Option<f64>,
    pub shutdown_time_seconds: Option<f64>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Logging {
    pub level: Option<String>,
    pub hide_timestamp: Option<bool>,
}

/// horovodrun's `library_options` section, with the keys elasticrun acts on
/// (MPI's and NCCL's are unknown keys, so refused).
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LibraryOptions {
    pub gloo_timeout_seconds: Option<f64>,
    /// CPU ids, one per slot of a host: `[0, 2]`.
    pub thread_affinity: Option<Vec<usize>>,
    /// `tcp`, `quic` or `tls`.
    #[serde(default, deserialize_with = "transport")]
    pub transport: Option<control::env::TransportKind>,
    /// `false`: ranks of one host keep to TCP or TLS (`--no-shared-memory`).
    pub shared_memory: Option<bool>,
    pub tcp: Option<bool>,
}

/// A data plane's name in the file.
fn transport<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<control::env::TransportKind>, D::Error> {
    let name: Option<String> = serde::Deserialize::deserialize(d)?;
    name.map(|n| {
        control::env::TransportKind::parse(&n).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{n:?} is not a data plane: expected one of {}",
                control::env::TransportKind::NAMES
            ))
        })
    })
    .transpose()
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Elastic {
    pub host_discovery_script: Option<String>,
    pub min_np: Option<usize>,
    pub max_np: Option<usize>,
    pub slots_per_host: Option<usize>,
    pub elastic_timeout: Option<f64>,
    pub replacement_wait: Option<f64>,
    pub reset_limit: Option<u32>,
    /// `[MIN, MAX]` seconds.
    pub blacklist_cooldown_range: Option<(f64, f64)>,
    pub discovery_interval: Option<f64>,
    pub discovery_timeout: Option<f64>,
}

/// `elasticrun serve`'s own options, keyed by their flags' names with `_`.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Serve {
    pub etcd: Option<String>,
    pub job: Option<String>,
    pub secret_file: Option<String>,
    pub lease_ttl: Option<u64>,
    pub port: Option<u16>,
    pub advertise_address: Option<String>,
}

impl Serve {
    /// The value given for the serve option whose flag is `flag`, as text.
    pub fn get(&self, flag: &str) -> Option<String> {
        match flag {
            "etcd" => self.etcd.clone(),
            "job" => self.job.clone(),
            "secret-file" => self.secret_file.clone(),
            "lease-ttl" => self.lease_ttl.map(|t| t.to_string()),
            "port" => self.port.map(|p| p.to_string()),
            "advertise-address" => self.advertise_address.clone(),
            _ => None,
        }
    }
}

/// Why the file's text was refused: the YAML parser's error, whose message
/// names the line, the column and, for a typo, the keys expected there, in
/// words for the file's author (the parser's advice to programmers, such as
/// which option of its to set or which Rust type to use, left out).
#[derive(Debug, thiserror::Error)]
#[error("{}", in_our_words(&.0.to_string()))]
pub struct FileError(#[from] serde_saphyr::Error);

/// The parser's message for a user: `error: ` dropped, its advice to the
/// programmer replaced by what it means in the file.
fn in_our_words(said: &str) -> String {
    let said = said.strip_prefix("error: ").unwrap_or(said);
    let said = said.lines().next().unwrap_or(said);
    if let Some(head) = said.strip_suffix(", set DuplicateKeyPolicy in Options if acceptable") {
        return format!("{head} (each key may be given once)");
    }
    match said.split_once("; use ") {
        Some((head, _)) => format!("{head} (a value is missing)"),
        None => said.to_owned(),
    }
}

/// Parses the file's text.
pub fn parse(text: &str) -> Result<ConfigFile, FileError> {
    if text.trim().is_empty() {
        return Ok(ConfigFile::default());
    }
    Ok(serde_saphyr::from_str(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser's errors in words for the file's author.
    #[test]
    fn errors_speak_of_the_file_not_of_the_parsers_options() {
        let said = |t: &str| parse(t).unwrap_err().to_string();
        assert_eq!(
            said("params:\n  cycle_time_ms: 1\n  cycle_time_ms: 2\n"),
            "line 3 column 3: duplicate mapping key: cycle_time_ms (each key may be given once)"
        );
        assert_eq!(
            said(":\n- - : :\n"),
            "line 1 column 1: cannot deserialize null into string (a value is missing)"
        );
        assert_eq!(
            said("params:\n  fusion_threshold_mb: abc\n"),
            "line 2 column 24: invalid floating point"
        );
    }

    #[test]
    fn horovod_layout_parses() {
        let f = parse(
            "params:\n  fusion_threshold_mb: 32\n  cycle_time_ms: 2.5\n  hierarchical_allreduce: true\n\
             timeline:\n  filename: t.json\n  mark_cycles: true\n\
             stall_check:\n  enabled: false\n\
             logging:\n  level: debug\n\
             launch:\n  np: 4\n  hosts: a:2,b:2\n",
        )
        .unwrap();
        assert_eq!(f.params.fusion_threshold_mb, Some(32.0));
        assert_eq!(f.params.cycle_time_ms, Some(2.5));
        assert_eq!(f.params.hierarchical_allreduce, Some(true));
        assert_eq!(f.timeline.filename.as_deref(), Some("t.json"));
        assert_eq!(f.stall_check.enabled, Some(false));
        assert_eq!(f.logging.level.as_deref(), Some("debug"));
        assert_eq!(f.launch.np, Some(4));
        assert_eq!(f.launch.hosts.as_deref(), Some("a:2,b:2"));
    }

    #[test]
    fn elastic_section_parses() {
        let f = parse(
            "elastic:\n  host_discovery_script: ./d.sh\n  min_np: 2\n  max_np: 8\n  \
             slots_per_host: 4\n  elastic_timeout: 60\n  replacement_wait: 2\n  \
             reset_limit: 3\n  blacklist_cooldown_range: [10, 100.5]\n  discovery_interval: 0.5\n  \
             discovery_timeout: 5\n",
        )
        .unwrap();
        assert_eq!(
            f.elastic,
            Elastic {
                host_discovery_script: Some("./d.sh".into()),
                min_np: Some(2),
                max_np: Some(8),
                slots_per_host: Some(4),
                elastic_timeout: Some(60.0),
                replacement_wait: Some(2.0),
                reset_limit: Some(3),
                blacklist_cooldown_range: Some((10.0, 100.5)),
                discovery_interval: Some(0.5),
                discovery_timeout: Some(5.0),
            }
        );
        let e = parse("elastic:\n  min_num_proc: 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("min_num_proc"), "{e}");
        assert!(parse("elastic:\n  blacklist_cooldown_range: [10]\n").is_err());
        assert!(parse("elastic:\n  blacklist_cooldown_range: [1, 2, 3]\n").is_err());
        assert!(parse("elastic:\n  reset_limit: -1\n").is_err());
    }

    #[test]
    fn autotune_section_parses() {
        // horovodrun's own example file's section.
        let f = parse(
            "autotune:\n  enabled: true\n  log_file: 'horovod_autotune_log.txt'\n  \
             warmup_samples: 5\n  steps_per_sample: 20\n  bayes_opt_max_samples: 50\n  \
             gaussian_process_noise: 0.9\n",
        )
        .unwrap();
        assert_eq!(
            f.autotune,
            Autotune {
                enabled: Some(true),
                log_file: Some("horovod_autotune_log.txt".into()),
                warmup_samples: Some(5),
                steps_per_sample: Some(20),
                bayes_opt_max_samples: Some(50),
                gaussian_process_noise: Some(0.9),
            }
        );
        let e = parse("autotune:\n  batches_per_sample: 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("batches_per_sample"), "{e}");
        assert!(parse("autotune:\n  warmup_samples: -1\n").is_err());
        assert!(parse("autotune:\n  enabled: sometimes\n").is_err());
    }

    #[test]
    fn segment_bytes_is_an_integer_of_bytes() {
        // As the autotuner's `params:` section writes it.
        let f = parse("params:\n  cycle_time_ms: 2\n  segment_bytes: 1048576\n").unwrap();
        assert_eq!(f.params.segment_bytes, Some(1 << 20));
        assert!(parse("params:\n  segment_bytes: 1M\n").is_err());
        assert!(parse("params:\n  segment_bytes: -4096\n").is_err());
        assert!(parse("params:\n  segment_size: 4096\n").is_err());
    }

    #[test]
    fn library_options_section_parses() {
        let f = parse(
            "library_options:\n  gloo_timeout_seconds: 90\n  thread_affinity: [1, 3]\n  tcp: true\n  transport: QUIC\n  \
             shared_memory: false\n",
        )
        .unwrap();
        assert_eq!(
            f.library_options,
            LibraryOptions {
                gloo_timeout_seconds: Some(90.0),
                thread_affinity: Some(vec![1, 3]),
                transport: Some(control::env::TransportKind::Quic),
                shared_memory: Some(false),
                tcp: Some(true),
            }
        );
        let e = parse("library_options:\n  transport: carrier-pigeon\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"carrier-pigeon\" is not a data plane"), "{e}");
        let e = parse("library_options:\n  shared_memory: sometimes\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("boolean"), "{e}");
        let e = parse("library_options:\n  num_nccl_streams: 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_nccl_streams"), "{e}");
        assert!(parse("library_options:\n  thread_affinity: [-1]\n").is_err());
    }

    #[test]
    fn serve_section_parses() {
        let f = parse(
            "serve:\n  etcd: http://e:2379\n  job: j\n  secret_file: /s\n  lease_ttl: 3\n  \
             port: 29400\n  advertise_address: 10.0.0.5\n",
        )
        .unwrap();
        for (flag, v) in [
            ("etcd", "http://e:2379"),
            ("job", "j"),
            ("secret-file", "/s"),
            ("lease-ttl", "3"),
            ("port", "29400"),
            ("advertise-address", "10.0.0.5"),
        ] {
            assert_eq!(f.serve.get(flag).as_deref(), Some(v), "{flag}");
        }
        let e = parse("serve:\n  lease: 3\n").unwrap_err().to_string();
        assert!(e.contains("lease"), "{e}");
        assert!(parse("serve:\n  port: 70000\n").is_err());
    }

    #[test]
    fn empty_file_is_all_defaults() {
        assert_eq!(parse("").unwrap(), ConfigFile::default());
        assert_eq!(parse("# nothing\n").unwrap(), ConfigFile::default());
    }

    #[test]
    fn typos_and_wrong_types_are_errors_with_a_position() {
        let e = parse("params:\n  fusion_treshold_mb: 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fusion_treshold_mb"), "{e}");
        assert!(e.contains('2'), "names the line: {e}");
        assert!(parse("params:\n  cache_capacity: lots\n").is_err());
        assert!(parse("launch: [1, 2]\n").is_err());
    }
}
