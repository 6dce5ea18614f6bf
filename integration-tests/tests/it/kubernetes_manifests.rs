//! The manifests users apply (`deploy/kubernetes/`), checked offline against
//! the Kubernetes API schema with `kubernetes-validate --strict` (PyPI; no
//! cluster needed), and for the wiring elasticrun relies on.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::needs::{Need, on_path};

/// The YAML files of `deploy/` folder `dir`, sorted.
fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

fn manifests() -> Vec<PathBuf> {
    let files = yaml_files("kubernetes");
    assert!(files.len() >= 4, "{files:?}");
    files
}

/// Runs `cmd`: whether it exited 0, and all it printed.
fn said(mut cmd: Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn validate(file: &Path) -> (bool, String) {
    let mut cmd = Command::new("kubernetes-validate");
    cmd.arg("--strict").arg(file);
    let (ok, text) = said(cmd);
    (ok && !text.contains("failed"), text)
}

#[test]
fn every_manifest_passes_the_kubernetes_schema_strictly() {
    if on_path("kubernetes-validate").is_none() {
        Need::KubernetesValidate
            .unavailable("no kubernetes-validate on PATH (pip install kubernetes-validate)");
        return;
    }
    for file in manifests() {
        let (ok, text) = validate(&file);
        assert!(ok, "{}:\n{text}", file.display());
        assert!(text.contains("passed"), "{}:\n{text}", file.display());
    }
    // The validator does reject what the schema does not allow.
    let bad = std::env::temp_dir().join(format!("elasticrun-bad-{}.yaml", std::process::id()));
    let text = std::fs::read_to_string(&manifests()[0]).unwrap_or_default();
    std::fs::write(&bad, text.replacen("spec:", "spec:\n  replicaz: 2", 1))
        .unwrap_or_else(|e| panic!("{e}"));
    let (ok, said) = validate(&bad);
    let _ = std::fs::remove_file(&bad);
    assert!(!ok, "an unknown field passed:\n{said}");
}

#[test]
fn workers_get_the_environment_worker_init_reads() {
    for file in manifests().iter().filter(|f| {
        f.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("workers"))
    }) {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for needed in [
            "name: ELASTICRUN_ETCD",
            "name: ELASTICRUN_JOB",
            "name: ELASTICRUN_SECRET_FILE",
            "value: /etc/elasticrun/secret",
            "mountPath: /etc/elasticrun",
            "name: NODE_NAME",
            "fieldPath: spec.nodeName",
            "name: POD_UID",
            "fieldPath: metadata.uid",
            "name: POD_IP",
            "fieldPath: status.podIP",
            "terminationGracePeriodSeconds",
        ] {
            assert!(text.contains(needed), "{} lacks {needed}", file.display());
        }
        assert!(
            !text.contains("ELASTICRUN_SECRET\n"),
            "the secret itself must not be in the environment"
        );
    }
}

/// Kubeflow Trainer's manifests (`deploy/kubernetes/trainer/`), checked
/// strictly against the Trainer and JobSet CRDs they are written for
/// (`integration-tests/crds/`, versions in its README): unknown fields and
/// wrong types are refused.
fn validate_crds(files: &[PathBuf]) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new("python3");
    cmd.arg(root.join("crds/validate.py"))
        .arg(root.join("crds"))
        .args(files);
    let (ok, text) = said(cmd);
    if text.contains("No module named") {
        Need::KubernetesValidate.unavailable(&format!(
            "validate.py needs PyYAML and jsonschema (kubernetes-validate brings both): {text}"
        ));
    }
    (ok, text)
}

fn trainer_manifests() -> Vec<PathBuf> {
    let files = yaml_files("kubernetes/trainer");
    assert_eq!(files.len(), 2, "{files:?}");
    files
}

#[test]
fn trainer_manifests_pass_the_trainer_and_jobset_schemas_strictly() {
    let files = trainer_manifests();
    let (ok, text) = validate_crds(&files);
    assert!(ok, "{text}");
    for kind in ["ClusterTrainingRuntime/elasticrun", "TrainJob/mnist"] {
        let passed = |l: &str| l.starts_with("PASS ") && l.ends_with(kind);
        assert!(text.lines().any(passed), "{kind} did not pass:\n{text}");
    }
    // The check refuses what the schema does not allow: a field the
    // runtime API no longer has, and a misspelt container field.
    let runtime = std::fs::read_to_string(&files[0]).unwrap_or_default();
    for (from, to, says) in [
        (
            "    torch: {}",
            "    torch:\n      numProcPerNode: 2",
            "numProcPerNode",
        ),
        (
            "name: node\n",
            "name: node\n                      imagePullPolicyy: Always\n",
            "imagePullPolicyy",
        ),
    ] {
        let bad =
            std::env::temp_dir().join(format!("elasticrun-trainer-{}.yaml", std::process::id()));
        std::fs::write(&bad, runtime.replacen(from, to, 1)).unwrap_or_else(|e| panic!("{e}"));
        let (ok, said) = validate_crds(std::slice::from_ref(&bad));
        let _ = std::fs::remove_file(&bad);
        assert!(!ok && said.contains(says), "{says} passed:\n{said}");
    }
}

/// The runtime's node container is where Trainer's torch plugin puts the
/// PET_* variables (the container named `node` of the replicated job
/// labelled as the trainer), runs elasticrun, and gets what a pod in etcd
/// mode reads.
#[test]
fn the_trainer_runtime_runs_elasticrun_where_torchrun_would_stand() {
    let files = trainer_manifests();
    let runtime = std::fs::read_to_string(&files[0]).unwrap_or_default();
    for needed in [
        "kind: ClusterTrainingRuntime",
        "trainer.kubeflow.org/trainjob-ancestor-step: trainer",
        "- name: node\n          replicas: 1",
        "containers:\n                    - name: node",
        "command: [\"elasticrun\"]",
        "completionMode: Indexed",
        "restartPolicy: OnFailure",
        "name: ELASTICRUN_ETCD",
        "name: ELASTICRUN_JOB",
        "fieldPath: metadata.labels['jobset.sigs.k8s.io/jobset-name']",
        "name: ELASTICRUN_SECRET_FILE",
        "value: /etc/elasticrun/secret",
        "mountPath: /etc/elasticrun",
        "fieldPath: spec.nodeName",
        "fieldPath: metadata.uid",
        "fieldPath: status.podIP",
        "terminationGracePeriodSeconds",
        "targetReplicatedJobs:\n          - node",
    ] {
        assert!(runtime.contains(needed), "the runtime lacks {needed}");
    }
    // Trainer refuses a TrainJob that sets the variables it gives.
    let trainjob = std::fs::read_to_string(&files[1]).unwrap_or_default();
    assert!(trainjob.contains("name: elasticrun") && !trainjob.contains("name: PET_"));
}
