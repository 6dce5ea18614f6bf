"""``DistributedOptimizer``: horovod.torch's wrapper. Gradients are reduced in
buckets: consecutive parameters (in backward's order, the reverse of the
model's) of about ``ELASTICRUN_BUCKET_MB`` together, or the groups the caller
gives (``groups=``, as horovod.torch has them). A hook submits a bucket as one
grouped allreduce the moment backward has accumulated its last gradient (after
``backward_passes_per_step`` passes), so communication overlaps the rest of
backward; ``step()`` waits for them all (``synchronize()``) and then runs the
wrapped optimizer's step.

Buckets are planned from the parameters' order, sizes and dtypes alone, so
that every rank plans the same ones."""

import contextlib
import math
import os

import torch

import elasticrun as _er
from elasticrun import _elasticrun as _native

from . import cuda as _cuda
from .compression import Compression

BUCKET_MB_ENV = "ELASTICRUN_BUCKET_MB"
_IN_PLACE_DTYPES = (torch.float32, torch.float64, torch.float16)
DEFAULT_BUCKET_MB = 4.0
DEFAULT_CUDA_BUCKET_MB = 25.0


def bucket_bytes(cuda=False):
    """The bucket size in bytes: ``ELASTICRUN_BUCKET_MB`` (MiB; 0 reduces
    each gradient alone, as horovod.torch does), by default 4 MiB, or 25
    MiB (DDP's) for CUDA gradients, whose every bucket costs the engine a
    host round beside its NCCL call."""
    raw = os.environ.get(BUCKET_MB_ENV)
    if raw is None or raw == "":
        return int((DEFAULT_CUDA_BUCKET_MB if cuda else DEFAULT_BUCKET_MB) * 2**20)
    try:
        mb = float(raw)
    except ValueError:
        mb = math.nan
    if not (mb >= 0 and math.isfinite(mb)):
        raise ValueError(f"{BUCKET_MB_ENV}={raw!r}: expected a size in MiB, 0 or more")
    return int(mb * 2**20)


