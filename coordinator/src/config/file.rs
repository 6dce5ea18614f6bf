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

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use control::env::{Connections, TransportKind};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::options::{self, Declared};

/// The file: the value of every key it gives, by `section.key`, typed by
/// the option the key belongs to (`options::ALL`), and `serve`'s section.
#[derive(Debug, Default, PartialEq)]
pub struct ConfigFile {
    values: BTreeMap<&'static str, FileValue>,
    pub serve: Serve,
}

impl ConfigFile {
    /// The value the file gives for `section.key`.
    pub(super) fn get(&self, path: &str) -> Option<&FileValue> {
        self.values.get(path)
    }
}

/// A value of the file, as its option's [`Kind`] reads it.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum FileValue {
    Number(f64),
    Integer(u64),
    Bool(bool),
    Text(String),
    Integers(Vec<usize>),
    /// `[MIN, MAX]`.
    Range(f64, f64),
    Transport(TransportKind),
    Connections(Connections),
}

/// What a key's value must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Number,
    U16,
    U32,
    U64,
    Usize,
    Bool,
    Text,
    /// A list of integers 0 or more: `[0, 2]`.
    Integers,
    /// Two numbers: `[MIN, MAX]`.
    Range,
    /// `tcp`, `quic` or `tls`.
    Transport,
    /// `all` or `on-demand`.
    Connections,
}

/// An option's type as the file gives it.
pub(super) trait FileType: Sized {
    const KIND: Kind;
    /// The value, if it is of [`Self::KIND`] (it is: the reader typed it).
    fn from_file(v: &FileValue) -> Option<Self>;
}

macro_rules! file_type {
    ($t:ty, $kind:ident, $v:pat => $e:expr) => {
        impl FileType for $t {
            const KIND: Kind = Kind::$kind;
            fn from_file(v: &FileValue) -> Option<Self> {
                match v {
                    $v => $e,
                    _ => None,
                }
            }
        }
    };
}

file_type!(f64, Number, FileValue::Number(x) => Some(*x));
file_type!(u16, U16, FileValue::Integer(x) => u16::try_from(*x).ok());
file_type!(u32, U32, FileValue::Integer(x) => u32::try_from(*x).ok());
file_type!(u64, U64, FileValue::Integer(x) => Some(*x));
file_type!(usize, Usize, FileValue::Integer(x) => usize::try_from(*x).ok());
file_type!(bool, Bool, FileValue::Bool(b) => Some(*b));
file_type!(String, Text, FileValue::Text(t) => Some(t.clone()));
file_type!(PathBuf, Text, FileValue::Text(t) => Some(PathBuf::from(t)));
file_type!(Cow<'static, str>, Text, FileValue::Text(t) => Some(Cow::Owned(t.clone())));
file_type!(Vec<usize>, Integers, FileValue::Integers(v) => Some(v.clone()));
file_type!(Vec<f64>, Range, FileValue::Range(a, b) => Some(vec![*a, *b]));
file_type!(TransportKind, Transport, FileValue::Transport(t) => Some(*t));
file_type!(Connections, Connections, FileValue::Connections(c) => Some(*c));

/// An optional option is given by the file as its value.
impl<T: FileType> FileType for Option<T> {
    const KIND: Kind = T::KIND;
    fn from_file(v: &FileValue) -> Option<Self> {
        T::from_file(v).map(Some)
    }
}

impl FileValue {
    /// Reads a value of `kind`.
    fn read<'de, D: Deserializer<'de>>(kind: Kind, d: D) -> Result<FileValue, D::Error> {
        let integer = |x: u64| FileValue::Integer(x);
        Ok(match kind {
            Kind::Number => FileValue::Number(f64::deserialize(d)?),
            Kind::U16 => integer(u16::deserialize(d)?.into()),
            Kind::U32 => integer(u32::deserialize(d)?.into()),
            Kind::U64 => integer(u64::deserialize(d)?),
            Kind::Usize => integer(usize::deserialize(d)? as u64),
            Kind::Bool => FileValue::Bool(bool::deserialize(d)?),
            Kind::Text => FileValue::Text(String::deserialize(d)?),
            Kind::Integers => FileValue::Integers(Vec::deserialize(d)?),
            Kind::Range => {
                let (min, max) = <(f64, f64)>::deserialize(d)?;
                FileValue::Range(min, max)
            }
            Kind::Transport => {
                let name = String::deserialize(d)?;
                let kind = TransportKind::parse(&name).ok_or_else(|| {
                    de::Error::custom(format!(
                        "{name:?} is not a data plane: expected one of {}",
                        TransportKind::NAMES
                    ))
                })?;
                FileValue::Transport(kind)
            }
            Kind::Connections => {
                let name = String::deserialize(d)?;
                let c = Connections::parse(&name).ok_or_else(|| {
                    de::Error::custom(format!(
                        "{name:?} is not a way of connecting: expected one of {}",
                        Connections::NAMES
                    ))
                })?;
                FileValue::Connections(c)
            }
        })
    }

    /// The opposite of a yes or no.
    pub(super) fn negated(&self) -> FileValue {
        match self {
            FileValue::Bool(b) => FileValue::Bool(!b),
            other => other.clone(),
        }
    }
}

/// Every option's `(section, key)` in the file, with the option.
fn keys() -> impl Iterator<Item = (&'static str, &'static str, &'static dyn Declared)> {
    options::ALL
        .iter()
        .filter_map(|&o| o.yaml().path.split_once('.').map(|(s, k)| (s, k, o)))
}

/// The file's sections: those of the option table, and `serve`.
fn sections() -> &'static [&'static str] {
    static SECTIONS: OnceLock<Vec<&'static str>> = OnceLock::new();
    SECTIONS.get_or_init(|| {
        let mut names: Vec<&'static str> = Vec::new();
        for name in keys().map(|(s, _, _)| s).chain(["serve"]) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    })
}

