//! Tests of host lists and hostfiles.

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
    // An IPv6 address whose last group could be a count says how to write
    // either; one that cannot be read two ways is an address.
    let e = parse_host_list("::1:2").unwrap_err();
    assert_eq!(
        e.to_string(),
        "host list item 1: ::1:2 is ambiguous: write [::1]:2 for ::1 with 2 slots, \
         or [::1:2] for the address ::1:2"
    );
    assert_eq!(parse_host_list("[::1]:2").unwrap(), vec![hs("::1", 2)]);
    assert_eq!(parse_host_list("[::1:2]").unwrap(), vec![hs("::1:2", 1)]);
    assert_eq!(parse_host_list("fe80::1").unwrap(), vec![hs("fe80::1", 1)]);
    // A count no host has is an error, not a job of that many workers.
    assert_eq!(
        parse_host_list("localhost:99999999999"),
        Err(HostsError::BadSlots {
            at: Location::ListItem(1),
            entry: "localhost:99999999999".into(),
            why: "more than the 4096 slots a host may offer"
        })
    );
    assert!(matches!(
        parse_hostfile("a slots=4097"),
        Err(HostsError::BadSlots { .. })
    ));
    assert_eq!(
        parse_host_list(&format!("a:{MAX_SLOTS_PER_HOST}")).unwrap(),
        vec![hs("a", MAX_SLOTS_PER_HOST)]
    );
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
