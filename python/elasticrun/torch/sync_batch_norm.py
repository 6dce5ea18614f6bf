"""``SyncBatchNorm``: batch normalization with statistics over every rank's
batch, on CUDA and CPU tensors (Horovod's needs a GPU). The per-channel sums
travel through a differentiable allreduce, so autograd gives the exact
gradient of the synchronized normalization."""

import numpy as np
import torch

import elasticrun as _er

from . import cuda as _cuda


def _sum(tensor, name):
    """``tensor`` summed over ranks: through NCCL for a CUDA tensor."""
    if _cuda.is_cuda(tensor):
        return _cuda.allreduce(tensor, name, _er.Sum, 1.0, 1.0, False).wait()
    out = _er.allreduce(tensor.detach().contiguous().numpy(), name=name, op=_er.Sum)
    return torch.from_numpy(np.ascontiguousarray(out)).to(tensor.dtype)


class _AllreduceSum(torch.autograd.Function):
    """Sum over ranks; its gradient is the sum of the ranks' gradients."""

    @staticmethod
    def forward(ctx, tensor, name):
        ctx.name = name
        return _sum(tensor, name)

    @staticmethod
    def backward(ctx, grad):
        return _sum(grad, ctx.name + ".grad"), None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """``torch.nn.BatchNorm*d`` whose training statistics span every rank."""

    _count = 0

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        SyncBatchNorm._count += 1
        self._name = f"sync_batch_norm.{SyncBatchNorm._count}"

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or _er.size() == 1:
            return super().forward(input)
        dims = [0] + list(range(2, input.dim()))
        count = torch.tensor([input.numel() / input.shape[1]], dtype=input.dtype, device=input.device)
        local = torch.cat([input.sum(dims), (input * input).sum(dims), count])
        total = _AllreduceSum.apply(local, self._name)
        c = self.num_features
        n = total[2 * c]
        mean = total[:c] / n
        var = total[c:2 * c] / n - mean * mean
        shape = [1, c] + [1] * (input.dim() - 2)
        y = (input - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + self.eps)
        if self.affine:
            y = y * self.weight.reshape(shape) + self.bias.reshape(shape)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                unbiased = var * n / max(float(n) - 1.0, 1.0)
                self.running_mean.mul_(1 - m).add_(mean.detach() * m)
                self.running_var.mul_(1 - m).add_(unbiased.detach() * m)
        return y
