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


class FullyShardedModule(torch.nn.Module):
    """An FSDP2 model that an elastic job can keep: ``build(mesh)`` makes the
    model and shards it with ``fully_shard`` on the 1-D device mesh it is
    given, here and again on a mesh of the new world after every reset (the
    old mesh's ranks are gone). ``TorchState`` carries the weights and the
    optimizer's state across, whole, through torch.distributed.checkpoint's
    state-dict helpers, and points the optimizer at the new parameters. Call
    it, and read ``.module``, as the sharded model."""

    def __init__(self, build, device_type="cpu"):
        super().__init__()
        self._build = build
        self._device_type = device_type
        self._moved = {}
        self._remake()
        from . import backend

        backend._REMADE.add(self)

    def _remake(self):
        from torch.distributed.device_mesh import init_device_mesh

        import torch.distributed as dist

        old = list(self.module.parameters()) if "module" in self._modules else []
        mesh = init_device_mesh(self._device_type, (dist.get_world_size(),))
        self.module = self._build(mesh)
        new = list(self.module.parameters())
        if old and len(old) != len(new):
            raise RuntimeError(f"build(mesh) made a model of {len(new)} parameters, "
                               f"the last one had {len(old)}: it must make the same model")
        self._moved = {id(a): b for a, b in zip(old, new)}

    def move_optimizer(self, optimizer):
        """Points ``optimizer`` at the parameters of the model built for this
        generation (the same ones, in the same order), its state dropped: the
        committed state is loaded into it by ``TorchState``."""
        for group in optimizer.param_groups:
            group["params"] = [self._moved.get(id(p), p) for p in group["params"]]
        optimizer.state.clear()

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def _on_host(tree):
    """A copy of a state dict on the host, detached from the model."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, dict):
        return {k: _on_host(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_on_host(v) for v in tree)
    return copy.deepcopy(tree)


class TorchState(ObjectState):
    """A model's and an optimizer's state, plus any picklable attributes
    (``TorchState(model, optimizer, epoch=0, batch=0)``). With a
    ``FullyShardedModule`` the model's and the optimizer's state are kept
    whole (every rank holds a full copy on the host, gathered at each
    commit) and loaded, sharded for the new world, from rank 0's."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._saved_model = None
        self._saved_optimizer = None
        super().__init__(**kwargs)
        self._made = True

    def _sharded(self):
        return isinstance(self.model, FullyShardedModule)

    def _save_sharded(self):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions, get_model_state_dict, get_optimizer_state_dict)

        whole = StateDictOptions(full_state_dict=True)
        module = self.model.module
        self._saved_model = _on_host(get_model_state_dict(module, options=whole))
        if self.optimizer is not None:
            self._saved_optimizer = _on_host(
                get_optimizer_state_dict(module, self.optimizer, options=whole))

    def _sync_sharded(self):
        import numpy as np
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions, set_model_state_dict, set_optimizer_state_dict)

        # At the first start nothing was gathered yet (a newcomer's state is
        # never gathered on its own: the others are not gathering then).
        kept = np.array([self._saved_model is not None], np.uint8)
        if not _er.broadcast(kept, 0, name="elastic.sharded.kept")[0]:
            self._save_sharded()

        from_rank0 = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        first = dist.get_rank() == 0
        module = self.model.module
        set_model_state_dict(module, self._saved_model if first else {}, options=from_rank0)
        if self.optimizer is not None:
            saved = self._saved_optimizer if first else {}
            set_optimizer_state_dict(module, self.optimizer, saved, options=from_rank0)

    def save(self):
        if self._sharded():
            # Gathering is collective: at a commit or a sync, every rank
            # gathers; not while this state is made (see _sync_sharded).
            if self.__dict__.get("_made"):
                self._save_sharded()
            super().save()
            return
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
        if self._sharded() and self.optimizer is not None:
            self.model.move_optimizer(self.optimizer)
        super().on_reset()

    def restore(self):
        if self._sharded():
            # The committed state is loaded by the next sync, sharded on the
            # new world's mesh; the failed one can carry nothing.
            ObjectState.restore(self)
            return
        if hasattr(self.optimizer, "_reset_handles"):
            self.optimizer._reset_handles()
        if self.model is not None and self._saved_model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None and self._saved_optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        super().restore()

    def sync(self):
        if self._sharded():
            self._sync_sharded()
            super().sync()
            return
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


__all__ = ["DistributedDataParallel", "ElasticSampler", "FullyShardedModule", "HorovodInternalError", "HostsUpdatedInterrupt", "LeftJob",
           "ObjectState", "State", "TorchState", "WorkersFailed", "run"]
