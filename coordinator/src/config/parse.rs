//! The grammars of the option table: the text of the command line and the
//! environment to a value, in the option's own unit (Horovod's names have
//! theirs: [`bytes_as_mb`]).

use std::path::PathBuf;

use super::SEGMENT_BYTES_RANGE;
use super::error::BadValue;

/// A number; whether it is in the option's range is checked after the
/// pick, with where it came from, whichever layer gave it.
pub(super) fn number(s: &str) -> Result<f64, BadValue> {
    s.parse::<f64>().map_err(|_| BadValue::NotANumber)
}

pub(super) fn count(s: &str) -> Result<usize, BadValue> {
    s.parse().map_err(|_| BadValue::NotACount)
}

pub(super) fn some_count(s: &str) -> Result<Option<usize>, BadValue> {
    count(s).map(Some)
}

pub(super) fn some_port(s: &str) -> Result<Option<u16>, BadValue> {
    s.parse().map(Some).map_err(|_| BadValue::NotAPort)
}

pub(super) fn samples(s: &str) -> Result<u32, BadValue> {
    s.parse().map_err(|_| BadValue::NotAU32)
}

pub(super) fn some_samples(s: &str) -> Result<Option<u32>, BadValue> {
    samples(s).map(Some)
}

/// `MIN,MAX` or `MIN MAX`, in seconds.
pub(super) fn range(s: &str) -> Result<Option<Vec<f64>>, BadValue> {
    let parts: Vec<&str> = if s.contains(',') {
        s.split(',').map(str::trim).collect()
    } else {
        s.split_whitespace().collect()
    };
    match parts[..] {
        [min, max] => Ok(Some(vec![number(min)?, number(max)?])),
        _ => Err(BadValue::NotARange),
    }
}

/// CPU ids separated by commas (`--thread-affinity`).
pub(super) fn cpus(s: &str) -> Result<Option<Vec<usize>>, BadValue> {
    control::env::parse_cpu_list(s)
        .map(Some)
        .map_err(|why| BadValue::NotCpus { why })
}

pub(super) fn some_text(s: &str) -> Result<Option<String>, BadValue> {
    Ok(Some(s.to_owned()))
}

pub(super) fn some_path(s: &str) -> Result<Option<PathBuf>, BadValue> {
    Ok(Some(PathBuf::from(s)))
}

/// `1/0`, `true/false`, `yes/no`, `on/off`, any case.
pub(super) fn flag(s: &str) -> Result<bool, BadValue> {
    match s.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(BadValue::NotAFlag),
    }
}

/// A size in bytes: plain (`524288`) or with a binary suffix in any case
/// (`512K`, `4M`, `4MB`, `1GiB`, `1.5M`: K, M, G and T are powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, BadValue> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s.trim())
        .map_err(|why| BadValue::NotASize {
            text: s.to_owned(),
            why,
        })
}

/// A segment size within [`SEGMENT_BYTES_RANGE`].
pub(super) fn segment_bytes(bytes: u64) -> Result<u64, BadValue> {
    if SEGMENT_BYTES_RANGE.contains(&bytes) {
        Ok(bytes)
    } else {
        Err(BadValue::SegmentSize { bytes })
    }
}

/// Horovod's HOROVOD_FUSION_THRESHOLD is in bytes.
pub(super) fn bytes_as_mb(s: &str) -> Result<f64, BadValue> {
    number(s).map(|b| b / (1024.0 * 1024.0))
}

/// Text kept as it is (a log level is checked after the layers are merged).
pub(super) fn text(s: &str) -> Result<std::borrow::Cow<'static, str>, BadValue> {
    Ok(std::borrow::Cow::Owned(s.to_owned()))
}

/// When the data plane connects: `all` or `on-demand`, any case.
pub(super) fn connections(s: &str) -> Result<control::env::Connections, BadValue> {
    control::env::Connections::parse(s)
        .ok_or_else(|| BadValue::NotConnections { text: s.to_owned() })
}

/// A data plane's name: `tcp`, `quic` or `tls`, any case.
pub(super) fn transport(s: &str) -> Result<control::env::TransportKind, BadValue> {
    control::env::TransportKind::parse(s)
        .ok_or_else(|| BadValue::NotATransport { text: s.to_owned() })
}
