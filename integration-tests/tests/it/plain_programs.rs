//! Programs that do not link elasticrun's runtime, under `elasticrun -np N`:
//! each worker gets torchrun's and Horovod's variables, the job is not ended
//! at the start timeout when no worker registers, and the processes are
//! supervised like any others. The program here does what torch.distributed's
//! `env://` rendezvous does (rank 0 serves at `MASTER_ADDR:MASTER_PORT`, the
//! others connect and say their rank), with Python's standard library only.

use std::collections::BTreeSet;
use std::time::Duration;

use integration_tests::{assert_all_gone, descendants, launch, wait_for};

/// Sleeps `argv[1]` seconds (past the start timeout), then meets the other
/// ranks through rank 0's port and prints one JSON line.
const RENDEZVOUS: &str = r#"
import json, os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
time.sleep(float(sys.argv[1]))
if rank == 0:
    srv = socket.create_server((addr, port))
    srv.settimeout(30)
    peers = []
    for _ in range(world - 1):
        c, _ = srv.accept()
        peers.append(int(c.recv(16).decode()))
        c.close()
    print(json.dumps({"rank": 0, "peers": sorted(peers)}), flush=True)
else:
    deadline = time.time() + 30
    while True:
        try:
            s = socket.create_connection((addr, port), timeout=1)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    s.sendall(str(rank).encode())
    s.close()
    env = {k: int(os.environ[k]) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "HOROVOD_RANK", "HOROVOD_SIZE")}
    print(json.dumps({"rank": rank, **env}), flush=True)
"#;

#[test]
fn a_program_without_the_runtime_gets_torchruns_environment_and_outlives_the_start_timeout() {
    let run = launch(&[
        "-np",
        "3",
        "--start-timeout",
        "1",
        "python3",
        "-c",
        RENDEZVOUS,
        "2",
    ])
    .finish(Duration::from_secs(60));
    run.expect_code(0);
    assert!(
        run.stdout
            .contains(r#"[0]<stdout>:{"rank": 0, "peers": [1, 2]}"#),
        "{}",
        run.stdout
    );
    for r in 1..3 {
        let line = format!(
            r#"[{r}]<stdout>:{{"rank": {r}, "LOCAL_RANK": {r}, "LOCAL_WORLD_SIZE": 3, "GROUP_RANK": 0, "HOROVOD_RANK": {r}, "HOROVOD_SIZE": 3}}"#
        );
        assert!(run.stdout.contains(&line), "{line}\nnot in\n{}", run.stdout);
    }
    assert!(
        run.stderr
            .contains("no worker registered within 1s (--start-timeout)"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_failing_rank_of_such_a_program_ends_the_job_and_nothing_is_left() {
    let script = r#"if [ "$RANK" = 1 ]; then sleep 2; exit 3; fi; exec sleep 600"#;
    let job = launch(&["-np", "2", "--start-timeout", "1", "sh", "-c", script]);
    // Both workers run before rank 1 fails.
    let all: BTreeSet<i32> = wait_for("both workers", Duration::from_secs(30), || {
        let d = descendants(job.pid());
        (d.len() >= 2).then_some(d)
    });
    let run = job.finish(Duration::from_secs(60));
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("rank 1 on localhost exited with code 3"),
        "{}",
        run.stderr
    );
    assert_all_gone(&all, Duration::from_secs(10));
}

/// Allocates 24 blocks of 1 MiB, writes them and frees them, six times;
/// prints `GLIBC_TUNABLES` and the page faults of the last four rounds.
const ALLOCATOR: &str = r#"
import ctypes, json, os, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def step():
    blocks = [libc.malloc(1 << 20) for _ in range(24)]
    assert all(blocks)
    for b in blocks:
        ctypes.memset(b, 1, 1 << 20)
    for b in reversed(blocks):
        libc.free(b)
step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"tunables": os.environ.get("GLIBC_TUNABLES"), "faults": faults}), flush=True)
"#;

/// The JSON line the rank 0 worker of `elasticrun -np 1 python3 -c
/// PROGRAM` printed, with elasticrun's own `GLIBC_TUNABLES` as given.
fn rank0_report(program: &str, tunables: Option<&str>) -> serde_json::Value {
    let mut cmd = std::process::Command::new(integration_tests::elasticrun());
    cmd.args(["-np", "1", "--start-timeout", "1", "python3", "-c", program]);
    match tunables {
        Some(v) => cmd.env("GLIBC_TUNABLES", v),
        None => cmd.env_remove("GLIBC_TUNABLES"),
    };
    let run = integration_tests::start(cmd).finish(Duration::from_secs(60));
    run.expect_code(0);
    let line = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("[0]<stdout>:"))
        .unwrap_or_else(|| panic!("no report in\n{}", run.stdout));
    serde_json::from_str(line).unwrap()
}

/// [`ALLOCATOR`]'s report.
fn allocator_report(tunables: Option<&str>) -> serde_json::Value {
    rank0_report(ALLOCATOR, tunables)
}

