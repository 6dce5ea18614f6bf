"""``horovod.torch.elastic``: ``run``, ``TorchState`` and ``ElasticSampler``."""

import copy
import functools
import math
import random

import torch

import elasticrun as _er
from elasticrun.elastic import (
    HorovodInternalError,
    HostsUpdatedInterrupt,
    LeftJob,
    ObjectState,
    State,
    WorkersFailed,
)
from elasticrun.elastic import run as _run


def run(func):
    """``horovod.torch.elastic.run``: wraps ``func(state, ...)`` so that it
    survives workers failing and hosts coming and going. Also for programs
    on the ``elasticrun`` torch.distributed backend: a call that failed
    because workers failed reaches ``func`` through torch as a plain
    ``RuntimeError`` (DDP's backward pass), which is rolled back as a
    ``WorkersFailed`` is."""

    @functools.wraps(func)
    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except (WorkersFailed, HostsUpdatedInterrupt):
            raise
        except Exception as e:
            from . import backend

            failed = backend.failure()
            if failed is None:
                raise
            raise WorkersFailed(str(failed)) from e

    return _run(translated)


class DistributedDataParallel(torch.nn.Module):
    """``torch.nn.parallel.DistributedDataParallel`` that an elastic job can
    keep: wrapped again around ``module`` (with the same ``kwargs``) on the
    default process group of every new generation, which
    ``TorchState``'s reset makes for the new world. Call it, and read
    ``.module``, as DDP's; its ``state_dict()`` is DDP's (``module.`` keys)."""

    def __init__(self, module, **kwargs):
        super().__init__()
        self.module = module
        self._kwargs = kwargs
        self._remake()
        from . import backend

        backend._REMADE.add(self)

    def _remake(self):
        old = self.__dict__.get("_ddp")
        if old is not None:
            # The old reducer's hooks on the parameters go now, not when
            # the old wrapper is collected.
            old._remove_autograd_hooks()
        ddp = torch.nn.parallel.DistributedDataParallel(self.module, **self._kwargs)
        object.__setattr__(self, "_ddp", ddp)

    def forward(self, *args, **kwargs):
        return self._ddp(*args, **kwargs)


class TorchState(ObjectState):
    """A model's and an optimizer's state, plus any picklable attributes
    (``TorchState(model, optimizer, epoch=0, batch=0)``)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._saved_model = None
        self._saved_optimizer = None
        super().__init__(**kwargs)

    def save(self):
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict())
        super().save()

    def on_reset(self):
        # The elasticrun backend's process group and DDP wrappers first:
        # the callbacks may use them.
        from . import backend

        backend.new_generation()
        super().on_reset()

    def restore(self):
        if hasattr(self.optimizer, "_reset_handles"):
            self.optimizer._reset_handles()
        if self.model is not None and self._saved_model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None and self._saved_optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        super().restore()

    def sync(self):
        from . import broadcast_optimizer_state, broadcast_parameters

        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        super().sync()


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset's indices over the current ranks, remembers which
    were processed this epoch (``record_batch``), and after a reset shards
    only the rest over the new ranks. Put it in the state
    (``TorchState(..., sampler=sampler)``) so that it is committed and
    synced with the model."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts ``batch_size`` samples of every rank as processed."""
        self.processed += batch_size * _er.size()

    def record_indices(self, indices):
        self.processed += len(indices) * _er.size()

    def reset(self):
        n = len(self.dataset)
        order = list(range(n))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        rest = order[min(self.processed, n):]
        size, rank = _er.size(), _er.rank()
        per = int(math.ceil(len(rest) / size)) if rest else 0
        padded = rest + rest[: per * size - len(rest)]
        self.indices = padded[rank::size]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return len(self.indices)

    def state_dict(self):
        return {"epoch": self.epoch, "processed": self.processed}

    def load_state_dict(self, state):
        """Takes a committed or rank 0's position and re-shards what is left
        over the current ranks."""
        self.epoch = state["epoch"]
        self.processed = state["processed"]
        self.reset()


__all__ = ["DistributedDataParallel", "ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "LeftJob",
           "ObjectState", "State", "TorchState", "WorkersFailed", "run"]
