//! Property tests of the parsers of users' host lists (`-H`), hostfiles and
//! host discovery scripts' output. Inputs are any text, text of the
//! characters these formats use, and valid texts mutated by [`testkit`]; each
//! must parse to hosts that are well formed (a valid name or IPv6 address, at
//! least one slot, no host twice, and written back as a host list, the same
//! hosts again) or be a typed [`HostsError`], never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use elastic::discovery::{MAX_DISCOVERED_HOSTS, parse_discovered};
use elastic::{HostSlots, HostsError, parse_host_list, parse_hostfile};
use testkit::proptest::prelude::*;

/// The characters of host lists, hostfiles and discovery output.
const ALPHABET: &str = "abcxyz019.-_:[]#=, \t\nslots";

/// Checks what a parser accepted: well-formed hosts that read back the same
/// from their own host-list form.
fn well_formed(hosts: &[HostSlots]) -> Result<(), TestCaseError> {
    for (i, h) in hosts.iter().enumerate() {
        prop_assert!(h.slots >= 1, "{h:?}");
        prop_assert!(!h.host.is_empty(), "{h:?}");
        prop_assert!(hosts[..i].iter().all(|o| o.host != h.host), "{h:?} twice");
    }
    if !hosts.is_empty() {
        let list: Vec<String> = hosts.iter().map(HostSlots::to_string).collect();
        let again = parse_host_list(&list.join(","));
        prop_assert_eq!(again.as_deref(), Ok(hosts));
    }
    Ok(())
}

fn outcome(parsed: Result<Vec<HostSlots>, HostsError>) -> Result<(), TestCaseError> {
    match parsed {
        Ok(hosts) => well_formed(&hosts),
        // Typed, and it says where.
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            Ok(())
        }
    }
}

#[test]
fn host_lists_parse_or_fail_typed() {
    let corpus = vec![
        "a:4,b:2".to_owned(),
        "node-1.example.com:8,node-2,10.0.0.3:1".to_owned(),
        "[fe80::1]:4,::1,[::2]".to_owned(),
        "localhost".to_owned(),
    ];
    testkit::check("host lists", testkit::text(corpus, ALPHABET), |s| {
        outcome(parse_host_list(&s))
    });
}

#[test]
fn hostfiles_parse_or_fail_typed() {
    let corpus = vec![
        "# cluster\nnode1 slots=4\nnode2:2\n\nnode3   # one slot\n".to_owned(),
        "[fe80::1]:3\n::1 slots=2\n10.1.2.3 slots=8 slots=9\n".to_owned(),
    ];
    testkit::check("hostfiles", testkit::text(corpus, ALPHABET), |s| {
        outcome(parse_hostfile(&s))
    });
}

#[test]
fn discovery_output_parses_or_fails_typed() {
    let corpus = vec![
        "# from the scheduler\nalpha:4\n\nbeta   # default count\n[fe80::1]:3\n::1\n".to_owned(),
        "host-a\nhost-b:2\n".to_owned(),
        String::new(),
    ];
    testkit::check(
        "discovery output",
        (testkit::text(corpus, ALPHABET), 0usize..4),
        |(s, slots)| {
            let parsed = parse_discovered(&s, slots);
            if let Ok(hosts) = &parsed {
                prop_assert!(hosts.len() <= MAX_DISCOVERED_HOSTS);
            }
            match parsed {
                // An empty output is valid: no host is usable now.
                Ok(hosts) if hosts.is_empty() => Ok(()),
                other => outcome(other),
            }
        },
    );
}