#[test]
fn workers_keep_freed_memory_mapped_unless_the_user_set_glibcs_tunables() {
    let tuned = allocator_report(None);
    assert_eq!(
        tuned["tunables"],
        "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864"
    );
    // 4 rounds of 24 MiB would be 24,576 faults if the memory went back to
    // the kernel after each.
    let faults = tuned["faults"].as_u64().unwrap();
    assert!(
        faults < 2_000,
        "{faults} page faults with the thresholds set"
    );
    // An empty value is the user's choice of glibc's defaults: it reaches
    // the worker as it is, and the memory is given back and faulted in again.
    let plain = allocator_report(Some(""));
    assert_eq!(plain["tunables"], "");
    let faults = plain["faults"].as_u64().unwrap();
    assert!(
        faults > 20_000,
        "{faults} page faults with glibc's defaults: the test no longer tells the two apart"
    );
    // The user's own allocator settings are kept as they are.
    let own = allocator_report(Some("glibc.malloc.arena_max=2"));
    assert_eq!(own["tunables"], "glibc.malloc.arena_max=2");
}

/// A worker that exits 0 leaving a child that holds its output open and
/// prints forever (a logger, a `nohup`, an unjoined subprocess): the job
/// still ends, with the worker's status, once the output has been drained
/// for a bounded time, and the child is stopped with it. (elasticrun used
/// to forward that output, and ignore signals, for as long as the child
/// lived.)
#[test]
fn a_job_ends_though_a_worker_left_a_child_printing_into_its_output() {
    let pidfile =
        std::env::temp_dir().join(format!("elasticrun-left-child-{}.pid", std::process::id()));
    let _ = std::fs::remove_file(&pidfile);
    let script = format!(
        "(while :; do echo tick; sleep 0.05; done) & echo $! > {}; echo started",
        pidfile.display()
    );
    let run = launch(&["-np", "1", "sh", "-c", &script]).finish(Duration::from_secs(60));
    run.expect_code(0);
    assert!(run.stdout.contains("[0]<stdout>:started"), "{}", run.stdout);
    assert!(run.stdout.contains("[0]<stdout>:tick"), "{}", run.stdout);
    let child: i32 = std::fs::read_to_string(&pidfile)
        .expect("the worker wrote its child's pid")
        .trim()
        .parse()
        .expect("a pid");
    let _ = std::fs::remove_file(&pidfile);
    assert_all_gone(&BTreeSet::from([child]), Duration::from_secs(10));
}

/// Prints, as one JSON line, the worker's `GLIBC_TUNABLES` and whether it
/// sees elasticrun's saved copy, and its parent's (elasticrun's) name and
/// the `GLIBC_TUNABLES` it was started with (as glibc's loader left it: it
/// ends each tunable it reads in place).
const PARENT: &str = r#"
import json, os
parent = os.getppid()
start_env = open(f"/proc/{parent}/environ", "rb").read().split(b"\0")
tunables = [e.decode() for e in start_env if e.startswith(b"GLIBC_TUNABLES=")]
print(json.dumps({
    "tunables": os.environ.get("GLIBC_TUNABLES"),
    "saved_seen": "ELASTICRUN_USER_GLIBC_TUNABLES" in os.environ,
    "parent": open(f"/proc/{parent}/comm").read().strip(),
    "parent_started_with": tunables,
}), flush=True)
"#;

/// [`PARENT`]'s report, which must come from a worker of `elasticrun`
/// that does not see the saved copy.
fn parent_report(tunables: Option<&str>) -> serde_json::Value {
    let report = rank0_report(PARENT, tunables);
    assert_eq!(report["parent"], "elasticrun", "{report}");
    assert_eq!(report["saved_seen"], false, "{report}");
    report
}

/// elasticrun runs itself with its own allocator settings (no per-thread
/// cache of freed blocks, a fixed mmap threshold: its memory creeps less
/// over a long job), and its workers still get the `GLIBC_TUNABLES` the
/// user gave it, or none.
#[test]
fn the_coordinators_allocator_is_its_own_and_workers_get_the_users_tunables() {
    let plain = parent_report(None);
    assert_eq!(plain["tunables"], control::alloc_env::MALLOC_TUNABLES);
    // glibc's loader (2.41 here) ends the first tunable it reads in place,
    // so the start environment may show only the first of ours.
    let started_with_ours = |report: &serde_json::Value| {
        let started = report["parent_started_with"][0].as_str().unwrap_or("");
        let value = started.strip_prefix("GLIBC_TUNABLES=").unwrap_or("");
        let ours = coordinator::malloc::OURS;
        value.starts_with("glibc.malloc.tcache_count=0")
            && (ours.starts_with(value) || value.starts_with(ours))
    };
    assert!(started_with_ours(&plain), "{plain}");

    let other = "glibc.rtld.optional_static_tls=2048";
    let kept = parent_report(Some(other));
    let worker = format!("{other}:{}", control::alloc_env::MALLOC_TUNABLES);
    assert_eq!(kept["tunables"], worker.as_str());
    assert!(started_with_ours(&kept), "{kept}");

    // An empty value (glibc's defaults for the workers) reaches them as it is.
    assert_eq!(parent_report(Some(""))["tunables"], "");

    // A user who sets glibc's allocator sets the coordinator's too.
    let own = parent_report(Some("glibc.malloc.tcache_count=7"));
    assert_eq!(own["tunables"], "glibc.malloc.tcache_count=7");
    assert_eq!(
        own["parent_started_with"][0],
        "GLIBC_TUNABLES=glibc.malloc.tcache_count=7"
    );
}
