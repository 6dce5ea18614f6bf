#!/usr/bin/env python3
"""Elastic recovery and per-step overhead of torchft beside elasticrun's
torch.distributed backend, on one machine, training the same job: a small MLP
on synthetic blobs, SGD (lr 0.1), a global batch of 64 split over the
participants, DELAY_MS of simulated compute per step, 3 participants.

Arms, interleaved round by round (torchft, elasticrun, elasticrun with the
default replacement wait, then the next round), one at a time:

  torchft      a lighthouse (torchft_lighthouse) and 3 replica groups, each a
               `torchrun --nproc_per_node 1` running scripts/torchft_worker.py
               (torchft.Manager, ProcessGroupGloo, torchft.DistributedDataParallel,
               torchft.Optimizer, PGTransport). Each round starts it fresh,
               times --steps steps with 3 groups, kills -9 one whole replica
               group (its torchrun agent and its worker, which torchrun starts
               in a session of its own), and times recovery: from the kill to
               the survivors' first committed step with 2 participants. Then it
               starts that replica group again and times its heal: from the
               restart to its first committed step with 3 participants (process
               start, quorum, weights fetched from a survivor).
  elasticrun   `elasticrun -np 3 --min-np 2 --max-np 3 --replacement-wait 0
               --host-discovery-script ...` running scripts/torch_elastic_worker.py
               with `ddp` (DistributedDataParallel on the elasticrun backend);
               --replacement-wait 0 lets the survivors go on without waiting
               for the replacement, as torchft's do. Times --steps steps on 3
               ranks (rank 0's lines), kills -9 a random non-zero rank, times
               recovery: from the kill to rank 0's first step in the generation
               started after it; and rejoin: from the kill to rank 0's first
               step on 3 ranks again (the replacement started and admitted).
  elasticrun, default wait
               the same with the default --replacement-wait (0.5 s): the
               survivors wait up to that long for the replacement.
  plain DDP    (per-step baseline only) torch's DistributedDataParallel over
               Gloo, `torchrun --nproc_per_node 3`, no fault tolerance.

Also timed for every kill: "caught up", from the kill to the first step past
the last one completed before it (elasticrun's survivors roll back to their
last commit, every 10 steps; torchft's lose at most the step in flight).

Step times are the median interval between consecutive step lines as they
arrive (torchft: committed steps with 3 participants, from every group;
elasticrun and plain DDP: rank 0's steps on 3 ranks). Prints a summary table,
then one JSON line with every raw figure.

Usage: scripts/bench_torchft.py --python-venv VENV [--kills 3] [--steps 300]
           [--delay-ms 10] [--seed 1] [--no-default-wait] [--no-plain]
           [--heartbeat-timeout-ms 1000] [--join-timeout-ms 1000] [--quorum-tick-ms 100]
           [--gloo-timeout-s 2] [--keep-logs DIR]
  VENV holds torch, torchft (0.2.0) and the elasticrun package
  (pip install torchft==0.2.0, and this project's Python package).
Build first: cargo build --release --bins"""
import argparse
import ctypes
import importlib.util
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ELASTICRUN = os.path.join(ROOT, "target", "release", "elasticrun")
TORCHFT_WORKER = os.path.join(ROOT, "scripts", "torchft_worker.py")
ELASTIC_WORKER = os.path.join(ROOT, "scripts", "torch_elastic_worker.py")
FOREVER = "100000000"  # steps for the workers that run until killed
GROUPS = 3


def _load(name):
    """A sibling script as a module (for its helpers)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Job (a launcher whose output lines are timestamped as they arrive),
# descendants(pid) and comm(pid) (a process's command line).
_recovery = _load("bench_recovery")
Job, descendants, comm = _recovery.Job, _recovery.descendants, _recovery.comm


class BenchError(Exception):
    pass


STARTED = []  # (name, Job) of every process started, for the logs


def start(name, argv, env):
    job = Job(argv, env=env)
    STARTED.append((f"{len(STARTED):02d}-{name}", job))
    return job


def save_logs(folder):
    """Every started job's output (both streams, arrival-timestamped) in folder/NAME.log."""
    os.makedirs(folder, exist_ok=True)
    for name, job in STARTED:
        with job.lock:
            lines = list(job.lines)
        with open(os.path.join(folder, name.replace(" ", "_").replace(",", "") + ".log"), "w") as f:
            f.writelines(f"{at:.6f} {stream} {line}\n" for at, stream, line in lines)


