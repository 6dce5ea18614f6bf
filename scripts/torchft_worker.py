"""The torchft side of bench_torchft.py: the same job as torch_elastic_worker.py
(a small MLP on synthetic blobs, SGD with lr 0.1, a global batch of 64 split
over the participants, a fixed compute delay per step), made fault-tolerant
torchft's way: one process per replica group, a torchft.Manager reaching the
lighthouse, torchft.DistributedDataParallel averaging the gradients over the
replica groups in the quorum (ProcessGroupGloo; with a comm hook that outlives
a failed allreduce, see _DistributedDataParallel), torchft.Optimizer committing
a step only when should_commit agrees, and a replica group that (re)joins
fetching the weights from a live one over the process group (PGTransport).

Usage (one replica group; torchrun provides MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE):
  REPLICA_GROUP_ID=i NUM_REPLICA_GROUPS=3 TORCHFT_LIGHTHOUSE=http://127.0.0.1:PORT \
    torchrun --nnodes 1 --nproc_per_node 1 --master_addr 127.0.0.1 --master_port P \
      --max_restarts 0 torchft_worker.py STEPS DELAY_MS
Plain DDP over Gloo, the baseline without fault tolerance (every rank a process):
  torchrun --nnodes 1 --nproc_per_node 3 ... torchft_worker.py STEPS DELAY_MS plain

Every iteration prints one JSON line (torchft: on each replica group; plain: on
rank 0): {"event":"step","step":S,"world_size":N,"committed":C,"t":unix_s,
"dt":s,"pid":P,"replica_group":G}. S is the step count after the iteration
(it only grows when the iteration was committed), N the number of replica
groups that took part, t the wall-clock time at its end, dt its duration.

Timeouts (seconds, environment): TORCHFT_BENCH_PG_TIMEOUT (Gloo: collectives
and the rendezvous on each new quorum) [2], TORCHFT_BENCH_TIMEOUT (the
manager's RPCs, should_commit among them) [5], TORCHFT_BENCH_CKPT_TIMEOUT (the
weights sent to a healing group) [10], TORCHFT_BENCH_QUORUM_TIMEOUT [30]. A
survivor whose allreduce peer is alive but gave up on that allreduce (its own
failed first) waits the Gloo timeout: it bounds the worst recovery."""
import json
import os
import sys
import time
from datetime import timedelta

import torch

steps, delay_ms = int(sys.argv[1]), float(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "torchft"
BATCH, FEATURES, HIDDEN, CLASSES = 64, 16, 32, 4

torch.manual_seed(42)
model = torch.nn.Sequential(
    torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
)
centres = torch.randn(8, FEATURES, generator=torch.Generator().manual_seed(7)) * 3
base_opt = torch.optim.SGD(model.parameters(), lr=0.1)


def batch(step, rank, size):
    """The same synthetic batch torch_elastic_worker.py draws for (step, rank)."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    idx = torch.randint(0, 8, (BATCH // size,), generator=g)
    return centres[idx] + torch.randn(len(idx), FEATURES, generator=g), idx % CLASSES


def report(step, size, committed, t0, group):
    t = time.time()
    print(json.dumps({"event": "step", "step": step, "world_size": size, "committed": committed, "t": t,
                      "dt": t - t0, "pid": os.getpid(), "replica_group": group}), flush=True)


def run_plain():
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    for step in range(steps):
        t0 = time.time()
        x, y = batch(step, rank, size)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        base_opt.zero_grad()
        loss.backward()
        time.sleep(delay_ms / 1000)
        base_opt.step()
        if rank == 0:
            report(step + 1, size, True, t0, 0)
    dist.destroy_process_group()


def run_torchft():
    import torchft

    class _DistributedDataParallel(torchft.DistributedDataParallel):
        """torchft.DistributedDataParallel whose comm hook survives a failed
        allreduce. In torchft 0.2.0, when the Gloo allreduce fails (a peer
        killed during it: "Connection reset by peer"), _ManagedWork.wait()
        reports the error to the manager and returns False before it chains
        the future, so the stock hook's `assert fut._fut` fails and the
        survivor dies. Here the bucket is handed back as it is instead: the
        manager holds the error, should_commit() says no, the step is not
        committed and the next quorum leaves the dead group out."""

        @staticmethod
        def _comm_hook(state, bucket):
            work = state.allreduce(bucket.buffer())
            work.wait()
            fut = work.get_future()._fut
            if fut is None:
                fut = torch.futures.Future()
                fut.set_result(bucket.buffer())
            return fut

    from torchft.checkpointing.pg_transport import PGTransport

    group = int(os.environ["REPLICA_GROUP_ID"])
    pg_timeout = timedelta(seconds=float(os.environ.get("TORCHFT_BENCH_PG_TIMEOUT", "2")))
    timeout = timedelta(seconds=float(os.environ.get("TORCHFT_BENCH_TIMEOUT", "5")))
    ckpt_timeout = timedelta(seconds=float(os.environ.get("TORCHFT_BENCH_CKPT_TIMEOUT", "10")))
    quorum_timeout = timedelta(seconds=float(os.environ.get("TORCHFT_BENCH_QUORUM_TIMEOUT", "30")))

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        base_opt.load_state_dict(sd["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": base_opt.state_dict()}

    pg = torchft.ProcessGroupGloo(timeout=pg_timeout)
    manager = torchft.Manager(
        pg=pg,
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"bench_{group}",
        timeout=timeout,
        quorum_timeout=quorum_timeout,
        connect_timeout=timeout,
        # The ManagerServer listens on [::]; the default hostname
        # (socket.gethostname()) may not resolve to this machine's loopback.
        hostname="localhost",
        # Weights go to a (re)joining group over the Gloo process group,
        # not over the HTTP server (which advertises socket.gethostname()).
        checkpoint_transport=PGTransport(pg, timeout=ckpt_timeout, device=torch.device("cpu")),
    )
    ddp = _DistributedDataParallel(manager, model)
    opt = torchft.Optimizer(manager, base_opt)
    try:
        while manager.current_step() < steps:
            t0 = time.time()
            opt.zero_grad()  # starts the quorum for this step
            size = manager.num_participants()  # waits for it
            step = manager.current_step()  # after a heal: the step recovered
            x, y = batch(step, manager.participating_rank() or 0, max(size, 1))
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()  # the allreduce runs in DDP's comm hook
            time.sleep(delay_ms / 1000)
            opt.step()  # should_commit, then the SGD step if agreed
            report(manager.current_step(), size, manager.current_step() > step, t0, group)
    finally:
        manager.shutdown(wait=False)


if mode == "plain":
    run_plain()
elif mode == "torchft":
    run_torchft()
else:
    sys.exit(f"unknown mode {mode!r}: torchft or plain")