def _split_by_dtype(bucket):
    out = []
    for p in bucket:
        if out and out[-1][-1].dtype == p.dtype:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def plan_buckets(params, groups, cap):
    """Lists of parameters, each reduced as one tensor. ``params`` in the
    order their gradients are expected; ``groups``: None (buckets of about
    ``cap`` bytes), a number of groups of about equal count, or lists of
    parameters (the unlisted ones each alone)."""
    if isinstance(groups, (list, tuple)):
        seen, out = set(), []
        ours = {id(p) for p in params}
        for g in groups:
            g = list(g)
            for p in g:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must be lists of parameters (torch.Tensor)")
                if id(p) not in ours:
                    raise ValueError("groups name a parameter the optimizer does not have (or one without requires_grad)")
                if id(p) in seen:
                    raise ValueError("a parameter can only appear once in groups")
                seen.add(id(p))
            if len({p.dtype for p in g}) > 1:
                raise ValueError("a group's parameters must share one dtype")
            if g:
                out.append(g)
        return out + [[p] for p in params if id(p) not in seen]
    if groups:
        if not isinstance(groups, int) or groups < 0:
            raise ValueError("groups must be a non-negative number or a list of lists of parameters")
        n = min(groups, len(params))
        chunks = [params[i * len(params) // n:(i + 1) * len(params) // n] for i in range(n)]
        return [b for c in chunks for b in _split_by_dtype(c)]
    out, size = [], 0
    for p in params:
        nbytes = p.numel() * p.element_size()
        if out and size < cap and out[-1][-1].dtype == p.dtype:
            out[-1].append(p)
            size += nbytes
        else:
            out.append([p])
            size = nbytes
    return out


def _grads(members):
    """The members' gradients to send. A parameter frozen since the plan was
    made has no gradient: zeros go in its place, so that every rank sends the
    same bucket."""
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in members]


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups):
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
        trained = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        cuda = any(p.is_cuda for p in trained)
        self._buckets = plan_buckets(trained[::-1], groups, bucket_bytes(cuda))
        self._bucket_of = {p: b for b, ps in enumerate(self._buckets) for p in ps}
        self._bucket_names = [
            "allreduce." + self._names[id(ps[0])] + (f"+{len(ps) - 1}" if len(ps) > 1 else "")
            for ps in self._buckets
        ]
        self._delay = {}
        self._left = []
        self._ready = set()
        self._handles = {}
        self._should_sync = True
        self._reset_handles()
        for p in trained:
            p.register_post_accumulate_grad_hook(self._hook)

    def _in_place(self, members):
        """Whether bucket ``members`` can be reduced where its gradients lie:
        no compression or predivision, and every gradient a contiguous CPU
        tensor of a type numpy and the engine share."""
        if self._compression is not Compression.none or self._predivide != 1.0:
            return False
        for p in members:
            g = p.grad
            if g is None:
                continue
            if g.device.type != "cpu" or not g.is_contiguous() or g.dtype not in _IN_PLACE_DTYPES:
                return False
        return True

    def _submit_cuda(self, members, name):
        """CUDA gradients: compressed on the device if asked; a bucket of
        several is packed into one flat device tensor (as DDP's buckets are)
        and reduced in place as one tensor, a single gradient where it lies."""
        op, pre, post = self._op, 1.0, 1.0
        if op == _er.Average and self._predivide != 1.0:
            op, pre, post = _er.Sum, 1.0 / self._predivide, self._predivide / _er.size()
        grads = _grads(members)
        sent = [self._compression.compress(g) for g in grads]
        if len(members) == 1:
            g, ctx = sent[0]
            # Reduced where it lies: the gradient itself, or its compressed copy.
            in_place = g.data_ptr() == grads[0].data_ptr()
            return [(members, _cuda.allreduce(g, name, op, pre, post, True), in_place, [ctx])]
        flat = torch.cat([g.reshape(-1) for g, _ in sent])
        return [(members, _cuda.allreduce(flat, name, op, pre, post, True), False, [c for _, c in sent])]

    def _submit(self, b):
        members = self._buckets[b]
        name = self._bucket_names[b]
        if any(p.grad is not None and p.grad.is_cuda for p in members):
            self._handles[b] = (self._submit_cuda(members, name), "cuda")
            return
        if self._in_place(members):
            # The gradients' own memory goes to the engine and comes back
            # reduced: nothing is copied in or out. A frozen parameter's
            # zeros are dropped after; it keeps its None.
            arrays = [g.detach().numpy() for g in _grads(members)]
            self._handles[b] = (_native.allreduce_inplace_async(arrays, name, self._op), None)
            return
        grads, ctxs = [], []
        for grad in _grads(members):
            g, ctx = self._compression.compress(grad)
            grads.append(g.detach().numpy())
            ctxs.append(ctx)
        op = self._op
        if op == _er.Average and self._predivide != 1.0:
            # Horovod's predivision: a sum of gradients scaled by 1/f before
            # and f/size after.
            op = _er.Sum
            for g in grads:
                _er._check_post(g, self._predivide)
            grads = [_er._prescaled(g, 1.0 / self._predivide) for g in grads]
        if len(members) > 1:
            h = _native.grouped_allreduce_async(grads, name, op)
        else:
            h = _native.allreduce_async(grads[0], name, op)
        self._handles[b] = (h, ctxs)

    def _hook(self, p):
        if p in self._ready:
            raise RuntimeError(
                "a gradient was computed twice before step(): call optimizer.synchronize() "
                "between backward passes, or raise backward_passes_per_step"
            )
        self._delay[p] -= 1
        if self._delay[p] == 0:
            self._ready.add(p)
            b = self._bucket_of[p]
            self._left[b] -= 1
            if self._left[b] == 0:
                self._submit(b)

    def synchronize(self):
        """Waits for every bucket's allreduce; buckets whose hooks did not all
        run (unused parameters) are submitted now, with zeros for gradients
        that are None (a parameter that no longer requires a gradient keeps
        None)."""
        try:
            for b, members in enumerate(self._buckets):
                if b not in self._handles:
                    for p in members:
                        if p.grad is None and p.requires_grad:
                            p.grad = torch.zeros_like(p)
                    self._submit(b)
            for b, (h, ctxs) in list(self._handles.items()):
                if ctxs == "cuda":
                    self._take_cuda(h)
                    continue
                if ctxs is None:
                    h.wait()  # reduced in place
                    continue
                members = self._buckets[b]
                results = h.wait() if len(members) > 1 else [h.wait()]
                if self._op == _er.Average and self._predivide != 1.0:
                    for r in results:
                        r *= self._predivide / _er.size()
                for p, r, ctx in zip(members, results, ctxs):
                    if p.grad is not None:
                        self._take(p, r, ctx)
        finally:
            # Also after a failure: the next step starts afresh (an elastic
            # run restores the state and goes on in a new generation).
            self._reset_handles()

    def _take_cuda(self, works):
        for members, w, in_place, ctxs in works:
            r = w.wait()
            if in_place:
                continue
            at = 0
            for p, ctx in zip(members, ctxs):
                n = p.numel()
                if p.grad is not None:
                    out = self._compression.decompress(r.reshape(-1)[at:at + n], ctx).reshape(p.grad.shape)
                    with torch.no_grad():
                        p.grad.copy_(out)
                at += n

    def _take(self, p, result, ctx):
        out = self._compression.decompress(torch.from_numpy(result), ctx).reshape(p.grad.shape)
        if out.dtype == p.grad.dtype and p.grad.is_contiguous():
            # The result is the engine's new array (a bucket's: a slice of
            # it): it becomes the gradient, without a copy.
            p.grad = out
        else:
            with torch.no_grad():
                p.grad.copy_(out)

    def _reset_handles(self):
        self._handles.clear()
        self._ready.clear()
        self._left = [len(ps) for ps in self._buckets]
        for p in self._bucket_of:
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
        out = super(self.__class__, self).step(closure)
        # The steps the training state holds: elasticrun's recovery line
        # says how many a failure rolled back.
        _native.set_steps(_native.steps() + 1)
        return out

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
    over every rank, as horovod.torch's does. ``groups`` (a number of groups,
    or lists of parameters reduced together; ``num_groups`` is its old name)
    replaces the buckets of ``ELASTICRUN_BUCKET_MB``."""
    if process_set is not None:
        raise NotImplementedError("process sets are not supported by elasticrun")
    if groups is None and num_groups:
        groups = num_groups
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, groups)