def now():
    return time.time()


def free_port():
    """A loopback TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(jobs, n=25):
    out = []
    for name, job in jobs:
        with job.lock:
            lines = [l[2] for l in job.lines[-n:]]
        rc = job.proc.poll()
        out.append(f"--- {name} ({'running' if rc is None else f'exited {rc}'}), last lines:")
        out += lines
    return "\n".join(out)


def wait_for(what, limit, cond, jobs):
    """cond()'s first value that is not None, polled until `limit` seconds
    have passed; then a BenchError naming `what`, with the jobs' last lines."""
    deadline = now() + limit
    while True:
        value = cond()
        if value is not None:
            return value
        if now() > deadline:
            raise BenchError(f"{what}: not within {limit:.0f} s\n{tail(jobs)}")
        # Times come from the lines' arrival stamps, not from this loop:
        # polling slowly leaves the CPUs to the job.
        time.sleep(0.05)


def events(job, since=0.0):
    """Step lines (JSON) that arrived at or after `since`, each with its
    arrival time as "at"; elasticrun's "[rank]<stdout>:" prefix is dropped."""
    out = []
    for at, stream, line in job.since(since):
        if stream != "out":
            continue
        body = line.split(":", 1)[1] if line.startswith("[") else line
        if '"event": "step"' not in body:
            continue
        try:
            e = json.loads(body)
        except ValueError:
            continue
        e["at"] = at
        out.append(e)
    return out


def intervals(evs):
    """Milliseconds between consecutive steps (step numbers one apart)."""
    return [(b["at"] - a["at"]) * 1000 for a, b in zip(evs, evs[1:]) if b["step"] == a["step"] + 1]


def pgid(pid):
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def kill_tree(job):
    """SIGKILL a job's process group and the process group of every process
    below it (torchrun starts each worker in a session of its own); the time
    of the first signal."""
    pids = descendants(job.proc.pid)
    groups = [job.proc.pid] + sorted({g for g in map(pgid, pids) if g is not None} - {job.proc.pid})
    groups = [g for g in groups if g != os.getpgid(0)]
    t = now()
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        job.proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    return t


def stop(job):
    """SIGTERM first (elasticrun ends its workers itself), then SIGKILL whatever is left."""
    pids = [(p, comm(p)) for p in descendants(job.proc.pid)]
    job.stop()
    for p, cmd in pids:
        if cmd and comm(p) == cmd:  # still there (and not a reused pid)
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def kill_orphans():
    """Every process still below this one (orphans are reparented here, see
    main's PR_SET_CHILD_SUBREAPER): all were started by this benchmark."""
    for _ in range(3):
        pids = descendants(os.getpid())
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass


# ---------------------------------------------------------------- torchft


