//! The manifests users apply (`deploy/kubernetes/`), checked offline against
//! the Kubernetes API schema with `kubernetes-validate --strict` (PyPI; no
//! cluster needed), and for the wiring elasticrun relies on.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::needs::{Need, on_path};

fn manifests() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    files
}

fn validate(file: &Path) -> (bool, String) {
    let out = Command::new("kubernetes-validate")
        .arg("--strict")
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run kubernetes-validate: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && !text.contains("failed"), text)
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
