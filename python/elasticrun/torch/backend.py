"""torch.distributed's backend named ``elasticrun``: ``DistributedDataParallel``
and every ``torch.distributed`` collective a training script calls run on
elasticrun's engine (negotiation, response cache, fusion, shared memory,
TLS) instead of Gloo.

    dist.init_process_group("elasticrun")        # started by elasticrun

No import is needed: the ``elasticrun`` package names this module's
``register`` under the ``torch.distributed.backends`` entry point, which torch
2.14 and newer look up the first time a backend's name is used.

The backend is a Python subclass of c10d's ``Backend`` (torch's PyBackend
trampoline, torch 2.14 and newer), one per process group, world-wide only.
Every call is submitted to the engine under a name made of the call, the
element type, the shape and the reduction (``c10d.allreduce.sum.float32.
[2048]``): a program's calls repeat from step to step under the same names,
so the engine's response cache answers them (DDP's buckets included), and
two calls of one name in flight at once are run one after the other in the
order each rank submitted them. An allreduce reduces the tensors where they
lie (their memory is lent to the engine: no copy in, none out); the other
calls copy their results into the output tensors. CUDA tensors go to NCCL
through the engine as they lie (``elasticrun.torch.cuda``): allreduce and
broadcast in place, all_gather_into_tensor and reduce_scatter_tensor copied
device to device into their outputs; the other calls on CUDA tensors cross
the host. docs/python.md has what each call does here and what is refused.
"""

import os
import queue
import threading
import weakref

import torch
import torch.distributed as dist

import elasticrun as _er
from elasticrun import _elasticrun as _native

from . import cuda as _cuda

# torch.distributed.nn.functional gives its functions the world process
# group as a default argument (``group=group.WORLD``, evaluated once, when
# the module is first imported). DistributedDataParallel and fully_shard
# import it (through torch.distributed._shard) after the group is made, and
# those defaults then keep the group, its backend and its threads alive
# past ``destroy_process_group`` until the interpreter's own teardown, where
# a backend thread that still needs the interpreter ends the process with
# SIGABRT ("terminate called without an active exception"; docs/python.md).
# Imported here, before any group exists, the defaults are None.
try:
    import torch.distributed.nn.functional  # noqa: F401
except ImportError:  # pragma: no cover - torch without torch.distributed.nn
    pass

try:
    from torch._C._distributed_c10d import Backend as _C10dBackend
    from torch._C._distributed_c10d import ReduceOp as _ReduceOp
except ImportError:  # pragma: no cover - torch without c10d
    _C10dBackend = object
    _ReduceOp = None

NAME = "elasticrun"

# What elasticrun gives the programs it starts (a launcher's worker, a pod).
_STARTED_BY = ("ELASTICRUN_COORDINATOR", "ELASTICRUN_ETCD")

#: The first torch whose c10d lets a Python class be a backend.
MIN_TORCH = (2, 14)

# Element types the engine reduces, and the ones it only moves (viewed as a
# type of the same width: their bytes travel unchanged).
_REDUCED = {torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.uint8}
_MOVED_AS = {torch.int8: torch.uint8, torch.bool: torch.uint8, torch.bfloat16: torch.float16,
             torch.int16: torch.float16}


def _torch_version():
    parts = torch.__version__.split("+")[0].split(".")
    return tuple(int("".join(c for c in p if c.isdigit()) or 0) for p in parts[:2])


def register():
    """Registers the backend with torch (the entry point calls this)."""
    if _torch_version() < MIN_TORCH:
        raise RuntimeError(
            f"the elasticrun torch.distributed backend needs torch "
            f"{MIN_TORCH[0]}.{MIN_TORCH[1]} or newer (this is {torch.__version__}); "
            "on older torch, use elasticrun.torch's Horovod API (torch 2.1 or newer)"
        )
    if NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def init_process_group(**kwargs):
    """Makes torch's default process group on this backend for the current
    generation: the rank and world size elasticrun placed this process at
    (an elastic job's workers get no ``RANK``/``WORLD_SIZE``: the world
    changes), and a store of this process's own (the backend needs none).
    ``kwargs`` go to ``torch.distributed.init_process_group``."""
    if not _er.is_initialized():
        from . import init

        init()
    register()
    dist.init_process_group(NAME, rank=_er.rank(), world_size=_er.size(),
                            store=dist.HashStore(), **kwargs)