/// The option whose key is `section.key`.
fn option_at(section: &str, key: &str) -> Option<&'static dyn Declared> {
    keys()
        .find(|&(s, k, _)| s == section && k == key)
        .map(|(_, _, o)| o)
}

/// The keys of `section`, for an error that names them.
fn keys_of(section: &str) -> String {
    let named: Vec<String> = keys()
        .filter(|&(s, _, _)| s == section)
        .map(|(_, k, _)| format!("`{k}`"))
        .collect();
    named.join(", ")
}

impl<'de> Deserialize<'de> for ConfigFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FileVisitor)
    }
}

struct FileVisitor;

impl<'de> Visitor<'de> for FileVisitor {
    type Value = ConfigFile;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sections of options")
    }

    fn visit_unit<E: de::Error>(self) -> Result<ConfigFile, E> {
        Ok(ConfigFile::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ConfigFile, A::Error> {
        let mut file = ConfigFile::default();
        let known = sections();
        while let Some(name) = map.next_key::<String>()? {
            if name == "serve" {
                file.serve = map.next_value()?;
            } else if let Some(section) = known.iter().find(|s| **s == name) {
                map.next_value_seed(SectionSeed {
                    section,
                    values: &mut file.values,
                })?;
            } else {
                return Err(de::Error::unknown_field(&name, known));
            }
        }
        Ok(file)
    }
}

/// Reads one section's keys into the file's values.
struct SectionSeed<'a> {
    section: &'static str,
    values: &'a mut BTreeMap<&'static str, FileValue>,
}

impl<'de> DeserializeSeed<'de> for SectionSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        // `any`: a section left empty (`launch:`) is a section without keys.
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SectionSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the keys of section `{}`", self.section)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let Some(option) = option_at(self.section, &key) else {
                return Err(de::Error::custom(format!(
                    "unknown field `{key}`, expected one of {}",
                    keys_of(self.section)
                )));
            };
            if let Some(v) = map.next_value_seed(ValueSeed(option.kind()))? {
                self.values.insert(option.yaml().path, v);
            }
        }
        Ok(())
    }
}

/// Reads a key's value of a [`Kind`]; `null` is the key left out.
struct ValueSeed(Kind);

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Option<FileValue>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed {
    type Value = Option<FileValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a value of kind {:?}", self.0)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        FileValue::read(self.0, d).map(Some)
    }
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
        use FileValue::*;
        for (path, value) in [
            ("params.fusion_threshold_mb", Number(32.0)),
            ("params.cycle_time_ms", Number(2.5)),
            ("params.hierarchical_allreduce", Bool(true)),
            ("timeline.filename", Text("t.json".into())),
            ("timeline.mark_cycles", Bool(true)),
            ("stall_check.enabled", Bool(false)),
            ("logging.level", Text("debug".into())),
            ("launch.np", Integer(4)),
            ("launch.hosts", Text("a:2,b:2".into())),
        ] {
            assert_eq!(f.get(path), Some(&value), "{path}");
        }
        assert_eq!(f.get("params.cache_capacity"), None);
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
        use FileValue::*;
        for (path, value) in [
            ("elastic.host_discovery_script", Text("./d.sh".into())),
            ("elastic.min_np", Integer(2)),
            ("elastic.max_np", Integer(8)),
            ("elastic.slots_per_host", Integer(4)),
            ("elastic.elastic_timeout", Number(60.0)),
            ("elastic.replacement_wait", Number(2.0)),
            ("elastic.reset_limit", Integer(3)),
            ("elastic.blacklist_cooldown_range", Range(10.0, 100.5)),
            ("elastic.discovery_interval", Number(0.5)),
            ("elastic.discovery_timeout", Number(5.0)),
        ] {
            assert_eq!(f.get(path), Some(&value), "{path}");
        }
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
        use FileValue::*;
        for (path, value) in [
            ("autotune.enabled", Bool(true)),
            ("autotune.log_file", Text("horovod_autotune_log.txt".into())),
            ("autotune.warmup_samples", Integer(5)),
            ("autotune.steps_per_sample", Integer(20)),
            ("autotune.bayes_opt_max_samples", Integer(50)),
            ("autotune.gaussian_process_noise", Number(0.9)),
        ] {
            assert_eq!(f.get(path), Some(&value), "{path}");
        }
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
        assert_eq!(
            f.get("params.segment_bytes"),
            Some(&FileValue::Integer(1 << 20))
        );
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
        use FileValue::*;
        for (path, value) in [
            ("library_options.gloo_timeout_seconds", Number(90.0)),
            ("library_options.thread_affinity", Integers(vec![1, 3])),
            ("library_options.tcp", Bool(true)),
            ("library_options.transport", Transport(TransportKind::Quic)),
            ("library_options.shared_memory", Bool(false)),
        ] {
            assert_eq!(f.get(path), Some(&value), "{path}");
        }
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
