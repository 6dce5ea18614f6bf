//! The etcd client's gRPC code (third_party/etcd-client/src/rpc/pb/) is kept
//! in the repository so that building needs no `protoc`. This test makes it
//! anew from etcd's protocol files (third_party/etcd-client/proto/) with a
//! protobuf compiler written in Rust and the generator etcd-client's own
//! build used, and fails if the kept files differ.
//!
//! To regenerate after changing the protocol files or the generator:
//! `ELASTICRUN_REGENERATE_ETCD_CODE=1 cargo test -p etcdjob --test protocol_code`.

use std::fs;
use std::path::{Path, PathBuf};

/// The files etcd-client's build compiled (its build.rs, 0.21.1).
const PROTOS: [&str; 5] = [
    "etcd/api/authpb/auth.proto",
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
    "etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
];

/// The generated files, one per protobuf package.
const GENERATED: [&str; 5] = [
    "authpb.rs",
    "etcdserverpb.rs",
    "mvccpb.rs",
    "v3electionpb.rs",
    "v3lockpb.rs",
];

fn crate_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../third_party/etcd-client")
}

/// Generates the code into `out`, as etcd-client's build script did (client
/// only), from a descriptor set protox compiled instead of protoc. Imported
/// files that are not among [`PROTOS`] (Google's HTTP and OpenAPI
/// annotations) are left out: nothing includes their code.
fn generate(out: &Path) {
    let proto_root = crate_dir().join("proto");
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| proto_root.join(p)).collect();
    let fail = |e: protox::Error| -> ! { panic!("compiling {}: {e:?}", proto_root.display()) };
    let mut compiler = protox::Compiler::new([&proto_root]).unwrap_or_else(|e| fail(e));
    compiler.include_imports(false).include_source_info(true);
    compiler.open_files(&files).unwrap_or_else(|e| fail(e));
    let descriptors = compiler.file_descriptor_set();
    tonic_prost_build::configure()
        // What `compile_protos` (the published build's path) adds and
        // `compile_fds` does not: the kept code is then byte for byte what
        // etcd-client's own build makes with protoc.
        .type_attribute(".", "#[allow(clippy::all)]")
        .build_server(false)
        .emit_rerun_if_changed(false)
        .out_dir(out)
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("generating into {}: {e}", out.display()));
}

#[test]
fn the_kept_grpc_code_is_what_the_protocol_files_generate() {
    let kept = crate_dir().join("src/rpc/pb");
    let fresh = std::env::temp_dir().join(format!("etcd-pb-{}", std::process::id()));
    fs::create_dir_all(&fresh).expect("a temporary folder");
    generate(&fresh);
    let regenerate = std::env::var_os("ELASTICRUN_REGENERATE_ETCD_CODE").is_some();
    let mut stale = Vec::new();
    for name in GENERATED {
        let made = fs::read_to_string(fresh.join(name))
            .unwrap_or_else(|e| panic!("the generator made no {name}: {e}"));
        let path = kept.join(name);
        if regenerate {
            fs::write(&path, &made).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        } else if fs::read_to_string(&path).ok().as_deref() != Some(made.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    let extra: Vec<String> = fs::read_dir(&fresh)
        .expect("the temporary folder")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| !GENERATED.contains(&n.as_str()))
        .collect();
    fs::remove_dir_all(&fresh).ok();
    assert!(
        extra.is_empty(),
        "the generator made files nobody includes: {extra:?}"
    );
    assert!(
        stale.is_empty(),
        "the kept gRPC code is not what proto/ generates: {stale:?}; regenerate it with \
         ELASTICRUN_REGENERATE_ETCD_CODE=1 cargo test -p etcdjob --test protocol_code"
    );
}
