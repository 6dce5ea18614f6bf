//! Host lists: `-H a:4,b:2` on the command line and hostfiles (`host slots=N`,
//! `host:N` or `host` lines). IPv6 addresses take brackets when a slot count
//! follows (`[fe80::1]:4`). Pure parsing, no I/O. The output of a host discovery
//! script is parsed by [`crate::discovery`] with the same entry rules.

use std::fmt;

/// A host and how many worker slots it offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSlots {
    pub host: String,
    pub slots: usize,
}

impl fmt::Display for HostSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.slots)
        } else {
            write!(f, "{}:{}", self.host, self.slots)
        }
    }
}

/// Why a host list or hostfile was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostsError {
    #[error("no hosts given")]
    Empty,
    #[error("{at}: {} has a bad slot count ({why})", control::Quoted(entry))]
    BadSlots {
        at: Location,
        entry: String,
        why: &'static str,
    },
    #[error("{at}: {} is not a host name or address", control::Quoted(entry))]
    BadHost { at: Location, entry: String },
    #[error(
        "{at}: unknown setting {} (only slots=N is understood)",
        control::Quoted(setting)
    )]
    UnknownSetting { at: Location, setting: String },
    #[error("{at}: {entry} is ambiguous: {hint}")]
    AmbiguousV6 {
        at: Location,
        entry: String,
        hint: String,
    },
    #[error("{at}: host {host} is listed twice")]
    Duplicate { at: Location, host: String },
    #[error("{at}: line is {len} bytes long, more than the {max} allowed")]
    LineTooLong {
        at: Location,
        len: usize,
        max: usize,
    },
    #[error("more than {max} hosts listed")]
    TooManyHosts { max: usize },
}

/// Where an entry came from, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Position in a comma-separated `-H` list (1-based).
    ListItem(usize),
    /// Line of a hostfile (1-based).
    Line(usize),
    /// Line of a host discovery script's output (1-based).
    DiscoveryLine(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::ListItem(i) => write!(f, "host list item {i}"),
            Location::Line(l) => write!(f, "hostfile line {l}"),
            Location::DiscoveryLine(l) => write!(f, "discovery output line {l}"),
        }
    }
}

/// Parses a `-H`/`--hosts` value: `host[:slots]` items separated by commas; a host
/// without a count has one slot.
pub fn parse_host_list(s: &str) -> Result<Vec<HostSlots>, HostsError> {
    let mut out = Vec::new();
    for (i, item) in s.split(',').enumerate() {
        let at = Location::ListItem(i + 1);
        let item = item.trim();
        if item.is_empty() {
            return Err(HostsError::BadHost {
                at,
                entry: item.into(),
            });
        }
        push_unique(&mut out, parse_host_slots(item, at, 1)?, at)?;
    }
    non_empty(out)
}

/// Parses a hostfile: one host per line as `host slots=N`, `host:N` or `host`;
/// blank lines and `#` comments are ignored.
pub fn parse_hostfile(text: &str) -> Result<Vec<HostSlots>, HostsError> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let at = Location::Line(n + 1);
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let entry = parse_hostfile_line(line, at, 1, |w| HostsError::UnknownSetting {
            at,
            setting: w.into(),
        })?;
        push_unique(&mut out, entry, at)?;
    }
    non_empty(out)
}

/// One `host slots=N`, `host:N` or `host` line (comments stripped, not
/// empty); `default_slots` for a host without a count; `unknown` words other
/// than `slots=N` after the host.
pub(crate) fn parse_hostfile_line(
    line: &str,
    at: Location,
    default_slots: usize,
    unknown: impl Fn(&str) -> HostsError,
) -> Result<HostSlots, HostsError> {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or_default();
    let mut entry = parse_host_slots(first, at, default_slots)?;
    for w in words {
        let Some(count) = w.strip_prefix("slots=") else {
            return Err(unknown(w));
        };
        entry.slots = parse_count(count, line, at)?;
    }
    Ok(entry)
}

fn non_empty(v: Vec<HostSlots>) -> Result<Vec<HostSlots>, HostsError> {
    if v.is_empty() {
        Err(HostsError::Empty)
    } else {
        Ok(v)
    }
}

pub(crate) fn push_unique(
    out: &mut Vec<HostSlots>,
    e: HostSlots,
    at: Location,
) -> Result<(), HostsError> {
    if out.iter().any(|h| h.host == e.host) {
        return Err(HostsError::Duplicate { at, host: e.host });
    }
    out.push(e);
    Ok(())
}

/// Most worker slots one host may offer: far beyond any machine's cores,
/// and small enough that a typo (`host:99999999999`) is an error, not a job
/// that tries to lay out, or start, that many workers.
pub const MAX_SLOTS_PER_HOST: usize = 4096;

fn parse_count(s: &str, entry: &str, at: Location) -> Result<usize, HostsError> {
    let bad = |why| HostsError::BadSlots {
        at,
        entry: entry.into(),
        why,
    };
    match s.parse::<u64>() {
        Ok(0) => Err(bad("must be at least 1")),
        Ok(n) => match usize::try_from(n) {
            Ok(n) if n <= MAX_SLOTS_PER_HOST => Ok(n),
            _ => Err(bad("more than the 4096 slots a host may offer")),
        },
        Err(_) => Err(bad("not a positive integer")),
    }
}

/// `host`, `host:N`, `[v6]`, `[v6]:N`, or a bare IPv6 address; an entry without a
/// count gets `default_slots`.
pub(crate) fn parse_host_slots(
    item: &str,
    at: Location,
    default_slots: usize,
) -> Result<HostSlots, HostsError> {
    let bad_host = || HostsError::BadHost {
        at,
        entry: item.into(),
    };
    let (host, count) = if let Some(rest) = item.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or_else(bad_host)?;
        match after {
            "" => (v6, None),
            a => (v6, Some(a.strip_prefix(':').ok_or_else(bad_host)?)),
        }
    } else if item.matches(':').count() > 1 {
        if let Some(hint) = ambiguous_v6(item) {
            return Err(HostsError::AmbiguousV6 {
                at,
                entry: item.into(),
                hint,
            });
        }
        (item, None)
    } else {
        match item.split_once(':') {
            Some((h, c)) => (h, Some(c)),
            None => (item, None),
        }
    };
    if !valid_host(host) {
        return Err(bad_host());
    }
    let slots = match count {
        Some(c) => parse_count(c, item, at)?,
        None => default_slots,
    };
    Ok(HostSlots {
        host: host.into(),
        slots,
    })
}

/// A bare IPv6 address whose last group could be a slot count (`::1:2`:
/// the address `::1:2`, or `::1` with 2 slots?): how to write either.
fn ambiguous_v6(item: &str) -> Option<String> {
    let (host, count) = item.rsplit_once(':')?;
    let both = item.parse::<std::net::Ipv6Addr>().is_ok()
        && host.parse::<std::net::Ipv6Addr>().is_ok()
        && count.parse::<u32>().is_ok();
    both.then(|| format!("write [{host}]:{count} for {host} with {count} slots, or [{item}] for the address {item}"))
}

fn valid_host(h: &str) -> bool {
    if h.contains(':') {
        return h.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !h.is_empty()
        && h.len() <= 253
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

#[cfg(test)]
mod tests;
