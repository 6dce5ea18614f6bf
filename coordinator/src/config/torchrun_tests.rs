//! Tests of torchrun's `PET_*` variables as the defaults of the options
//! they match.

use super::file::parse;
use super::tests::{cli, elastic, env, invalid_option, run};
use super::*;

/// `elasticrun serve` (or a pod's elasticrun in etcd mode) with `args`.
fn etcd_mode(args: &str, vars: &[(&str, &str)]) -> Result<JobConfig, ConfigError> {
    let mut c = cli(args);
    c.serve = true;
    resolve(&c, &env(vars), &parse("").unwrap())
}

const TRAINER: [(&str, &str); 5] = [
    ("PET_NNODES", "3"),
    ("PET_NPROC_PER_NODE", "2"),
    ("PET_NODE_RANK", "1"),
    ("PET_MASTER_ADDR", "mnist-node-0-0.mnist"),
    ("PET_MASTER_PORT", "29400"),
];

#[test]
fn a_trainer_node_in_etcd_mode_sizes_the_job_from_its_nodes() {
    let c = etcd_mode("./t", &TRAINER).unwrap();
    assert_eq!(c.np, Some(6));
    assert_eq!(c.nproc_per_node, 2);
    let e = elastic(&c);
    assert_eq!((e.min_np, e.max_np, e.initial_np), (6, Some(6), 6));
    let t = c.torchrun.as_ref().unwrap();
    assert_eq!((t.node_rank, t.master_port), (Some(1), Some(29400)));
    // A range of nodes bounds the job; -np is the most.
    let c = etcd_mode("./t", &[("PET_NNODES", "1:4"), ("PET_NPROC_PER_NODE", "2")]).unwrap();
    assert_eq!(c.np, Some(8));
    assert_eq!((elastic(&c).min_np, elastic(&c).max_np), (2, Some(8)));
}

#[test]
fn what_the_user_says_wins_over_torchruns_variables() {
    let c = etcd_mode("-np 2 --min-np 1 --nproc-per-node 1 ./t", &TRAINER).unwrap();
    assert_eq!((c.np, c.nproc_per_node), (Some(2), 1));
    assert_eq!((elastic(&c).min_np, elastic(&c).max_np), (1, Some(3)));
    let mut vars = TRAINER.to_vec();
    vars.push(("ELASTICRUN_NPROC_PER_NODE", "4"));
    let c = etcd_mode("./t", &vars).unwrap();
    assert_eq!((c.np, c.nproc_per_node), (Some(12), 4));
}

#[test]
fn on_one_machine_the_workers_per_node_are_the_job() {
    let c = run(
        "./t",
        &[("PET_NNODES", "1"), ("PET_NPROC_PER_NODE", "3")],
        "",
    )
    .unwrap();
    assert_eq!((c.np, c.elastic.is_none()), (Some(3), true));
    let c = run("--nproc-per-node 4 ./t", &[], "").unwrap();
    assert_eq!(c.np, Some(4));
    let c = run("-np 2 --nproc-per-node 4 ./t", &[], "").unwrap();
    assert_eq!(c.np, Some(2), "-np given wins");
    assert_eq!(
        run("./t", &[], "").unwrap().np,
        None,
        "nothing set: the slots"
    );
}

#[test]
fn several_nodes_without_etcd_mode_are_refused_saying_how() {
    let (option, why) = invalid_option(run("./t", &TRAINER, ""));
    assert_eq!(option, "np");
    assert!(
        why.contains("PET_NNODES asks for 3 nodes") && why.contains("ELASTICRUN_ETCD"),
        "{why}"
    );
    // With hosts given, the variables are not the job's size.
    let c = run("-H a:2,b:2 ./t", &TRAINER, "").unwrap();
    assert_eq!(c.np, None);
    let (option, why) = invalid_option(run("-H a:2,b:2 --nproc-per-node 2 ./t", &[], ""));
    assert_eq!(option, "nproc-per-node");
    assert!(
        why.contains("slots") && why.contains("on the command line"),
        "{why}"
    );
}

#[test]
fn torchruns_garbage_is_a_clear_error() {
    let e = run("./t", &[("PET_NNODES", "2:1")], "").unwrap_err();
    assert!(
        matches!(&e, ConfigError::Torchrun(t) if t.var == "PET_NNODES"),
        "{e:?}"
    );
    assert!(e.to_string().contains("MIN:MAX"), "{e}");
    let e = run("./t", &[("PET_NPROC_PER_NODE", "many")], "").unwrap_err();
    assert!(e.to_string().contains("auto, cpu or gpu"), "{e}");
    let (option, _) = invalid_option(run("--nproc-per-node 0 ./t", &[], ""));
    assert_eq!(option, "nproc-per-node");
}

#[test]
fn prestart_imports_are_module_names_for_a_python_command() {
    let c = run(
        "--prestart-imports torch,torch.distributed python t.py",
        &[],
        "",
    )
    .unwrap();
    assert_eq!(c.prestart_imports, ["torch", "torch.distributed"]);
    assert!(
        run("python t.py", &[], "")
            .unwrap()
            .prestart_imports
            .is_empty()
    );
    let (option, why) = invalid_option(run("--prestart-imports torch ./train", &[], ""));
    assert_eq!(option, "prestart-imports");
    assert!(
        why.contains("python SCRIPT") && why.contains("on the command line"),
        "{why}"
    );
    let vars = [("ELASTICRUN_PRESTART_IMPORTS", "torch,os;rm")];
    let (_, why) = invalid_option(run("python -m pkg", &vars, ""));
    assert!(why.contains("not a Python module name"), "{why}");
}
