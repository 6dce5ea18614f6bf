//! Host lists: `-H a:4,b:2` on the command line and hostfiles (`host slots=N`,
//! `host:N` or `host` lines). IPv6 addresses take brackets when a slot count
//! follows (`[fe80::1]:4`). Pure parsing, no I/O.

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
    #[error("{at}: {entry:?} has a bad slot count ({why})")]
    BadSlots {
        at: Location,
        entry: String,
        why: &'static str,
    },
    #[error("{at}: {entry:?} is not a host name or address")]
    BadHost { at: Location, entry: String },
    #[error("{at}: unknown setting {setting:?} (only slots=N is understood)")]
    UnknownSetting { at: Location, setting: String },
    #[error("{at}: host {host} is listed twice")]
    Duplicate { at: Location, host: String },
}

/// Where an entry came from, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Position in a comma-separated `-H` list (1-based).
    ListItem(usize),
    /// Line of a hostfile (1-based).
    Line(usize),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::ListItem(i) => write!(f, "host list item {i}"),
            Location::Line(l) => write!(f, "hostfile line {l}"),
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
        push_unique(&mut out, parse_host_slots(item, at)?, at)?;
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
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        let mut entry = parse_host_slots(first, at)?;
        for w in words {
            let Some(count) = w.strip_prefix("slots=") else {
                return Err(HostsError::UnknownSetting {
                    at,
                    setting: w.into(),
                });
            };
            entry.slots = parse_count(count, line, at)?;
        }
        push_unique(&mut out, entry, at)?;
    }
    non_empty(out)
}

fn non_empty(v: Vec<HostSlots>) -> Result<Vec<HostSlots>, HostsError> {
    if v.is_empty() {
        Err(HostsError::Empty)
    } else {
        Ok(v)
    }
}

fn push_unique(out: &mut Vec<HostSlots>, e: HostSlots, at: Location) -> Result<(), HostsError> {
    if out.iter().any(|h| h.host == e.host) {
        return Err(HostsError::Duplicate { at, host: e.host });
    }
    out.push(e);
    Ok(())
}

fn parse_count(s: &str, entry: &str, at: Location) -> Result<usize, HostsError> {
    let bad = |why| HostsError::BadSlots {
        at,
        entry: entry.into(),
        why,
    };
    match s.parse::<usize>() {
        Ok(0) => Err(bad("must be at least 1")),
        Ok(n) => Ok(n),
        Err(_) => Err(bad("not a positive integer")),
    }
}

/// `host`, `host:N`, `[v6]`, `[v6]:N`, or a bare IPv6 address (one slot).
fn parse_host_slots(item: &str, at: Location) -> Result<HostSlots, HostsError> {
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
        None => 1,
    };
    Ok(HostSlots {
        host: host.into(),
        slots,
    })
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
mod tests {
    use super::*;

    fn hs(host: &str, slots: usize) -> HostSlots {
        HostSlots {
            host: host.into(),
            slots,
        }
    }

    #[test]
    fn host_lists() {
        assert_eq!(
            parse_host_list("a:4,b:2").unwrap(),
            vec![hs("a", 4), hs("b", 2)]
        );
        assert_eq!(
            parse_host_list("node-1.example").unwrap(),
            vec![hs("node-1.example", 1)]
        );
        assert_eq!(
            parse_host_list("[fe80::1]:3, 10.0.0.2:2,::1").unwrap(),
            vec![hs("fe80::1", 3), hs("10.0.0.2", 2), hs("::1", 1)]
        );
        assert_eq!(parse_host_list("[::1]").unwrap(), vec![hs("::1", 1)]);
    }

    #[test]
    fn bad_host_lists_say_where() {
        assert_eq!(
            parse_host_list("a:4,b:0"),
            Err(HostsError::BadSlots {
                at: Location::ListItem(2),
                entry: "b:0".into(),
                why: "must be at least 1"
            })
        );
        assert!(matches!(
            parse_host_list("a:x"),
            Err(HostsError::BadSlots { .. })
        ));
        assert!(matches!(
            parse_host_list("a,,b"),
            Err(HostsError::BadHost {
                at: Location::ListItem(2),
                ..
            })
        ));
        assert!(matches!(
            parse_host_list("a b:2"),
            Err(HostsError::BadHost { .. })
        ));
        assert!(matches!(
            parse_host_list("[::1"),
            Err(HostsError::BadHost { .. })
        ));
        assert!(matches!(
            parse_host_list("[::1]4"),
            Err(HostsError::BadHost { .. })
        ));
        assert!(matches!(
            parse_host_list("[nothex::zz]:2"),
            Err(HostsError::BadHost { .. })
        ));
        assert!(matches!(
            parse_host_list("a:1,a:2"),
            Err(HostsError::Duplicate { .. })
        ));
        assert_eq!(
            parse_host_list(""),
            Err(HostsError::BadHost {
                at: Location::ListItem(1),
                entry: "".into()
            })
        );
    }

    #[test]
    fn hostfiles_accept_both_forms_and_comments() {
        let text = "# cluster\nalpha slots=4\n\nbeta:2  # two GPUs\ngamma\n[fe80::2] slots=8\n";
        assert_eq!(
            parse_hostfile(text).unwrap(),
            vec![
                hs("alpha", 4),
                hs("beta", 2),
                hs("gamma", 1),
                hs("fe80::2", 8)
            ]
        );
    }

    #[test]
    fn bad_hostfiles_name_the_line() {
        assert_eq!(parse_hostfile("# nothing\n\n"), Err(HostsError::Empty));
        assert_eq!(
            parse_hostfile("a slots=2\nb gpus=2\n"),
            Err(HostsError::UnknownSetting {
                at: Location::Line(2),
                setting: "gpus=2".into()
            })
        );
        assert!(matches!(
            parse_hostfile("a slots=-1"),
            Err(HostsError::BadSlots {
                at: Location::Line(1),
                ..
            })
        ));
        assert!(matches!(
            parse_hostfile("a\na\n"),
            Err(HostsError::Duplicate {
                at: Location::Line(2),
                ..
            })
        ));
    }

    #[test]
    fn display_round_trips() {
        for h in [hs("a", 3), hs("fe80::1", 2)] {
            assert_eq!(parse_host_list(&h.to_string()).unwrap(), vec![h]);
        }
    }
}
