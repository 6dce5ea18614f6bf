//! The workspace's `unsafe` policy (docs/architecture.md), checked over the
//! source tree: `unsafe_code` is denied by the workspace lints, and the only
//! place a crate may allow it is the declaration of its one `sys` module
//! (`#[allow(unsafe_code)]` on the line before `mod sys;`). clippy's
//! `undocumented_unsafe_blocks` checks the `// SAFETY:` comments inside.

use std::path::{Path, PathBuf};

/// Every `.rs` file of the workspace, less build output and the crates kept
/// in `third_party/` (not members: their own code, third_party/README.md).
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !matches!(name, "target" | ".git" | "third_party") {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Where `text` allows unsafe code other than on a `mod sys;` declaration,
/// as `line: text`.
fn violations(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let allows = line.contains("unsafe_code")
            && (line.contains("allow(") || line.contains("expect(") || line.contains("warn("));
        if !allows || line.trim_start().starts_with("//") {
            continue;
        }
        let next = lines.get(i + 1).map_or("", |l| l.trim());
        let on_sys = line.trim() == "#[allow(unsafe_code)]"
            && matches!(next, "mod sys;" | "pub(crate) mod sys;");
        if !on_sys {
            out.push(format!("{}: {}", i + 1, line.trim()));
        }
    }
    out
}

#[test]
fn unsafe_code_is_allowed_only_on_a_sys_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let mut files = Vec::new();
    sources(root, &mut files);
    assert!(
        files.len() > 50,
        "found only {} sources under {}",
        files.len(),
        root.display()
    );
    let this = Path::new(file!()).file_name().expect("file name");
    let bad: Vec<String> = files
        .iter()
        .filter(|f| f.file_name() != Some(this))
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            violations(&text)
                .into_iter()
                .map(move |v| format!("{}:{v}", f.display()))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "unsafe code allowed outside a `sys` module:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_finds_what_it_must() {
    assert!(violations("#[allow(unsafe_code)]\nmod sys;\n").is_empty());
    assert!(violations("// #[allow(unsafe_code)] in a comment\nfn f() {}\n").is_empty());
    assert_eq!(violations("#![allow(unsafe_code)]\n").len(), 1);
    assert_eq!(violations("#[allow(unsafe_code)]\nmod mmap;\n").len(), 1);
    assert_eq!(violations("#[allow(unsafe_code)]\nfn poke() {}\n").len(), 1);
    assert_eq!(
        violations("#[allow(clippy::x, unsafe_code)]\nmod sys;\n").len(),
        1
    );
}
