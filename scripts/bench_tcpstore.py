#!/usr/bin/env python3
"""torch's TCPStore rendezvous of N clients on this machine, beside which
scripts/bench_scale.sh's figures (swarm: N workers registering with
elasticrun's coordinator and being assigned) are read. The pattern is the
core of torchrun's c10d rendezvous: a TCPStore server (the libuv backend,
torch's default since 2.4) in a process of its own; N clients, each a
thread (spread over PROCS processes), connect, publish their address under
their own key, add themselves to a counter, and wait for the key the last
arrival sets; then rank 0 of each process reads every address (what each
worker of a full mesh would need). Prints one JSON line per N:

  connect_ms     start to the last client connected
  join_ms        start to the last client counted
  rendezvous_ms  start to every client released by the last arrival
  server_rss_mib the server process's peak memory

Usage: scripts/bench_tcpstore.py [N...] [--procs 8] [--no-isolate]   (default 1000 2000 5000 10000)
Runs in a network namespace of its own (unshare), where c10d's reverse
name lookups fail at once instead of waiting on a name server.
Needs torch: PEERS_VENV=$(../shared/peers/setup.sh); "$PEERS_VENV"/bin/python scripts/bench_tcpstore.py
"""
import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import sys
import socket
import threading
import time
from datetime import timedelta


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(port, ready, done, peak):
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", port, is_master=True, use_libuv=True,
                     timeout=timedelta(seconds=600), wait_for_workers=False)
    ready.set()
    done.wait()
    peak.put(round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
    del store


def clients(port, ranks, n, start, out):
    from torch.distributed import TCPStore  # noqa: F401  (imported before the clock starts)

    start["ready"].release()
    start["go"].wait()
    t0 = start["t0"].value
    times = {"connected": [], "joined": [], "released": []}
    lock = threading.Lock()

    def one(rank):
        store = TCPStore("127.0.0.1", port, is_master=False, use_libuv=True,
                         timeout=timedelta(seconds=600))
        connected = time.time()
        store.set(f"addr/{rank}", f"127.0.0.1:{20000 + rank % 40000}")
        if store.add("count", 1) == n:
            store.set("go", "1")
        joined = time.time()
        store.wait(["go"])
        released = time.time()
        if rank == ranks[0]:
            store.multi_get([f"addr/{r}" for r in range(n)])
        with lock:
            times["connected"].append(connected - t0)
            times["joined"].append(joined - t0)
            times["released"].append(released - t0)

    threading.stack_size(512 << 10)
    threads = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put({k: max(v) for k, v in times.items()})


def measure(n, procs):
    port = free_port()
    ready, done, peak = mp.Event(), mp.Event(), mp.Queue()
    server = mp.Process(target=serve, args=(port, ready, done, peak))
    server.start()
    ready.wait(60)
    out = mp.Queue()
    # Every client process has imported torch before the clock starts.
    start = {"ready": mp.Semaphore(0), "go": mp.Event(), "t0": mp.Value("d", 0.0)}
    workers = [mp.Process(target=clients, args=(port, list(range(p, n, procs)), n, start, out))
               for p in range(procs)]
    for w in workers:
        w.start()
    for _ in workers:
        start["ready"].acquire(timeout=120)
    start["t0"].value = time.time()
    start["go"].set()
    got = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join(60)
    done.set()
    server_peak = peak.get(timeout=60)
    server.join(60)
    ms = lambda k: round(max(g[k] for g in got) * 1000, 1)
    return {"clients": n, "connect_ms": ms("connected"), "join_ms": ms("joined"),
            "rendezvous_ms": ms("released"), "server_peak_rss_mib": server_peak,
            "client_processes": procs}


ISOLATED = "BENCH_TCPSTORE_ISOLATED"


def isolate():
    """Runs this script again in a network namespace of its own with only
    loopback up. c10d looks up the name of every client socket's address
    (a reverse DNS query for 127.0.0.1 that /etc/hosts does not answer for
    it); where the configured name server is slow or unreachable, each
    client process then waits out the resolver's timeouts (10-15 s, "The
    hostname of the client socket cannot be retrieved. err=-3"), which
    would be counted as TCPStore's. In the namespace the query fails at
    once, as a name server that answers would be near enough."""
    if os.environ.get(ISOLATED) or shutil.which("unshare") is None or shutil.which("ip") is None:
        return
    own = ["--map-root-user"] if os.geteuid() != 0 else []
    cmd = ["unshare", "--net", *own, "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
           sys.executable, *sys.argv]
    os.execvpe("unshare", cmd, {**os.environ, ISOLATED: "1"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[1000, 2000, 5000, 10000])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--no-isolate", action="store_true",
                    help="run in this network namespace (name lookups as configured)")
    args = ap.parse_args()
    if not args.no_isolate:
        isolate()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    for n in args.sizes:
        print(json.dumps(measure(n, args.procs)), flush=True)


if __name__ == "__main__":
    main()
