"""The torchrun side of bench_recovery.py: the same shape of job as
`train --log-steps` (a small MLP on synthetic blobs, gradients averaged over a
Gloo group every step, a fixed compute delay per step), made fault-tolerant the
way torchrun wants it: a checkpoint file written every COMMIT_EVERY steps and
read back when torchrun restarts the workers after one dies.

Usage: torchrun --nproc-per-node N --max-restarts 100 --rdzv-backend c10d \
         --rdzv-endpoint 127.0.0.1:PORT torchrun_elastic_peer.py CKPT STEPS DELAY_MS
(or --rdzv-backend etcd-v2, as bench_etcd.py runs it: then worker rank 0 hosts
the workers' store, as torchrun's agent does not).
Rank 0 prints {"event":"step","step":S,"ms":unix_ms,"pid":P,"world_size":W} per step."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

ckpt, steps, delay_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
COMMIT_EVERY, BATCH, FEATURES, HIDDEN, CLASSES = 10, 64, 16, 32, 4

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                      is_master=rank == 0 and not agent_store, world_size=size)
if agent_store:
    # Keys of each restart round under their own prefix: otherwise a restarted
    # group can read the previous round's Gloo addresses from the agent's store.
    store = dist.PrefixStore(f"round{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
torch.manual_seed(42)
model = torch.nn.Sequential(
    torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    step = state["step"]
for p in model.parameters():
    dist.broadcast(p.data, 0)
centres = torch.randn(8, FEATURES, generator=torch.Generator().manual_seed(7)) * 3
while step < steps:
    g = torch.Generator().manual_seed(step * 1000 + rank)
    idx = torch.randint(0, 8, (BATCH // size,), generator=g)
    x = centres[idx] + torch.randn(len(idx), FEATURES, generator=g)
    loss = torch.nn.functional.cross_entropy(model(x), idx % CLASSES)
    opt.zero_grad()
    loss.backward()
    time.sleep(delay_ms / 1000)
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= size
    opt.step()
    step += 1
    if rank == 0:
        if step % COMMIT_EVERY == 0:
            torch.save({"model": model.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        line = {"event": "step", "step": step, "ms": int(time.time() * 1000), "pid": os.getpid(),
                "world_size": size}
        print(json.dumps(line), flush=True)
dist.destroy_process_group()