#: Things remade for every new generation (``DistributedDataParallel``).
_REMADE = weakref.WeakSet()

#: The failure a call of this generation ended with (``WorkersFailed``):
#: torch passes it on as a plain ``RuntimeError`` (DDP's backward), which
#: ``elasticrun.torch.elastic.run`` turns back into a rollback.
_failure = None


def failure():
    """The ``WorkersFailed`` a call of this generation ended with, if any."""
    return _failure


def new_generation():
    """After elasticrun moved this process to a new generation (a reset):
    the default process group, if on this backend, made again for the new
    world, and every ``DistributedDataParallel`` of
    ``elasticrun.torch.elastic`` wrapped again around its module."""
    global _failure
    _failure = None
    if not dist.is_initialized() or dist.get_backend() != NAME:
        return
    dist.destroy_process_group()
    init_process_group()
    for remade in list(_REMADE):
        remade._remake()


def _create(opts, backend_options):
    """Makes the backend of a process group (torch's extended API)."""
    if opts.split_from is not None or (
        opts.global_ranks_in_group and len(opts.global_ranks_in_group) != opts.group_size
    ):
        raise _refused("a process group split from another")
    if not any(os.environ.get(v) for v in _STARTED_BY):
        raise RuntimeError(
            "the elasticrun backend runs in programs started by elasticrun: "
            "elasticrun -np 2 python train.py (this one was not: no ELASTICRUN_COORDINATOR "
            "or ELASTICRUN_ETCD in its environment)"
        )
    if not _er.is_initialized():
        _er.init()
    if opts.group_size != _er.size() or opts.group_rank != _er.rank():
        if opts.global_ranks_in_group and len(opts.global_ranks_in_group) != _er.size():
            raise _refused("a process group of some of the ranks (new_group, a 2-D mesh)")
        raise RuntimeError(
            f"the elasticrun backend was asked for rank {opts.group_rank} of {opts.group_size}, "
            f"but elasticrun placed this process as rank {_er.rank()} of {_er.size()}: "
            "leave rank= and world_size= out of init_process_group, or pass elasticrun's"
        )
    options = backend_options or _C10dBackend.Options(NAME, timeout=opts.timeout)
    return ElasticrunBackend(opts.group_rank, opts.group_size, options)


def _refused(what, instead="run it on a world-wide group, or on Gloo (\"cpu:gloo\")"):
    return NotImplementedError(f"the elasticrun backend does not run {what}; {instead}")


def _op(reduce_op):
    """Horovod's op code for torch's ``ReduceOp``, and the factor of a
    PREMUL_SUM (1 otherwise)."""
    kind = reduce_op.op if hasattr(reduce_op, "op") else reduce_op
    codes = {
        _ReduceOp.SUM: (_er.Sum, 1.0),
        _ReduceOp.AVG: (_er.Average, 1.0),
        _ReduceOp.MIN: (_er.Min, 1.0),
        _ReduceOp.MAX: (_er.Max, 1.0),
        _ReduceOp.PRODUCT: (_er.Product, 1.0),
    }
    if kind in codes:
        return codes[kind]
    if kind == _ReduceOp.PREMUL_SUM:
        factor = reduce_op.factor
        return _er.Sum, float(factor.item() if isinstance(factor, torch.Tensor) else factor)
    raise _refused(f"the reduction {kind}", "use SUM, AVG, MIN, MAX, PRODUCT or PREMUL_SUM")


_OP_NAMES = {0: "avg", 1: "sum", 3: "min", 4: "max", 5: "product"}


def _check(tensor, call, reduced=False):
    if tensor.device.type not in ("cpu", "cuda"):
        raise _refused(f"{call} on {tensor.device} tensors",
                       "keep the tensors on the CPU or a CUDA GPU")
    if tensor.is_cuda and reduced and tensor.dtype == torch.bfloat16:
        return  # NCCL reduces bfloat16
    if reduced and tensor.dtype not in _REDUCED:
        raise TypeError(
            f"the elasticrun backend reduces float32, float64, float16, int32, int64 and uint8 "
            f"tensors; {call} was given {tensor.dtype}"
        )
    if not reduced and tensor.dtype not in _REDUCED and tensor.dtype not in _MOVED_AS:
        raise TypeError(f"the elasticrun backend cannot move {tensor.dtype} tensors ({call})")