def torchft_round(args, rng, env):
    python_bin = os.path.join(args.python_venv, "bin")
    port = free_port()
    lighthouse = start("torchft-lighthouse", [
        os.path.join(python_bin, "torchft_lighthouse"), "--bind", f"127.0.0.1:{port}", "--min_replicas", "1",
        "--quorum_tick_ms", str(args.quorum_tick_ms), "--join_timeout_ms", str(args.join_timeout_ms),
        "--heartbeat_timeout_ms", str(args.heartbeat_timeout_ms),
    ], env=env)
    groups = {}
    jobs = lambda: [("lighthouse", lighthouse)] + [(f"replica group {i}", g) for i, g in groups.items()]

    def start_group(i):
        genv = dict(env, REPLICA_GROUP_ID=str(i), NUM_REPLICA_GROUPS=str(GROUPS),
                    TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}")
        return start(f"torchft-group{i}", [
            os.path.join(python_bin, "torchrun"), "--nnodes", "1", "--nproc_per_node", "1",
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--max_restarts", "0",
            TORCHFT_WORKER, FOREVER, str(args.delay_ms),
        ], env=genv)

    def listening():
        with socket.socket() as s:
            s.settimeout(0.5)
            return True if s.connect_ex(("127.0.0.1", port)) == 0 else None

    def full(i, since):
        return [e for e in events(groups[i], since) if e["committed"] and e["world_size"] == GROUPS]

    try:
        wait_for("the torchft lighthouse listening", 60, listening, jobs())
        for i in range(GROUPS):
            groups[i] = start_group(i)
        t0 = now()
        wait_for(f"{args.warmup} committed steps with {GROUPS} participants on every replica group", 180,
                 lambda: True if all(len(full(i, t0)) >= args.warmup for i in groups) else None, jobs())
        t1 = now()
        wait_for(f"{args.steps} more steps with {GROUPS} participants", 60 + args.steps * args.delay_ms / 100,
                 lambda: True if all(len(full(i, t1)) > args.steps for i in groups) else None, jobs())
        steps = [ms for i in groups for ms in intervals(full(i, t1))]
        dts = [e["dt"] * 1000 for i in groups for e in full(i, t1)]

        victim = rng.randrange(GROUPS)
        if not descendants(groups[victim].proc.pid):
            raise BenchError(f"replica group {victim} has no worker process to kill\n{tail(jobs())}")
        survivors = [i for i in groups if i != victim]
        t_kill = kill_tree(groups.pop(victim))

        def recovered():
            first = [e for i in survivors for e in events(groups[i], t_kill)
                     if e["committed"] and e["world_size"] < GROUPS]
            return min(e["at"] for e in first) if first else None

        t_rec = wait_for(f"a committed step with fewer than {GROUPS} participants after killing replica group "
                         f"{victim}", 120, recovered, jobs())
        nexts = [e["at"] for i in survivors for e in events(groups[i], t_kill) if e["committed"]]
        last = max(e["step"] for i in survivors for e in events(groups[i]) if e["at"] < t_kill)
        caught = wait_for(f"the survivors past step {last}", 60, lambda: next(
            (e["at"] for e in events(groups[survivors[0]], t_rec) if e["committed"] and e["step"] > last), None),
            jobs())
        # Heal: the same replica group started again joins the quorum and
        # fetches the weights from a survivor.
        t_restart = now()
        groups[victim] = start_group(victim)
        heal = wait_for(f"replica group {victim}, started again, committing a step with {GROUPS} participants",
                        180, lambda: next((e["at"] for e in full(victim, t_restart)), None), jobs())
        return {
            "step_ms": steps, "dt_ms": dts, "victim_group": victim,
            "recovery_ms": (t_rec - t_kill) * 1000, "next_step_ms": (min(nexts) - t_kill) * 1000,
            "caught_up_ms": (caught - t_kill) * 1000, "heal_ms": (heal - t_restart) * 1000,
        }
    finally:
        for _, job in jobs():
            kill_tree(job)


# ---------------------------------------------------------------- elasticrun


