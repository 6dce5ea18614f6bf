//! The output of a `--host-discovery-script`: one `host`, `host:slots` or
//! `host slots=N` (hostfile syntax) line per usable host, re-read every few
//! seconds. Entries follow the `-H` rules of
//! [`crate::hosts`] (IPv6 in brackets before a count, `[fe80::1]:4`; a bare IPv6
//! address takes the default count); blank lines and `#` comments are ignored.
//!
//! Unlike a hostfile, an output with no hosts is valid: it means that no host is
//! usable right now, and the job waits (up to `--elastic-timeout`) for hosts to come
//! back. Anything else that is not one entry per line (spaces inside an entry
//! other than a `slots=N` setting, a shell error message, a zero or non-numeric
//! count) is refused naming the line, so that a broken script never silently shrinks the job.

use crate::hosts::{HostSlots, HostsError, Location, parse_hostfile_line, push_unique};

/// At most this many hosts in one discovery output.
pub const MAX_DISCOVERED_HOSTS: usize = 4096;
/// At most this many bytes in one line of discovery output.
pub const MAX_DISCOVERY_LINE: usize = 1024;

/// Parses a discovery script's output. A host without a count gets `default_slots`
/// (`--slots-per-host`; 0 is taken as 1). Hosts keep the order of the output, which is
/// the order workers are spawned in.
pub fn parse_discovered(text: &str, default_slots: usize) -> Result<Vec<HostSlots>, HostsError> {
    let default_slots = default_slots.max(1);
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let at = Location::DiscoveryLine(n + 1);
        if raw.len() > MAX_DISCOVERY_LINE {
            return Err(HostsError::LineTooLong {
                at,
                len: raw.len(),
                max: MAX_DISCOVERY_LINE,
            });
        }
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        if out.len() == MAX_DISCOVERED_HOSTS {
            return Err(HostsError::TooManyHosts {
                max: MAX_DISCOVERED_HOSTS,
            });
        }
        let entry = parse_hostfile_line(line, at, default_slots, |_| HostsError::BadHost {
            at,
            entry: line.into(),
        })?;
        push_unique(&mut out, entry, at)?;
    }
    Ok(out)
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
    fn hosts_with_and_without_counts() {
        let text = "# from the scheduler\nalpha:4\n\nbeta   # default count\n[fe80::1]:3\n::1\n";
        assert_eq!(
            parse_discovered(text, 2).unwrap(),
            vec![
                hs("alpha", 4),
                hs("beta", 2),
                hs("fe80::1", 3),
                hs("::1", 2)
            ]
        );
        assert_eq!(
            parse_discovered("a\r\nb:2\r\n", 1).unwrap(),
            vec![hs("a", 1), hs("b", 2)]
        );
        assert_eq!(parse_discovered("a", 0).unwrap(), vec![hs("a", 1)]);
    }

    #[test]
    fn hostfile_lines_are_understood_too() {
        assert_eq!(
            parse_discovered("alpha slots=4\nbeta\tslots=1 # ok\ngamma:3\n", 2).unwrap(),
            vec![hs("alpha", 4), hs("beta", 1), hs("gamma", 3)]
        );
    }

    #[test]
    fn a_slot_count_no_host_has_is_refused() {
        let e = parse_discovered("localhost:99999999999\n", 1).unwrap_err();
        assert!(
            matches!(
                &e,
                HostsError::BadSlots {
                    at: Location::DiscoveryLine(1),
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("4096 slots"), "{e}");
    }

    #[test]
    fn empty_output_means_no_hosts_now() {
        assert_eq!(parse_discovered("", 1).unwrap(), vec![]);
        assert_eq!(parse_discovered("\n# none yet\n  \n", 1).unwrap(), vec![]);
    }

    #[test]
    fn garbage_is_refused_naming_the_line() {
        let line2 = |e| match e {
            Err(
                HostsError::BadHost { at, .. }
                | HostsError::BadSlots { at, .. }
                | HostsError::Duplicate { at, .. },
            ) => at == Location::DiscoveryLine(2),
            _ => false,
        };
        assert!(line2(parse_discovered("a\nb c\n", 1)));
        assert!(line2(parse_discovered("a\nb slots=2 x\n", 1)));
        assert!(line2(parse_discovered("a\nb slots=0\n", 1)));
        assert!(line2(parse_discovered("a\nb max_slots=2\n", 1)));
        assert!(line2(parse_discovered(
            "a\nsh: 1: hosts.sh: not found\n",
            1
        )));
        assert!(line2(parse_discovered("a\nb;rm\n", 1)));
        assert!(line2(parse_discovered("a\nb:0\n", 1)));
        assert!(line2(parse_discovered("a\nb:x\n", 1)));
        assert!(line2(parse_discovered("a\nb:-1\n", 1)));
        assert!(line2(parse_discovered("a:2\na:3\n", 1)));
        assert!(line2(parse_discovered("a\n[::1\n", 1)));
        assert_eq!(
            parse_discovered("a\nb c\n", 1).unwrap_err().to_string(),
            "discovery output line 2: \"b c\" is not a host name or address"
        );
    }

    #[test]
    fn absurd_output_is_capped() {
        let long = format!("a\n{}\n", "b".repeat(MAX_DISCOVERY_LINE + 1));
        assert_eq!(
            parse_discovered(&long, 1),
            Err(HostsError::LineTooLong {
                at: Location::DiscoveryLine(2),
                len: MAX_DISCOVERY_LINE + 1,
                max: MAX_DISCOVERY_LINE
            })
        );
        let many: String = (0..=MAX_DISCOVERED_HOSTS)
            .map(|i| format!("h{i}\n"))
            .collect();
        assert_eq!(
            parse_discovered(&many, 1),
            Err(HostsError::TooManyHosts {
                max: MAX_DISCOVERED_HOSTS
            })
        );
        let most: String = (0..MAX_DISCOVERED_HOSTS)
            .map(|i| format!("h{i}:1\n"))
            .collect();
        assert_eq!(
            parse_discovered(&most, 1).unwrap().len(),
            MAX_DISCOVERED_HOSTS
        );
    }
}
