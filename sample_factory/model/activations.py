"""Activation layers. `Tanh` is nn.Tanh with a faster CPU path: torch's CPU tanh kernel runs several times slower
than its sigmoid (172 vs 28 us on a [1056, 64] float32 tensor on the 2-core test machine, torch 2.13), which made
tanh the largest single cost of an MLP training step (the classic_control and mujoco presets use tanh)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

# Below this many elements torch's own kernel wins: the identity below takes three kernels instead of one.
FAST_TANH_MIN_ELEMENTS = 4096


class _TanhFromSigmoid(torch.autograd.Function):
    """tanh(x) = 2 * sigmoid(2x) - 1 (within 2e-7 of torch.tanh in float32); the backward pass is torch's own
    tanh_backward, grad * (1 - y^2), from the saved output."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        y = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def tanh(x: Tensor) -> Tensor:
    """torch.tanh(x), through the sigmoid identity for float32 CPU tensors large enough for it to pay. Other
    dtypes keep torch's kernel: in bfloat16 the identity would lose the relative precision near 0."""
    if x.device.type == "cpu" and x.dtype == torch.float32 and x.numel() >= FAST_TANH_MIN_ELEMENTS:
        return _TanhFromSigmoid.apply(x)
    return torch.tanh(x)


class Tanh(nn.Module):
    """Drop-in for nn.Tanh (no parameters, so checkpoints are interchangeable)."""

    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)
