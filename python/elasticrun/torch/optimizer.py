"""``DistributedOptimizer``: horovod.torch's wrapper. Each gradient is
submitted to the engine from a hook the moment backward has accumulated it
(after ``backward_passes_per_step`` passes), so communication overlaps the
rest of backward; ``step()`` waits for them all (``synchronize()``) and then
runs the wrapped optimizer's step."""

import contextlib

import torch

import elasticrun as _er
from elasticrun import _elasticrun as _native

from .compression import Compression


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if named_parameters is not None:
            named = list(named_parameters)
        else:
            named = [(f"noname.{i}", p) for g in self.param_groups for i, p in enumerate(g["params"])]
            named = [(f"{n}.{j}", p) for j, (n, p) in enumerate(named)]
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise ValueError("named_parameters has duplicate names")
        ours = {id(p) for g in self.param_groups for p in g["params"]}
        self._names = {id(p): n for n, p in named if id(p) in ours}
        missing = [p for g in self.param_groups for p in g["params"] if id(p) not in self._names]
        if missing:
            raise ValueError(f"{len(missing)} parameter(s) of the optimizer are not in named_parameters")
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be at least 1")
        self.backward_passes_per_step = backward_passes_per_step
        if op == _er.Adasum:
            raise ValueError("Adasum is not supported by elasticrun; use op=Average")
        self._op = op
        self._predivide = gradient_predivide_factor
        self._delay = {}
        self._handles = {}
        self._should_sync = True
        for g in self.param_groups:
            for p in g["params"]:
                if p.requires_grad:
                    self._delay[p] = backward_passes_per_step
                    p.register_post_accumulate_grad_hook(self._hook)

    def _submit(self, p):
        name = "allreduce." + self._names[id(p)]
        grad, ctx = self._compression.compress(p.grad)
        if self._op == _er.Average and self._predivide != 1.0:
            h = _er.allreduce_async(grad.detach().numpy(), name, _er.Sum,
                                    1.0 / self._predivide, self._predivide / _er.size())
        else:
            h = _native.allreduce_async(grad.detach().numpy(), name, self._op)
        self._handles[p] = (h, ctx)

    def _hook(self, p):
        if p in self._handles:
            raise RuntimeError(
                "a gradient was computed twice before step(): call optimizer.synchronize() "
                "between backward passes, or raise backward_passes_per_step"
            )
        self._delay[p] -= 1
        if self._delay[p] == 0:
            self._submit(p)

    def synchronize(self):
        """Waits for every gradient's allreduce; gradients no hook submitted
        (unused parameters) are submitted now, as zeros where they have none."""
        for g in self.param_groups:
            for p in g["params"]:
                if p.requires_grad and p not in self._handles:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    self._submit(p)
        try:
            for p, (h, ctx) in list(self._handles.items()):
                out = torch.from_numpy(h.wait())
                out = self._compression.decompress(out, ctx).reshape(p.grad.shape)
                if out.dtype == p.grad.dtype and p.grad.is_contiguous():
                    # The result is a new array of the engine's: it becomes
                    # the gradient, without a copy.
                    p.grad = out
                else:
                    with torch.no_grad():
                        p.grad.copy_(out)
        finally:
            # Also after a failure: the next step starts afresh (an elastic
            # run restores the state and goes on in a new generation).
            self._reset_handles()

    def _reset_handles(self):
        self._handles.clear()
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step

    @contextlib.contextmanager
    def skip_synchronize(self):
        """``step()`` inside it does not wait (call ``synchronize()`` first)."""
        self._should_sync = False
        try:
            yield
        finally:
            self._should_sync = True

    def step(self, closure=None):
        if self._should_sync:
            self.synchronize()
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise RuntimeError(
                "zero_grad() while gradients are being reduced: call step() or synchronize() first"
            )
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=_er.Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wraps ``optimizer`` so that ``step()`` uses gradients averaged (``op``)
    over every rank, as horovod.torch's does."""
    if process_set is not None:
        raise NotImplementedError("process sets are not supported by elasticrun")
    if num_groups or groups:
        raise NotImplementedError(
            "gradient groups are not needed: the engine fuses gradients by itself (--fusion-threshold-mb)"
        )
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor)
