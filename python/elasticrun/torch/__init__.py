"""``horovod.torch``'s API on elasticrun: change ``import horovod.torch as
hvd`` to ``import elasticrun.torch as hvd``. docs/python.md lists every name
beside Horovod's.

CPU tensors cross into the engine through ``Tensor.numpy()``, which shares
their memory, and results come back through ``torch.from_numpy``; in-place
forms (``allreduce_``, ``broadcast_``) copy the result into the tensor given.
CUDA tensors go to NCCL as they lie, ordered on the caller's current stream
(``elasticrun.torch.cuda``).
"""

import os as _os
import pickle

import numpy as _np
import torch as _torch

import elasticrun as _er
from elasticrun import _elasticrun as _native
from elasticrun import (
    Adasum,
    Average,
    ElasticrunError,
    Max,
    Min,
    Product,
    Sum,
    barrier,
    cross_rank,
    cross_size,
    is_initialized,
    join,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)

from . import cuda as _cuda
from . import elastic
from .compression import Compression
from .optimizer import DistributedOptimizer
from .sync_batch_norm import SyncBatchNorm

__all__ = [
    "Adasum", "Average", "Compression", "DistributedOptimizer", "ElasticrunError", "Max", "Min",
    "Product", "Sum", "SyncBatchNorm", "allgather", "allgather_async", "allgather_object",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall", "alltoall_async",
    "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_object",
    "broadcast_optimizer_state", "broadcast_parameters", "ccl_built", "cross_rank", "cross_size",
    "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_", "init",
    "is_initialized", "join", "local_rank", "local_size", "mpi_built", "mpi_enabled", "nccl_built",
    "poll", "rank", "reducescatter", "reducescatter_async", "rocm_built", "shutdown", "size",
    "synchronize",
]


def warm_for_hot_spares():
    """In a job with hot spares (``--hot-spares``), where this worker may
    wait inside ``init()`` to take a failed worker's place, does what torch
    does lazily before it waits: importing ``torch._dynamo``, which the first
    optimizer made imports (over a second on a CPU), would otherwise fall
    between a spare's placement and its first step."""
    if _os.environ.get("ELASTICRUN_HOT_SPARES", "0").strip() not in ("", "0"):
        import torch._dynamo  # noqa: F401


def init(*args, **kwargs):
    """``hvd.init()``: joins the job (``elasticrun.init``); in a job with hot
    spares, torch's lazy imports are done first (``warm_for_hot_spares``)."""
    warm_for_hot_spares()
    return _er.init(*args, **kwargs)


def _host(tensor):
    """``tensor`` as a numpy array sharing its memory (CPU tensors only)."""
    if not isinstance(tensor, _torch.Tensor):
        return _np.asarray(tensor)
    if tensor.device.type != "cpu":
        raise ValueError(
            f"elasticrun.torch runs collectives on CPU and CUDA tensors; this one is on {tensor.device}: "
            "copy it with .cpu()"
        )
    if tensor.dtype == _torch.bfloat16:
        raise TypeError("bfloat16 tensors are not supported yet: convert them with .float()")
    t = tensor.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def _op(average, op):
    """Horovod's rule: ``average`` (deprecated) or ``op``, Average by default."""
    if average is not None and op is not None:
        raise ValueError("give either average= or op=, not both")
    if op is None:
        return Sum if average is False else Average
    return op


class _Handle:
    """A collective in flight; ``synchronize`` turns its result into a tensor
    (and, for in-place forms, into the tensor given)."""

    def __init__(self, native, finish):
        self._native = native
        self._finish = finish

    def poll(self):
        return self._native.poll()

    def wait(self):
        return self._finish(self._native.wait())


def _like(result, tensor):
    # Results are new C-order arrays of the tensor's type.
    out = _torch.from_numpy(result)
    return out if out.dtype == tensor.dtype else out.to(tensor.dtype)


def _into(result, tensor):
    with _torch.no_grad():
        tensor.copy_(_torch.from_numpy(_np.ascontiguousarray(result)).reshape(tensor.shape))
    return tensor


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    _no_process_set(process_set)
    if _cuda.is_cuda(tensor):
        return _cuda.allreduce(tensor, name, _op(average, op), prescale_factor, postscale_factor, False)
    if prescale_factor == 1.0 and postscale_factor == 1.0:
        h = _native.allreduce_async(_host(tensor), name, _op(average, op))
    else:
        h = _er.allreduce_async(_host(tensor), name, _op(average, op), prescale_factor, postscale_factor)
    return _Handle(h, lambda r: _like(r, tensor))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    _no_process_set(process_set)
    if _cuda.is_cuda(tensor):
        return _cuda.allreduce(tensor, name, _op(average, op), prescale_factor, postscale_factor, True)
    h = _er.allreduce_async(_host(tensor), name, _op(average, op), prescale_factor, postscale_factor)
    return _Handle(h, lambda r: _into(r, tensor))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    compressed, ctx = compression.compress(tensor)
    out = synchronize(allreduce_async(compressed, average, name, op, prescale_factor,
                                      postscale_factor, process_set))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


class _Group:
    """Several handles as one: ``wait()`` gives every result, in order."""

    def __init__(self, handles):
        self._handles = handles

    def poll(self):
        return all(h.poll() for h in self._handles)

    def wait(self):
        return [h.wait() for h in self._handles]


