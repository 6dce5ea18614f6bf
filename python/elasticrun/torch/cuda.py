"""CUDA tensors through elasticrun's engine and NCCL (docs/python.md, "GPUs").

A CUDA tensor's device memory is lent to the engine as it lies: the
submission records an event on the caller's current stream, which the
engine's NCCL work waits for on the GPU (no host wait), and the engine's
negotiation, response cache and fusion work as for host tensors (a fused
group is packed device to device). ``wait()`` returns once the NCCL work
has run, so the caller's stream may use the result at once. Allreduce and
broadcast work in place; allgather and reducescatter results are copied
device to device into a new tensor on the caller's stream. Alltoall has no
NCCL path in the engine yet and goes through host memory.

The engine uses the NCCL library torch loaded (one NCCL in the process); the
first CUDA collective checks that its version is the one torch reports.
"""

import os

import torch

from elasticrun import ElasticrunError
from elasticrun import _elasticrun as _native

_checked = False


def built():
    """Whether this build of the native module has the GPU path."""
    return bool(getattr(_native, "CUDA_BUILT", False))


def _torch_nccl_version():
    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    if isinstance(v, tuple):
        major, minor, patch = (list(v) + [0, 0, 0])[:3]
        return major * 10000 + minor * 100 + patch
    return int(v)


def _version_text(code):
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def check():
    """Once per process: says clearly why CUDA tensors cannot go through the
    engine (a build without the GPU path, no driver, no NCCL), and that the
    engine's NCCL is the one torch uses."""
    global _checked
    if _checked:
        return
    if not built():
        raise ElasticrunError(
            "this elasticrun package was built without the GPU path (cargo feature `cuda`): "
            "CUDA tensors cannot go through it; reinstall the published wheel, or keep tensors on the CPU"
        )
    why = _native.gpu_unavailable()
    if why is not None:
        raise ElasticrunError(f"CUDA tensors cannot go through elasticrun here: {why}")
    ours, theirs = _native.nccl_version(), _torch_nccl_version()
    if theirs is not None and ours != theirs:
        text = (
            f"elasticrun's NCCL ({_native.nccl_library()}, {_version_text(ours)}) is not the one torch "
            f"uses ({_version_text(theirs)}): two NCCLs in one process"
        )
        if os.environ.get("ELASTICRUN_NCCL_LIBRARY"):
            import warnings

            warnings.warn(text + " (ELASTICRUN_NCCL_LIBRARY chose it)", stacklevel=3)
        else:
            raise ElasticrunError(text + "; unset LD_LIBRARY_PATH entries that hold another libnccl, "
                                  "or name torch's in ELASTICRUN_NCCL_LIBRARY (docs/gpu.md)")
    _checked = True


def is_cuda(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.is_cuda


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


class Work:
    """A collective on a CUDA tensor in flight. ``wait()`` returns
    ``finish(result)``: the tensor lent (in place) or a new one."""

    def __init__(self, handle, lent, finish):
        self._h = handle
        self._lent = lent
        self._finish = finish

    def poll(self):
        return self._h.poll()

    def wait(self):
        shape, in_place = self._h.wait()
        if in_place:
            return self._finish(self._lent)
        t = self._lent
        out = torch.empty(shape, dtype=t.dtype, device=t.device)
        self._h.copy_to(out, _stream(t.device))
        return self._finish(out)


def submit(kind, tensor, name=None, op=0, root=0, finish=lambda r: r):
    """Starts ``kind`` on ``tensor`` (made contiguous first, then lent)."""
    check()
    t = tensor.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    with torch.cuda.device(t.device):
        h = _native.cuda_submit(kind, t, _stream(t.device), name, op, root)
    return Work(h, t, finish)


def allreduce(tensor, name, op, prescale, postscale, in_place):
    """Out of place on a device copy, or in place on ``tensor`` itself
    (copied back if it was not contiguous)."""
    with torch.no_grad():
        t = tensor.detach() if in_place else tensor.detach().clone()
        if prescale != 1.0:
            t.mul_(prescale)

    def finish(r):
        with torch.no_grad():
            if postscale != 1.0:
                r.mul_(postscale)
            if not in_place:
                return r.view(tensor.shape)
            if r.data_ptr() != tensor.data_ptr():
                tensor.copy_(r.view(tensor.shape))
        return tensor

    return submit("allreduce", t, name, op, 0, finish)


def broadcast(tensor, root, name, in_place):
    t = tensor.detach() if in_place else tensor.detach().clone()

    def finish(r):
        if not in_place:
            return r.view(tensor.shape)
        if r.data_ptr() != tensor.data_ptr():
            with torch.no_grad():
                tensor.copy_(r.view(tensor.shape))
        return tensor

    return submit("broadcast", t, name, 0, root, finish)


def allgather(tensor, name):
    return submit("allgather", tensor, name)


def reducescatter(tensor, name, op):
    trailing = list(tensor.shape[1:])
    row = 1
    for d in trailing:
        row *= d

    def finish(r):
        if tensor.dim() > 1 and row and r.numel() % row == 0:
            return r.view([-1] + trailing)
        return r

    return submit("reducescatter", tensor, name, op, 0, finish)