def _moved(tensor):
    """``tensor`` as the engine moves it: contiguous, of a type it has."""
    t = tensor.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    as_ = _MOVED_AS.get(t.dtype)
    return t.view(as_) if as_ is not None else t


def _array(tensor):
    """The engine's host form of ``tensor`` (a CUDA one copied to the host:
    the calls without an NCCL path here)."""
    t = _moved(tensor)
    return (t.cpu() if t.is_cuda else t).numpy()


def _name(call, tensors, op=None):
    t = tensors[0]
    shapes = ",".join(str(list(x.shape)) for x in tensors)
    op = f"{_OP_NAMES.get(op, op)}." if op is not None else ""
    where = "cuda." if t.is_cuda else ""
    return f"c10d.{where}{call}.{op}{str(t.dtype).replace('torch.', '')}.{shapes}"


def _cuda_moved(tensor):
    """A CUDA tensor as NCCL moves it (bfloat16 as itself), contiguous."""
    if tensor.dtype == torch.bfloat16:
        return tensor.detach().contiguous()
    return _moved(tensor)


def _settled(tensor):
    """Waits until the copies issued on this thread's stream into
    ``tensor`` have run: a Work's outputs are complete when it is, whatever
    stream reads them next."""
    if tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()


def _copy_into(out, result):
    """Copies the engine's ``result`` (a numpy array) into ``out``."""
    src = torch.from_numpy(result)
    with torch.no_grad():
        if out.dtype in _MOVED_AS:
            out.view(_MOVED_AS[out.dtype]).view(-1).copy_(src.reshape(-1))
        else:
            out.view(-1).copy_(src.reshape(-1))


class _Handles:
    """Several native handles waited for as one."""

    def __init__(self, handles):
        self._handles = handles

    def wait(self):
        return [h.wait() for h in self._handles]


class _Done:
    """A call that finished when it was made."""

    def wait(self):
        return None


class _Work(dist._Work):
    """A call in flight. ``wait()`` blocks until its outputs hold the result
    (the interpreter is released meanwhile); ``get_future()`` is completed
    with the output tensors by a thread of the backend, so that DDP's
    reducer goes on with its backward pass while the engine reduces."""

    def __init__(self, backend, native, finish, outputs):
        super().__init__()
        self._backend = backend
        self._native = native
        self._finish = finish
        self._outputs = outputs
        self._lock = threading.Lock()
        self._state = None
        self._future = None

    def _complete(self):
        with self._lock:
            if self._state is None:
                try:
                    result = self._native.wait()
                    if self._finish is not None:
                        self._finish(result)
                    self._state = True
                except BaseException as e:  # noqa: B902 - handed to the waiter
                    self._state = e
                    if isinstance(e, _native.WorkersFailed):
                        global _failure
                        _failure = e
                self._native = self._finish = None
        if self._state is not True:
            raise self._state

    def wait(self, timeout=None):
        self._complete()
        return True

    def is_completed(self):
        return self._state is not None

    def is_success(self):
        return self._state is True

    def get_future(self):
        if self._future is None:
            self._future = torch.futures.Future()
            self._backend._completer().put(self)
        return self._future

    def _settle(self):
        try:
            self._complete()
        except BaseException as e:  # noqa: B902 - the future carries it
            self._future.set_exception(e)
            return
        self._future.set_result(self._outputs)


def _settle_forever(works):
    while True:
        work = works.get()
        if work is None:
            return
        work._settle()
        # Not kept while waiting for the next: a work holds its backend,
        # which could then never go (nor this thread with it).
        del work