def _cuda_group(tensors, average, name, op, in_place):
    """A group of CUDA tensors: each submitted under the group's name; the
    engine fuses those negotiated together, device to device."""
    base = name or f"grouped_allreduce.{len(tensors)}"
    return _Group([_cuda.allreduce(t, f"{base}.{i}", _op(average, op), 1.0, 1.0, in_place)
                   for i, t in enumerate(tensors)])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, process_set=None):
    _no_process_set(process_set)
    if tensors and all(_cuda.is_cuda(t) for t in tensors):
        return _cuda_group(tensors, average, name, op, False)
    h = _er.grouped_allreduce_async([_host(t) for t in tensors], name, _op(average, op))
    return _Handle(h, lambda rs: [_like(r, t) for r, t in zip(rs, tensors)])


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, process_set=None):
    _no_process_set(process_set)
    if tensors and all(_cuda.is_cuda(t) for t in tensors):
        return _cuda_group(tensors, average, name, op, True)
    h = _er.grouped_allreduce_async([_host(t) for t in tensors], name, _op(average, op))
    return _Handle(h, lambda rs: [_into(r, t) for r, t in zip(rs, tensors)])


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      process_set=None):
    pairs = [compression.compress(t) for t in tensors]
    outs = synchronize(grouped_allreduce_async([p[0] for p in pairs], average, name, op, process_set))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, process_set))


def allgather_async(tensor, name=None, process_set=None):
    _no_process_set(process_set)
    if _cuda.is_cuda(tensor):
        return _cuda.allgather(tensor, name)
    return _Handle(_er.allgather_async(_host(tensor), name), lambda r: _like(r, tensor))


def allgather(tensor, name=None, process_set=None):
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    _no_process_set(process_set)
    if _cuda.is_cuda(tensor):
        return _cuda.broadcast(tensor, root_rank, name, False)
    return _Handle(_er.broadcast_async(_host(tensor), root_rank, name), lambda r: _like(r, tensor))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    _no_process_set(process_set)
    if _cuda.is_cuda(tensor):
        return _cuda.broadcast(tensor, root_rank, name, True)
    return _Handle(_er.broadcast_async(_host(tensor), root_rank, name), lambda r: _into(r, tensor))


def broadcast(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    _no_process_set(process_set)
    given = splits is not None
    if given and isinstance(splits, _torch.Tensor):
        splits = splits.tolist()

    device = tensor.device if _cuda.is_cuda(tensor) else None
    # bfloat16 rows only move: they travel as float16 of the same bytes.
    moved = _torch.float16 if tensor.dtype == _torch.bfloat16 else None

    def finish(r):
        out, received = r
        out = _torch.from_numpy(out)
        out = out.view(tensor.dtype) if moved is not None else _like(r[0], tensor)
        if device is not None:
            # The engine has no NCCL alltoall yet: CUDA tensors cross the
            # host (docs/python.md, "GPUs").
            out = out.to(device)
        return (out, _torch.tensor(received, dtype=_torch.int32)) if given else out

    source = tensor.detach().cpu() if device is not None else tensor.detach()
    if moved is not None:
        source = source.contiguous().view(moved)
    return _Handle(_er.alltoall_async(_host(source), splits, name), finish)


def alltoall(tensor, splits=None, name=None, process_set=None):
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=Average, process_set=None):
    _no_process_set(process_set)
    if _cuda.is_cuda(tensor):
        return _cuda.reducescatter(tensor, name, op)
    return _Handle(_er.reducescatter_async(_host(tensor), name, op), lambda r: _like(r, tensor))


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=None):
    compressed, ctx = compression.compress(tensor)
    out = synchronize(reducescatter_async(compressed, name, op, process_set))
    return compression.decompress(out, ctx)


def poll(handle):
    return handle.poll()


def synchronize(handle):
    return handle.wait()


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """``obj`` of ``root_rank``, pickled there and unpickled everywhere."""
    _no_process_set(process_set)
    name = name or type(obj).__name__
    return _er._broadcast_pickled(obj, root_rank, f"bcast_object.{name}")


def allgather_object(obj, name=None, process_set=None):
    """Every rank's ``obj``, in rank order."""
    _no_process_set(process_set)
    name = name or type(obj).__name__
    data = _np.frombuffer(pickle.dumps(obj), dtype=_np.uint8)
    sizes = _er.allgather(_np.array([data.size], _np.int64), f"allgather_object.{name}.len")
    blob = _er.allgather(data, f"allgather_object.{name}.data")
    out, at = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(blob[at:at + n].tobytes()))
        at += n
    return out


def broadcast_parameters(params, root_rank):
    """Copies ``root_rank``'s parameters (a ``state_dict()``, or
    ``named_parameters()``) into every rank's, in place."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
        if items and not isinstance(items[0], tuple):
            items = [(f"param.{i}", p) for i, p in enumerate(items)]
    handles = [broadcast_async_(p, root_rank, name=f"broadcast.{n}") for n, p in items
               if isinstance(p, _torch.Tensor)]
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank):
    """Gives every rank ``root_rank``'s optimizer state (pickled, unlike
    Horovod's tensor-by-tensor broadcast; the result is the same)."""
    state = broadcast_object(optimizer.state_dict(), root_rank, name="optimizer_state")
    optimizer.load_state_dict(state)


def _no_process_set(process_set):
    if process_set is not None:
        raise NotImplementedError(
            "process sets are not supported by elasticrun: every collective spans the job "
            "(run separate jobs for separate groups)"
        )


# What this build has, answered truthfully: elasticrun moves host data on its
# own TCP/QUIC rings and shared memory, not through Gloo or MPI; CUDA tensors
# go through NCCL when this build has the GPU path.
def gloo_built():
    return False


def gloo_enabled():
    return False


def mpi_built():
    return False


def mpi_enabled():
    return False


def nccl_built():
    return _cuda.built()


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return _cuda.built()


def rocm_built():
    return False