def elasticrun_round(args, rng, env, hosts, replacement_wait):
    wait = ["--replacement-wait", replacement_wait] if replacement_wait is not None else []
    job = start(f"elasticrun-wait-{replacement_wait or 'default'}", [
        ELASTICRUN, "-np", str(GROUPS), "--min-np", str(GROUPS - 1), "--max-np", str(GROUPS), *wait,
        "--host-discovery-script", f"{ROOT}/discovery-scripts/hosts-from-file.sh {hosts}",
        os.path.join(args.python_venv, "bin", "python"), ELASTIC_WORKER, FOREVER, str(args.delay_ms), "ddp",
    ], env=env)
    jobs = [("elasticrun", job)]

    def full(since):
        return [e for e in events(job, since) if e.get("world_size") == GROUPS]

    try:
        t0 = now()
        wait_for(f"{args.warmup} steps on {GROUPS} ranks", 180,
                 lambda: True if len(full(t0)) >= args.warmup else None, jobs)
        t1 = now()
        evs = wait_for(f"{args.steps} more steps on {GROUPS} ranks", 60 + args.steps * args.delay_ms / 100,
                       lambda: full(t1) if len(full(t1)) > args.steps else None, jobs)
        steps = intervals(evs)
        rank0 = evs[-1]["pid"]
        victims = sorted(p for p in descendants(job.proc.pid) if ELASTIC_WORKER in comm(p) and p != rank0)
        if len(victims) != GROUPS - 1:
            raise BenchError(f"expected {GROUPS - 1} workers besides rank 0 (pid {rank0}), found {victims}\n"
                             f"{tail(jobs)}")
        victim = rng.choice(victims)
        t_kill = now()
        os.kill(victim, signal.SIGKILL)

        def recovered():
            # Rank 0's first step in a generation announced after the kill.
            gens = [at for at, stream, line in job.since(t_kill) if stream == "err" and "generation" in line]
            if not gens:
                return None
            s = events(job, gens[0])
            return s[0]["at"] if s else None

        t_rec = wait_for(f"a step in a new generation after killing pid {victim}", 120, recovered, jobs)
        nexts = [e["at"] for e in events(job, t_kill)]
        # The survivors roll back to their last commit: the first step past
        # the last one done before the kill.
        last = max(e["step"] for e in events(job) if e["at"] < t_kill)
        caught = wait_for(f"rank 0 past step {last}", 60,
                          lambda: next((e["at"] for e in events(job, t_rec) if e["step"] > last), None), jobs)
        t_back = wait_for(f"rank 0 stepping on {GROUPS} ranks again after the kill", 180,
                          lambda: next((e["at"] for e in full(t_rec)), None), jobs)
        return {
            "step_ms": steps, "victim_pid": victim,
            "recovery_ms": (t_rec - t_kill) * 1000, "next_step_ms": (min(nexts) - t_kill) * 1000,
            "caught_up_ms": (caught - t_kill) * 1000, "rejoin_ms": (t_back - t_kill) * 1000,
        }
    finally:
        stop(job)


# ---------------------------------------------------------------- plain DDP


def plain_ddp(args, env):
    total = args.warmup + args.steps + 1
    job = start("plain-ddp", [
        os.path.join(args.python_venv, "bin", "torchrun"), "--nnodes", "1", "--nproc_per_node", str(GROUPS),
        "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--max_restarts", "0",
        TORCHFT_WORKER, str(total), str(args.delay_ms), "plain",
    ], env=env)
    jobs = [("torchrun (plain DDP)", job)]
    try:
        wait_for(f"torchrun running {total} plain DDP steps to the end", 180 + total * args.delay_ms / 100,
                 lambda: job.proc.poll(), jobs)
        time.sleep(0.2)  # the reader threads drain the pipes
        if job.proc.returncode != 0:
            raise BenchError(f"plain DDP under torchrun failed\n{tail(jobs)}")
        evs = [e for e in events(job) if e["step"] > args.warmup]
        return {"step_ms": intervals(evs)}
    finally:
        kill_tree(job)


