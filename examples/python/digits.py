"""A small CNN on scikit-learn's bundled digits (8x8 images, 10 classes; no
download), trained data-parallel with elasticrun.torch, Horovod's way:

    elasticrun -np 2 python examples/python/digits.py
    elasticrun --min-np 1 --max-np 4 --host-discovery-script ./hosts.sh \\
        python examples/python/digits.py --elastic

Each rank trains on its share of every epoch (an ElasticSampler, so that an
elastic job that loses or gains workers goes on with the samples not yet
seen); gradients are averaged by DistributedOptimizer. Rank 0 prints one JSON
line at the end: test accuracy, epochs, world size. 15 epochs reach about
97% test accuracy.
"""

import argparse
import json
import os

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

import elasticrun.torch as hvd


def data():
    """The digits as tensors: 1437 training and 360 test images."""
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    return (x[:1437], y[:1437]), (x[1437:], y[1437:])


def model():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 2 * 2, 10),
    )


def accuracy(net, x, y):
    with torch.no_grad():
        return (net(x).argmax(1) == y).float().mean().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05, help="scaled by the world size")
    p.add_argument("--elastic", action="store_true", help="commit every epoch; survive membership changes")
    p.add_argument("--log", action="store_true", help="print this process's pid and every epoch's end")
    args = p.parse_args()

    hvd.init()
    if args.log:
        print(f"pid {hvd.rank()} {os.getpid()}", flush=True)
    (xtr, ytr), (xte, yte) = data()
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters())
    sampler = hvd.elastic.ElasticSampler(list(range(len(ytr))), shuffle=True, seed=3)
    state = hvd.elastic.TorchState(net, opt, epoch=0, sampler=sampler)

    def rescale():
        for g in opt.param_groups:
            g["lr"] = args.lr * hvd.size()

    state.register_reset_callbacks([rescale])

    def train(state):
        while state.epoch < args.epochs:
            sampler.set_epoch(state.epoch)
            idx = list(sampler)
            for b in range(0, len(idx), args.batch_size):
                batch = idx[b:b + args.batch_size]
                opt.zero_grad()
                F.cross_entropy(net(xtr[batch]), ytr[batch]).backward()
                opt.step()
            state.epoch += 1
            if args.elastic:
                state.commit()
            if args.log:
                print(f"epoch {state.epoch} size {hvd.size()}", flush=True)

    if args.elastic:
        hvd.elastic.run(train)(state)
    else:
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        train(state)
    acc = accuracy(net, xte, yte)
    if hvd.rank() == 0:
        print(json.dumps({"accuracy": round(acc, 4), "epochs": state.epoch, "world_size": hvd.size()}),
              flush=True)


if __name__ == "__main__":
    main()
