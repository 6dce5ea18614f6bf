use proptest::prelude::*;
use testkit::proptest;

use super::*;

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn slurms_host_lists_expand() {
    assert_eq!(expand("vm").unwrap(), strs(&["vm"]));
    assert_eq!(
        expand("node[01-04,07],gpu-a[1-2]").unwrap(),
        strs(&[
            "node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"
        ])
    );
    // Padding follows the lower bound, across a change of width.
    assert_eq!(expand("n[08-10]").unwrap(), strs(&["n08", "n09", "n10"]));
    assert_eq!(expand("n[9-10]").unwrap(), strs(&["n9", "n10"]));
    // Several groups: their product, the last varying fastest, with text
    // between and after.
    assert_eq!(
        expand("r[1-2]-c[0-1].x").unwrap(),
        strs(&["r1-c0.x", "r1-c1.x", "r2-c0.x", "r2-c1.x"])
    );
    assert_eq!(expand("a,b[3],c").unwrap(), strs(&["a", "b3", "c"]));
}

#[test]
fn bad_host_lists_are_refused_with_why() {
    for (list, why) in [
        ("n[1-3", "without its `]`"),
        ("n1-3]", "without its `[`"),
        ("n[[1]]", "nested"),
        ("n[3-1]", "backwards"),
        ("n[a-b]", "not a number or range"),
        ("n[]", "not a number or range"),
        ("a,,b", "an empty entry"),
        ("a b", "holds a space"),
        ("n[0-99999999999]", "more than 65536 hosts"),
        ("a[0-999]b[0-999]", "more than 65536 hosts"),
        ("n[99999999999999999999]", "too large"),
    ] {
        let e = expand(list).unwrap_err().to_string();
        assert!(e.contains(why), "{list}: {e}");
    }
}

#[test]
fn tasks_per_node_repeat() {
    assert_eq!(tasks_per_node("2(x3),1").unwrap(), vec![2, 2, 2, 1]);
    assert_eq!(tasks_per_node("4").unwrap(), vec![4]);
    for bad in ["", "2(x3", "x", "2(xa)", "1(x99999999)"] {
        assert!(tasks_per_node(bad).is_err(), "{bad}");
    }
}