# ---------------------------------------------------------------- report


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def check_setup(args):
    """The tools each arm needs; a list of what is missing."""
    missing = []
    if not os.access(ELASTICRUN, os.X_OK):
        missing.append(f"{ELASTICRUN} (build it: cargo build --release --bins)")
    if not args.python_venv:
        missing.append("--python-venv VENV (a virtual environment with torch, torchft 0.2.0 and elasticrun)")
        return missing, None
    for tool in ("python", "torchrun", "torchft_lighthouse"):
        path = os.path.join(args.python_venv, "bin", tool)
        if not os.access(path, os.X_OK):
            missing.append(f"{path} (pip install torch torchft==0.2.0 in {args.python_venv})")
    for script in (TORCHFT_WORKER, ELASTIC_WORKER):
        if not os.path.exists(script):
            missing.append(script)
    if missing:
        return missing, None
    probe = subprocess.run([
        os.path.join(args.python_venv, "bin", "python"), "-c",
        "import importlib.metadata as m, json, torch, torchft, elasticrun.torch; "
        "print(json.dumps({'torch': torch.__version__, 'torchft': m.version('torchft')}))",
    ], capture_output=True, text=True)
    if probe.returncode != 0:
        missing.append(f"importing torch, torchft and elasticrun.torch in {args.python_venv} failed "
                       f"(pip install torch torchft==0.2.0, and this project's Python package):\n"
                       f"{probe.stderr[-1500:]}")
        return missing, None
    return missing, json.loads(probe.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python-venv", help="virtual environment with torch, torchft and the elasticrun package")
    p.add_argument("--kills", type=int, default=3, help="rounds: one kill per arm in each [3]")
    p.add_argument("--steps", type=int, default=300, help="steps timed at full size in each round [300]")
    p.add_argument("--warmup", type=int, default=50, help="steps at full size before timing [50]")
    p.add_argument("--delay-ms", type=int, default=10, help="simulated compute per step, every arm [10]")
    p.add_argument("--seed", type=int, default=1, help="picks the victims [1]")
    p.add_argument("--no-default-wait", action="store_true",
                   help="skip the elasticrun arm with the default --replacement-wait")
    p.add_argument("--no-plain", action="store_true", help="skip the plain DDP per-step baseline")
    p.add_argument("--heartbeat-timeout-ms", type=int, default=1000, help="torchft lighthouse [1000]")
    p.add_argument("--join-timeout-ms", type=int, default=1000, help="torchft lighthouse [1000]")
    p.add_argument("--quorum-tick-ms", type=int, default=100, help="torchft lighthouse [100]")
    p.add_argument("--gloo-timeout-s", type=float, default=2.0,
                   help="torchft's ProcessGroupGloo timeout (TORCHFT_BENCH_PG_TIMEOUT of torchft_worker.py) [2]")
    p.add_argument("--keep-logs", metavar="DIR", help="write every process's output to DIR (on failure: always, "
                   "to a temporary folder)")
    p.add_argument("--torchft-log", default="warn",
                   help="RUST_LOG for torchft's lighthouse and managers; info logs several lines per step [warn]")
    args = p.parse_args()

    missing, versions = check_setup(args)
    if missing:
        print("bench_torchft: missing:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 2
    args.python_venv = os.path.abspath(args.python_venv)

    # Orphans (a torchrun worker whose agent was killed) are reparented here,
    # so that the final cleanup finds them.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))

    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # Gloo on the loopback interface
    ft_env = dict(env, RUST_LOG=args.torchft_log, TORCHFT_BENCH_PG_TIMEOUT=str(args.gloo_timeout_s))
    tmp = tempfile.mkdtemp(prefix="bench-torchft-")
    hosts = os.path.join(tmp, "hosts.txt")
    with open(hosts, "w") as f:
        f.write(f"localhost:{GROUPS}\n")
    rng = random.Random(args.seed)
    print(f"bench_torchft: torch {versions['torch']}, torchft {versions['torchft']}, seed {args.seed}, "
          f"{args.kills} kills, {args.steps} timed steps a round, delay {args.delay_ms} ms, lighthouse "
          f"heartbeat {args.heartbeat_timeout_ms} ms / join {args.join_timeout_ms} ms / tick "
          f"{args.quorum_tick_ms} ms, Gloo timeout {args.gloo_timeout_s:g} s", flush=True)

    arms = [("torchft", lambda: torchft_round(args, rng, ft_env)),
            ("elasticrun", lambda: elasticrun_round(args, rng, env, hosts, "0"))]
    if not args.no_default_wait:
        arms.append(("elasticrun, default wait", lambda: elasticrun_round(args, rng, env, hosts, None)))
    rounds = {name: [] for name, _ in arms}
    plain = None
    try:
        for k in range(args.kills):
            for name, run in arms:
                r = run()
                rounds[name].append(r)
                extra = (f"victim group {r['victim_group']}, heal {r['heal_ms']:.0f} ms" if "heal_ms" in r
                         else f"victim pid {r['victim_pid']}, back on {GROUPS} ranks {r['rejoin_ms']:.0f} ms")
                print(f"round {k + 1}/{args.kills} {name}: step {med(r['step_ms']):.2f} ms, "
                      f"recovery {r['recovery_ms']:.0f} ms (next step {r['next_step_ms']:.0f} ms, past the "
                      f"last step before the kill {r['caught_up_ms']:.0f} ms), {extra}",
                      flush=True)
        if not args.no_plain:
            plain = plain_ddp(args, env)
            print(f"plain DDP: step {med(plain['step_ms']):.2f} ms", flush=True)
    except BenchError as e:
        logs = args.keep_logs or os.path.join(tmp, "logs")
        save_logs(logs)
        print(f"bench_torchft: {e}\n(every process's output: {logs}/)", file=sys.stderr)
        return 1
    finally:
        kill_orphans()
    if args.keep_logs:
        save_logs(args.keep_logs)

    # Summary.
    print()
    print(f"{'arm':<28} {'step ms':>8} {'recovery ms':>12} {'max':>6} {'caught up':>10}   recovery per kill (ms)")
    summary = {}
    for name, rs in rounds.items():
        steps = [ms for r in rs for ms in r["step_ms"]]
        rec = [r["recovery_ms"] for r in rs]
        caught = med([r["caught_up_ms"] for r in rs])
        summary[name] = {"step_ms": med(steps), "recovery_ms": med(rec), "recovery_max_ms": max(rec),
                         "caught_up_ms": caught}
        print(f"{name:<28} {med(steps):8.2f} {med(rec):12.0f} {max(rec):6.0f} {caught:10.0f}   "
              f"{[round(x) for x in rec]}")
    if plain:
        summary["plain DDP"] = {"step_ms": med(plain["step_ms"])}
        print(f"{'plain DDP (torchrun, Gloo)':<28} {med(plain['step_ms']):8.2f} {'-':>12} {'-':>6} {'-':>10}")
    ft = rounds["torchft"]
    print(f"torchft heal (restart to first step with {GROUPS}): median "
          f"{med([r['heal_ms'] for r in ft]):.0f} ms, all {[round(r['heal_ms']) for r in ft]}")
    for name in rounds:
        if name != "torchft":
            print(f"{name}: kill to rank 0 on {GROUPS} ranks again: median "
                  f"{med([r['rejoin_ms'] for r in rounds[name]]):.0f} ms, "
                  f"all {[round(r['rejoin_ms']) for r in rounds[name]]}")
    for name in rounds:
        if name != "torchft":
            print(f"ratio torchft / {name}: recovery "
                  f"{summary['torchft']['recovery_ms'] / summary[name]['recovery_ms']:.1f}, "
                  f"step {summary['torchft']['step_ms'] / summary[name]['step_ms']:.2f}")
    if plain:
        print(f"ratio torchft / plain DDP: step {summary['torchft']['step_ms'] / summary['plain DDP']['step_ms']:.2f}; "
              f"elasticrun / plain DDP: step {summary['elasticrun']['step_ms'] / summary['plain DDP']['step_ms']:.2f}")

    raw = {
        "versions": versions, "seed": args.seed, "kills": args.kills, "steps": args.steps,
        "warmup": args.warmup, "delay_ms": args.delay_ms,
        "lighthouse": {"heartbeat_timeout_ms": args.heartbeat_timeout_ms, "join_timeout_ms": args.join_timeout_ms,
                       "quorum_tick_ms": args.quorum_tick_ms},
        "gloo_timeout_s": args.gloo_timeout_s,
        "summary": summary,
        "rounds": {name: [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                           if k not in ("step_ms", "dt_ms")} | {
                               "step_ms_median": round(med(r["step_ms"]), 3), "intervals": len(r["step_ms"]),
                               **({"dt_ms_median": round(med(r["dt_ms"]), 3)} if "dt_ms" in r else {})}
                           for r in rs] for name, rs in rounds.items()},
    }
    if plain:
        raw["plain_ddp"] = {"step_ms_median": round(med(plain["step_ms"]), 3), "intervals": len(plain["step_ms"])}
    print(json.dumps(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
