//! The discovery scripts of `discovery-scripts/`, run as elasticrun runs them
//! (`/bin/sh -c`), with a stand-in `kubectl` on `PATH`.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};

use integration_tests::elastic::Scratch;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../discovery-scripts")
        .join(name)
}

fn sh(line: &str, path_first: Option<&PathBuf>) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", line]);
    if let Some(dir) = path_first {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", dir.display()));
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn the_file_script_prints_the_list_and_fails_without_one() {
    let s = Scratch::new("discovery-file");
    let hosts = s.write("hosts.txt", "# cluster\nnode1:4\n\nnode2\n");
    let out = sh(
        &format!(
            "{} {}",
            script("hosts-from-file.sh").display(),
            hosts.display()
        ),
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let parsed = elastic::parse_discovered(&text(&out.stdout), 2).unwrap();
    let shown: Vec<String> = parsed.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["node1:4", "node2:2"]);
    let missing = sh(
        &format!(
            "{} {}/nope",
            script("hosts-from-file.sh").display(),
            s.dir.display()
        ),
        None,
    );
    assert!(!missing.status.success());
    assert!(text(&missing.stderr).contains("cannot read"));
}

#[test]
fn the_kubernetes_script_prints_ready_pods_with_slots() {
    let s = Scratch::new("discovery-k8s");
    let bin = s.dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let kubectl = bin.join("kubectl");
    // Records its arguments, then answers as `kubectl get pods -o jsonpath=...`.
    std::fs::write(
        &kubectl,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}/args\nprintf '10.0.0.5 True\\n10.0.0.6 False\\nfd00::7 True\\n'\n",
            s.dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let k8s = script("kubernetes-pods.sh");
    let out = sh(
        &format!("{} -l app=train -n ml -s 4", k8s.display()),
        Some(&bin),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "10.0.0.5:4\n[fd00::7]:4\n");
    let parsed = elastic::parse_discovered(&text(&out.stdout), 1).unwrap();
    assert_eq!(parsed.len(), 2);
    let args = std::fs::read_to_string(s.dir.join("args")).unwrap();
    assert!(args.contains("app=train") && args.contains("ml"), "{args}");
    assert!(args.contains("status.phase=Running"), "{args}");
    // No selector, bad slots, or a failing kubectl: a failed run.
    assert!(!sh(&k8s.display().to_string(), Some(&bin)).status.success());
    let bad = sh(&format!("{} -l a=b -s 0", k8s.display()), Some(&bin));
    assert!(!bad.status.success());
    std::fs::write(
        &kubectl,
        "#!/bin/sh\necho 'connection refused' >&2\nexit 1\n",
    )
    .unwrap();
    assert!(
        !sh(&format!("{} -l a=b", k8s.display()), Some(&bin))
            .status
            .success()
    );
}
