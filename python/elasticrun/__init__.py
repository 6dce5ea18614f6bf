"""elasticrun for Python: collectives on numpy arrays through elasticrun's
worker runtime and engine (negotiation, response cache, fusion, timeline,
stall check, autotune), with Horovod's names. Run a script that uses it with
``elasticrun -np 2 python train.py``; ``elasticrun.torch`` offers the same on
CPU torch tensors with ``horovod.torch``'s names.

Every ``*_async`` function returns a handle; ``poll(handle)`` says whether it
is done and ``synchronize(handle)`` waits for its result (the interpreter is
released while it waits). The blocking forms submit and wait. Results are new
arrays; inputs are not modified unless a function's name ends in ``_``.
"""

import atexit as _atexit
import os as _os
import sys as _sys

import numpy as _np

from . import _elasticrun as _native
from ._elasticrun import (
    ElasticrunError,
    barrier,
    cross_rank,
    cross_size,
    init,
    is_initialized,
    join,
    local_rank,
    local_size,
    rank,
    shutdown,
    size,
)

__all__ = [
    "ElasticrunError",
    "Average",
    "Sum",
    "Adasum",
    "Min",
    "Max",
    "Product",
    "init",
    "shutdown",
    "is_initialized",
    "rank",
    "size",
    "local_rank",
    "local_size",
    "cross_rank",
    "cross_size",
    "allreduce",
    "allreduce_async",
    "grouped_allreduce",
    "grouped_allreduce_async",
    "allgather",
    "allgather_async",
    "broadcast",
    "broadcast_async",
    "alltoall",
    "alltoall_async",
    "reducescatter",
    "reducescatter_async",
    "barrier",
    "join",
    "poll",
    "synchronize",
]

# A training process's own threads keep every core it has busy: the runtime
# sleeps as soon as it waits (for a peer's data, for more gradients) instead
# of yielding and looking again, which took those cores' time from training
# (mobilenet_v2, 2 ranks on 2 cores: 1.04x the img/s); its shared-memory
# links then take 16 MiB rings, handing a large bucket to a peer whose core
# trains in fewer, larger pieces (docs/collectives.md). Set
# ELASTICRUN_SPIN_US before the import to choose otherwise.
_os.environ.setdefault("ELASTICRUN_SPIN_US", "0")

# A script that never calls shutdown() leaves cleanly at exit, as Horovod's
# do; its peers then see it leave, not crash. One that dies of an uncaught
# exception does not: that is a failure, for its peers and for elasticrun.
_uncaught = []
_previous_hook = _sys.excepthook


def _note_uncaught(kind, value, tb):
    _uncaught.append(kind)
    _previous_hook(kind, value, tb)


_sys.excepthook = _note_uncaught


def _leave_at_exit():
    if not _uncaught:
        _native.shutdown()


_atexit.register(_leave_at_exit)

# Horovod's reduction codes.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5


class _Scaled:
    """A handle whose result is multiplied by ``factor`` when it is taken."""

    def __init__(self, handle, factor):
        self._handle = handle
        self._factor = factor

    def poll(self):
        return self._handle.poll()

    def wait(self):
        out = self._handle.wait()
        if self._factor != 1.0:
            out = (out * self._factor).astype(out.dtype, copy=False)
        return out


def _array(a):
    """``a`` as a numpy array (torch CPU tensors and lists included)."""
    return _np.asarray(a)


def _prescaled(a, factor):
    if factor == 1.0:
        return a
    if not _np.issubdtype(a.dtype, _np.floating):
        raise ValueError(f"prescale_factor applies to floating-point arrays, not {a.dtype}")
    return (a * factor).astype(a.dtype, copy=False)


def _check_post(a, factor):
    if factor != 1.0 and not _np.issubdtype(a.dtype, _np.floating):
        raise ValueError(f"postscale_factor applies to floating-point arrays, not {a.dtype}")


def allreduce_async(array, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing ``array`` over all ranks with ``op``."""
    a = _array(array)
    _check_post(a, postscale_factor)
    h = _native.allreduce_async(_prescaled(a, prescale_factor), name, op)
    return _Scaled(h, postscale_factor) if postscale_factor != 1.0 else h


def allreduce(array, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0):
    """``array`` reduced over all ranks (a new array)."""
    return synchronize(allreduce_async(array, name, op, prescale_factor, postscale_factor))


def grouped_allreduce_async(arrays, name=None, op=Average):
    """Starts reducing ``arrays`` (one dtype) as one negotiated, fused tensor."""
    return _native.grouped_allreduce_async([_array(a) for a in arrays], name, op)


def grouped_allreduce(arrays, name=None, op=Average):
    return synchronize(grouped_allreduce_async(arrays, name, op))


def allgather_async(array, name=None):
    """Starts concatenating every rank's ``array`` along the first dimension."""
    return _native.allgather_async(_array(array), name)


def allgather(array, name=None):
    return synchronize(allgather_async(array, name))


def broadcast_async(array, root_rank, name=None):
    """Starts copying ``root_rank``'s ``array`` to every rank."""
    return _native.broadcast_async(_array(array), root_rank, name)


def broadcast(array, root_rank, name=None):
    return synchronize(broadcast_async(array, root_rank, name))


def _broadcast_pickled(obj, root_rank, name):
    """``obj`` of ``root_rank``, pickled there and unpickled everywhere, in
    one round: the other ranks need not know its length."""
    import pickle

    mine = rank() == root_rank
    data = _np.frombuffer(pickle.dumps(obj), _np.uint8) if mine else _np.zeros(0, _np.uint8)
    got = synchronize(_native.broadcast_sized_async(data, root_rank, name))
    return pickle.loads(got.tobytes())


def alltoall_async(array, splits=None, name=None):
    """Starts sending ``splits[j]`` rows of ``array`` to rank ``j`` (even when
    ``None``); the result is ``(received, received_splits)``."""
    if splits is not None:
        splits = [int(s) for s in _np.asarray(splits).reshape(-1)]
    return _native.alltoall_async(_array(array), splits, name)


def alltoall(array, splits=None, name=None):
    return synchronize(alltoall_async(array, splits, name))


def reducescatter_async(array, name=None, op=Average):
    """Starts reducing ``array`` and keeping this rank's share of its rows."""
    return _native.reducescatter_async(_array(array), name, op)


def reducescatter(array, name=None, op=Average):
    return synchronize(reducescatter_async(array, name, op))


def poll(handle):
    """Whether ``handle``'s collective has completed."""
    return handle.poll()


def synchronize(handle):
    """Waits for ``handle``'s collective and returns its result."""
    return handle.wait()
