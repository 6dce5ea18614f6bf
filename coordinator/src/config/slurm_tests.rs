//! Tests of running inside a Slurm allocation: detected from its variables,
//! forced, or turned off.

use elastic::hosts::HostSlots;

use super::tests::{invalid_option, run};
use super::*;

const ALLOC: &[(&str, &str)] = &[
    ("SLURM_JOB_ID", "7"),
    ("SLURM_JOB_NODELIST", "n[1-2]"),
    ("SLURM_TASKS_PER_NODE", "2(x2)"),
];

fn job_id(c: &JobConfig) -> Option<&str> {
    c.slurm.as_ref().map(|a| a.job_id.as_str())
}

fn hosts(c: &JobConfig) -> Vec<HostSlots> {
    match &c.hosts {
        HostSpec::List(h) => h.clone(),
        other => panic!("no host list: {other:?}"),
    }
}

#[test]
fn an_allocation_gives_the_hosts_when_none_are_given() {
    let c = run("./t", ALLOC, "").unwrap();
    assert_eq!(job_id(&c), Some("7"));
    let names: Vec<(String, usize)> = hosts(&c).into_iter().map(|h| (h.host, h.slots)).collect();
    assert_eq!(names, vec![("n1".into(), 2), ("n2".into(), 2)]);
    // -np picks fewer of its slots.
    assert_eq!(run("-np 3 ./t", ALLOC, "").unwrap().np, Some(3));
    // Hosts given, or --no-slurm: no Slurm.
    let c = run("-H a:2 ./t", ALLOC, "").unwrap();
    assert_eq!((job_id(&c), hosts(&c).len()), (None, 1));
    let c = run("--no-slurm -np 2 ./t", ALLOC, "").unwrap();
    assert_eq!((c.slurm, c.hosts), (None, HostSpec::Localhost));
    // Outside an allocation nothing changes.
    assert_eq!(run("-np 2 ./t", &[], "").unwrap().slurm, None);
}

#[test]
fn forced_slurm_needs_an_allocation_and_bad_variables_are_named() {
    let (option, why) = invalid_option(run("--slurm -np 2 ./t", &[], ""));
    assert_eq!(option, "slurm");
    assert!(why.contains("SLURM_JOB_ID is not set"), "{why}");
    // --slurm with hosts given: srun on those hosts.
    let c = run("--slurm -H n1:1 ./t", ALLOC, "").unwrap();
    assert_eq!(job_id(&c), Some("7"));
    let bad = [("SLURM_JOB_ID", "7"), ("SLURM_JOB_NODELIST", "n[1-")];
    let (option, why) = invalid_option(run("./t", &bad, ""));
    assert_eq!(option, "slurm");
    assert!(why.contains("n[1-"), "{why}");
}

#[test]
fn an_elastic_job_inside_an_allocation_finds_its_nodes_or_its_script_through_srun() {
    // --min-np/--max-np and no hosts: the allocation is the discovery.
    let c = run("--min-np 2 --max-np 3 ./t", ALLOC, "").unwrap();
    assert_eq!(job_id(&c), Some("7"));
    let e = c.elastic.as_ref().expect("an elastic job");
    let Some(HostDiscovery::Allocation(a)) = &e.discovery else {
        panic!("not the allocation: {:?}", e.discovery);
    };
    assert_eq!((a.nodelist.as_str(), a.hosts.len()), ("n[1-2]", 2));
    assert_eq!((e.min_np, e.max_np), (2, Some(3)));
    // Without --min-np or --max-np: a static job on every slot.
    let c = run("./t", ALLOC, "").unwrap();
    assert!(c.elastic.is_none());
    // Outside an allocation --min-np alone is refused as before.
    let (option, _) = invalid_option(run("--min-np 2 ./t", &[], ""));
    assert_eq!(option, "min-np");
    // A script is hosts given: not Slurm unless forced, then through srun.
    let c = run("--host-discovery-script d --min-np 2 ./t", ALLOC, "").unwrap();
    assert_eq!(job_id(&c), None);
    let c = run(
        "--slurm --host-discovery-script d --min-np 2 ./t",
        ALLOC,
        "",
    )
    .unwrap();
    assert_eq!(job_id(&c), Some("7"));
    let e = c.elastic.expect("an elastic job");
    assert_eq!(e.discovery, Some(HostDiscovery::Script("d".into())));
    // --no-slurm: an allocation's variables change nothing.
    let (option, _) = invalid_option(run("--no-slurm --min-np 2 ./t", ALLOC, ""));
    assert_eq!(option, "min-np");
}