class ElasticrunBackend(_C10dBackend):
    """The backend of one world-wide process group on elasticrun's engine."""

    def __init__(self, rank, size, options):
        super().__init__(rank, size)
        self._options = options
        self._works = None

    @property
    def options(self):
        return self._options

    @property
    def supports_splitting(self):
        return False

    def getBackendName(self):
        return NAME

    def _completer(self):
        if self._works is None:
            self._works = queue.SimpleQueue()
            threading.Thread(target=_settle_forever, args=(self._works,),
                             name="elasticrun-c10d", daemon=True).start()
            # The thread ends with the backend (destroy_process_group, a
            # new generation's group): one thread a generation otherwise.
            weakref.finalize(self, self._works.put, None)
        return self._works

    def _work(self, native, finish=None, outputs=()):
        return _Work(self, native, finish, list(outputs))

    # Reductions.

    def allreduce(self, tensors, opts):
        for t in tensors:
            _check(t, "allreduce", reduced=True)
        code, factor = _op(opts.reduceOp)
        if tensors and tensors[0].is_cuda:
            name = _name("allreduce", tensors, code)
            works = [_cuda.allreduce(t, f"{name}.{i}", code, factor, 1.0, True) for i, t in enumerate(tensors)]
            return self._work(_Handles(works), None, tensors)
        if factor != 1.0:
            with torch.no_grad():
                for t in tensors:
                    t.mul_(factor)
        whole = [t for t in tensors if t.is_contiguous()]
        if len(whole) == len(tensors):
            arrays = [t.detach().numpy() for t in tensors]
            h = _native.allreduce_inplace_async(arrays, _name("allreduce", tensors, code), code)
            return self._work(h, None, tensors)
        # A strided tensor is reduced through a contiguous copy.
        copies = [t.detach().contiguous() for t in tensors]
        h = _native.allreduce_inplace_async([c.numpy() for c in copies],
                                            _name("allreduce", tensors, code), code)

        def back(_):
            with torch.no_grad():
                for t, c in zip(tensors, copies):
                    t.copy_(c)
        return self._work(h, back, tensors)

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        # An allreduce whose result only the root keeps: the others' tensors
        # are given back as they were.
        kept = None if self.rank() == opts.rootRank else [t.clone() for t in tensors]
        work = self.allreduce(tensors, opts)
        if kept is None:
            return work

        def restore(_):
            work.wait()
            with torch.no_grad():
                for t, k in zip(tensors, kept):
                    t.copy_(k)
        return self._work(_Done(), restore, tensors)

    def reduce_scatter_single(self, output, input, opts):
        _check(input, "reduce_scatter_tensor", reduced=True)
        code, factor = _op(opts.reduceOp)
        n = self.size()
        if input.numel() != output.numel() * n:
            raise ValueError(
                f"reduce_scatter_tensor: the input has {input.numel()} elements, not "
                f"{n} times the output's {output.numel()}"
            )
        flat = input.detach().contiguous().reshape(n, -1)
        if factor != 1.0:
            flat = flat * factor
        if input.is_cuda:
            def take(r):
                with torch.no_grad():
                    output.view(-1).copy_(r.reshape(-1))
                _settled(output)
            w = _cuda.reducescatter(flat.reshape(-1), _name("reduce_scatter", [input], code), code)
            return self._work(w, take, [output])
        h = _native.reducescatter_async(flat.numpy(), _name("reduce_scatter", [input], code), code)
        return self._work(h, lambda r: _copy_into(output, r), [output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        works = [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._work(_Handles(works), None, outputs)

    def reduce_scatter(self, outputs, inputs, opts):
        works = []
        for out, ins in zip(outputs, inputs):
            works.append(self.reduce_scatter_single(out, torch.cat([t.reshape(-1) for t in ins]),
                                                    opts))
        return self._work(_Handles(works), None, outputs)

    # Data movement.

    def broadcast(self, tensors, opts):
        for t in tensors:
            _check(t, "broadcast")
        root = opts.rootRank
        if tensors and tensors[0].is_cuda:
            works = [_cuda.broadcast(t, root, f"{_name('broadcast', [t])}.{i}", True)
                     for i, t in enumerate(tensors)]
            return self._work(_Handles(works), None, tensors)
        hs = [_native.broadcast_async(_array(t), root, _name("broadcast", [t])) for t in tensors]

        def back(results):
            if self.rank() != root:
                for t, r in zip(tensors, results):
                    _copy_into(t, r)
        return self._work(_Handles(hs), back, tensors)

    def allgather(self, outputs, inputs, opts):
        for t in inputs:
            _check(t, "all_gather")
        if inputs and inputs[0].is_cuda:
            works = [self.all_gather_single(torch.empty(self.size() * t.numel(), dtype=t.dtype, device=t.device),
                                            t, opts) for t in inputs]

            def spread(_):
                for outs, w in zip(outputs, works):
                    whole = w._outputs[0].view(len(outs), -1)
                    with torch.no_grad():
                        for o, row in zip(outs, whole):
                            o.view(-1).copy_(row)
                    _settled(outs[0])
            return self._work(_Handles(works), spread, outputs)
        hs = [_native.allgather_async(_array(t).reshape(1, -1), _name("allgather", [t]))
              for t in inputs]

        def back(results):
            for outs, r in zip(outputs, results):
                for o, row in zip(outs, r):
                    _copy_into(o, row)
        return self._work(_Handles(hs), back, outputs)

    def allgather_coalesced(self, output_lists, inputs, opts):
        return self.allgather(output_lists, inputs, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._work(_Handles(works), None, outputs)

    def all_gather_single(self, output, input, opts):
        _check(input, "all_gather_into_tensor")
        if output.numel() != input.numel() * self.size():
            raise ValueError(
                f"all_gather_into_tensor: the output has {output.numel()} elements, not "
                f"{self.size()} times the input's {input.numel()}"
            )
        if input.is_cuda:
            src = _cuda_moved(input).reshape(1, -1)

            def take(r):
                with torch.no_grad():
                    output.view(src.dtype).view(-1).copy_(r.reshape(-1))
                _settled(output)
            return self._work(_cuda.allgather(src, _name("allgather", [input])), take, [output])
        h = _native.allgather_async(_array(input).reshape(1, -1), _name("allgather", [input]))
        return self._work(h, lambda r: _copy_into(output, r), [output])

    _allgather_base = all_gather_single

    def gather(self, outputs, inputs, opts):
        # An allgather; ranks other than the root gather into scratch.
        if not outputs or not outputs[0]:
            outputs = [[torch.empty_like(inputs[0]) for _ in range(self.size())]]
        return self.allgather(outputs, inputs, opts)

    def scatter(self, outputs, inputs, opts):
        out = outputs[0]
        _check(out, "scatter")
        n = self.size()
        if self.rank() == opts.rootRank:
            whole = torch.cat([t.reshape(-1) for t in inputs[0]])
        else:
            whole = torch.empty(n * out.numel(), dtype=out.dtype)
        h = _native.broadcast_async(_array(whole), opts.rootRank, _name("scatter", [out]))
        mine = slice(self.rank() * out.numel(), (self.rank() + 1) * out.numel())
        return self._work(h, lambda r: _copy_into(out, r.reshape(-1)[mine]), [out])

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        _check(input, "all_to_all_single")
        rows = input.shape[0] if input.dim() else 1
        arr = _array(input).reshape(rows, -1)
        splits = list(input_split_sizes) if input_split_sizes else None
        h = _native.alltoall_async(arr, splits, _name("alltoall", [input]))
        expected = list(output_split_sizes) if output_split_sizes else None

        def back(result):
            got, counts = result
            if expected is not None and list(counts) != expected:
                raise ValueError(f"all_to_all_single: received rows {list(counts)}, "
                                 f"expected {expected}")
            _copy_into(output, got)
        return self._work(h, back, [output])

    _alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts):
        for t in inputs:
            _check(t, "all_to_all")
        flat = torch.cat([_moved(t).reshape(-1) for t in inputs]).reshape(-1, 1)
        splits = [t.numel() for t in inputs]
        h = _native.alltoall_async(_array(flat), splits, _name("alltoall_list", inputs))

        def back(result):
            got, counts = result
            got = got.reshape(-1)
            at = 0
            for o, c in zip(outputs, counts):
                _copy_into(o, got[at:at + c])
                at += c
        return self._work(h, back, outputs)

    def barrier(self, opts):
        _native.barrier()
        return self._work(_Done())

    # Refused.

    def send(self, tensors, dst, tag=0):
        raise _refused("send", "use a collective (broadcast, all_to_all_single) instead")

    def recv(self, tensors, src, tag=0):
        raise _refused("recv", "use a collective (broadcast, all_to_all_single) instead")

    def allreduce_sparse(self, tensors, opts):
        raise _refused("an allreduce of sparse tensors", "reduce their dense form (to_dense())")

    def recv_anysource(self, tensors, tag=0):
        raise _refused("recv from any source", "use a collective instead")