#[test]
fn an_allocation_is_read_from_its_variables() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(Allocation::from_env(env(&[])).unwrap(), None);
    let a = Allocation::from_env(env(&[
        ("SLURM_JOB_ID", "42"),
        ("SLURM_JOB_NODELIST", "n[1-3]"),
        ("SLURM_TASKS_PER_NODE", "2(x2),1"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(a.job_id, "42");
    let got: Vec<(String, usize)> = a.hosts.into_iter().map(|h| (h.host, h.slots)).collect();
    assert_eq!(
        got,
        vec![("n1".into(), 2), ("n2".into(), 2), ("n3".into(), 1)]
    );
    let e = Allocation::from_env(env(&[
        ("SLURM_JOB_ID", "42"),
        ("SLURM_JOB_NODELIST", "n[1-3]"),
        ("SLURM_TASKS_PER_NODE", "2"),
    ]))
    .unwrap_err();
    assert_eq!(
        e,
        SlurmError::Counts {
            hosts: 3,
            counts: 1
        }
    );
    let e = Allocation::from_env(env(&[("SLURM_JOB_ID", "42")])).unwrap_err();
    assert!(e.to_string().contains("SLURM_JOB_NODELIST"), "{e}");
}

#[test]
fn gpus_make_the_slots_of_one_task_nodes_and_cpus_per_task_are_kept() {
    let vars = |extra: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            [
                ("SLURM_JOB_ID", "9"),
                ("SLURM_JOB_NODELIST", "g[1-2]"),
                ("SLURM_TASKS_PER_NODE", "1(x2)"),
            ]
            .iter()
            .chain(extra)
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
        }
    };
    let slots = |a: Allocation| a.hosts.iter().map(|h| h.slots).collect::<Vec<_>>();
    let plain = Allocation::from_env(vars(&[])).unwrap().unwrap();
    assert_eq!(
        (plain.nodelist.as_str(), plain.gpus_per_node),
        ("g[1-2]", None)
    );
    assert_eq!(slots(plain), [1, 1]);
    let gpus = Allocation::from_env(vars(&[("SLURM_GPUS_PER_NODE", "h200:8")]))
        .unwrap()
        .unwrap();
    assert_eq!(gpus.gpus_per_node, Some(8));
    assert_eq!(slots(gpus), [8, 8]);
    let on_node = Allocation::from_env(vars(&[
        ("SLURM_GPUS_ON_NODE", "4"),
        ("SLURM_GPUS_PER_NODE", "8"),
        ("SLURM_CPUS_PER_TASK", "6"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(
        (on_node.gpus_per_node, on_node.cpus_per_task),
        (Some(4), Some(6))
    );
    // Several tasks on a node: the tasks are the workers.
    assert_eq!(workers_per_node(&[2, 1], Some(8)), [2, 1]);
    assert_eq!(workers_per_node(&[1, 1], Some(8)), [8, 8]);
    let junk = Allocation::from_env(vars(&[
        ("SLURM_GPUS_PER_NODE", "lots"),
        ("SLURM_CPUS_PER_TASK", "0"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!((junk.gpus_per_node, junk.cpus_per_task), (None, None));
}

#[test]
fn nodes_slurm_holds_unusable_are_left_out() {
    for good in [
        "idle", "alloc", "mix", "comp", "resv", "mix@", "alloc$", "plnd",
    ] {
        assert!(node_usable(good), "{good}");
    }
    for bad in [
        "down", "down*", "drain", "drng", "drain$", "fail", "failg", "maint", "unk*", "idle*",
        "idle~", "mix%", "futr", "no_resp", "DOWN",
    ] {
        assert!(!node_usable(bad), "{bad}");
    }
    let hosts: Vec<HostSlots> = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|h| HostSlots {
            host: (*h).into(),
            slots: 2,
        })
        .collect();
    let sinfo = "n1 mix\nn2 drng\nn2 mix\nn3 idle*\nother down\n\ngarbage\n";
    let names: Vec<String> = usable(&hosts, sinfo).into_iter().map(|h| h.host).collect();
    // n2 is draining in one partition; n4 is not listed (kept).
    assert_eq!(names, ["n1", "n4"]);
}

#[test]
fn any_sinfo_output_keeps_a_subset_of_the_hosts_in_order() {
    testkit::check("sinfo output", ".{0,300}", |text| {
        let hosts: Vec<HostSlots> = ["a", "b", "c"]
            .iter()
            .map(|h| HostSlots {
                host: (*h).into(),
                slots: 1,
            })
            .collect();
        let kept = usable(&hosts, &text);
        let mut rest = hosts.iter();
        for k in &kept {
            prop_assert!(rest.any(|h| h == k), "{:?}", kept);
        }
        Ok(())
    });
}

/// One bracket group: (lower bound, count, padding width) for each range.
type Group = Vec<(u64, u64, usize)>;
/// An entry: prefix, groups, suffix.
type Entry = (String, Vec<Group>, String);

fn ranges() -> impl Strategy<Value = Group> {
    proptest::collection::vec((0u64..200, 1u64..5, 1usize..4), 1..3)
}

fn entries() -> impl Strategy<Value = Vec<Entry>> {
    let entry = (
        "[a-z][a-z0-9-]{0,5}",
        proptest::collection::vec(ranges(), 0..3),
        "[a-z.]{0,3}",
    );
    proptest::collection::vec(entry, 1..4)
}

/// The text of a list, and the hosts it names, built side by side.
fn written(list: &[Entry]) -> (String, Vec<String>) {
    let mut text = Vec::new();
    let mut hosts = Vec::new();
    for (prefix, groups, suffix) in list {
        let mut t = prefix.clone();
        let mut names = vec![prefix.clone()];
        for (i, g) in groups.iter().enumerate() {
            let parts: Vec<String> = g
                .iter()
                .map(|&(lo, n, w)| format!("{lo:0w$}-{:0w$}", lo + n - 1))
                .collect();
            t.push_str(&format!("[{}]", parts.join(",")));
            let numbers: Vec<String> = g
                .iter()
                .flat_map(|&(lo, n, w)| (lo..lo + n).map(move |x| format!("{x:0w$}")))
                .collect();
            // Text between groups: a dash, so names stay readable.
            let sep = if i + 1 < groups.len() { "-" } else { "" };
            if !sep.is_empty() {
                t.push_str(sep);
            }
            names = names
                .iter()
                .flat_map(|n| numbers.iter().map(move |x| format!("{n}{x}{sep}")))
                .collect();
        }
        t.push_str(suffix);
        hosts.extend(names.into_iter().map(|n| n + suffix));
        text.push(t);
    }
    (text.join(","), hosts)
}

#[test]
fn every_written_list_expands_to_the_hosts_it_was_written_from() {
    testkit::check("slurm host lists", entries(), |list| {
        let (text, hosts) = written(&list);
        prop_assert_eq!(
            expand(&text).map_err(|e| e.to_string()),
            Ok(hosts),
            "{}",
            text
        );
        Ok(())
    });
}

#[test]
fn any_text_is_expanded_or_refused_without_a_panic() {
    let corpus = vec![
        "node[01-04,07],gpu-a[1-2]".to_owned(),
        "r[1-2]-c[0-1].x".to_owned(),
    ];
    testkit::check(
        "slurm host list text",
        testkit::text(corpus, "ab01-9[],- "),
        |t| {
            if let Ok(hosts) = expand(&t) {
                prop_assert!(hosts.len() <= MAX_HOSTS);
            }
            let _ = tasks_per_node(&t);
            Ok(())
        },
    );
}
