"""The training loop of the elastic test workers (elastic_train.py,
elastic_ddp.py, elastic_fsdp.py): a fixed global batch of 12 samples a step
(``X[step]``, ``Y[step]``) shared evenly among the ranks, whatever their
number, MSE loss, a commit every other step; prints ``step <n> size <n>`` as
it goes, sleeping ``delay`` seconds after each step."""

import time

import torch

import elasticrun.torch as hvd


def train(state, forward, opt, X, Y, delay, rank_size=lambda: (hvd.rank(), hvd.size())):
    """Trains ``forward`` with ``opt`` from ``state.step`` to ``len(X)``
    steps under ``hvd.elastic.run``; ``rank_size()`` says this generation's
    rank and size."""

    @hvd.elastic.run
    def loop(state):
        while state.step < len(X):
            r, n = rank_size()
            per = 12 // n
            x, y = X[state.step, r * per:(r + 1) * per], Y[state.step, r * per:(r + 1) * per]
            opt.zero_grad()
            torch.nn.functional.mse_loss(forward(x), y).backward()
            opt.step()
            state.step += 1
            if state.step % 2 == 0:
                state.commit()
            print(f"step {state.step} size {n}", flush=True)
            time.sleep(delay)

    loop(state)
