"""Activation layers. `Tanh` is nn.Tanh with a second CPU path, tanh(x) = 2 * sigmoid(2x) - 1, taken where it is
faster. Which is faster depends on the CPU: on the AMD EPYC of the early measurements torch's float32 tanh kernel ran
several times slower than its sigmoid (172 vs 28 us on a [1056, 64] tensor, torch 2.13), which made tanh the
largest single cost of an MLP training step; on an Intel Xeon (AVX-512) torch's tanh was the faster, 44 vs 114 us on
[2048, 64]. So each process times both once, at the first large tensor, and keeps the faster (the classic_control
and mujoco presets use tanh). Serial mode takes torch's kernel untimed (runner.py): a timed choice flips under load."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

# Below this many elements torch's own kernel wins: the identity below takes three kernels instead of one.
FAST_TANH_MIN_ELEMENTS = 4096
# The identity must be this much faster than torch's kernel to be used.
MIN_SPEEDUP = 1.3
# None: decided by `identity_pays` on first use; True / False: forced (tests, benchmark_learner).
USE_IDENTITY: bool | None = None


def _identity(x: Tensor) -> Tensor:
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


def time_both(reps: int = 15) -> tuple[float, float]:
    """Best of `reps` (interleaved) seconds for torch.tanh and for the identity on a [256, 64] float32 tensor, with
    this process's thread settings: about 1 ms in all."""
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(0))  # not the global RNG: seeded runs
    best = [float("inf"), float("inf")]
    for _ in range(reps):
        fns: tuple[Callable[[Tensor], Tensor], ...] = (torch.tanh, _identity)
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn(x)
            best[k] = min(best[k], time.perf_counter() - t0)
    return best[0], best[1]


def pin_kernels(device: torch.device) -> None:
    """Reproducible runs: no kernel chosen by timing (the identity's choice flips under load); on a GPU, torch's
    deterministic variants (a warning, not an error, for an op that has none). Call before the process's first CUDA
    op. Not on the CPU: the CPU kernels we run give the same bits for the same inputs and thread count, and the switch
    imports torch._dynamo (a second or more per process on a loaded 2-core machine)."""
    global USE_IDENTITY
    USE_IDENTITY = False
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's deterministic workspace
        torch.use_deterministic_algorithms(True, warn_only=True)


def identity_pays() -> bool:
    """Whether the sigmoid identity is used for large float32 CPU tensors in this process (timed once)."""
    global USE_IDENTITY
    if USE_IDENTITY is None:
        torch_s, identity_s = time_both()
        USE_IDENTITY = identity_s * MIN_SPEEDUP <= torch_s
    return USE_IDENTITY


class _TanhFromSigmoid(torch.autograd.Function):
    """tanh(x) = 2 * sigmoid(2x) - 1 (within 2e-7 of torch.tanh in float32); the backward pass is torch's own
    tanh_backward, grad * (1 - y^2), from the saved output."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        y = _identity(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def tanh(x: Tensor) -> Tensor:
    """torch.tanh(x), through the sigmoid identity for float32 CPU tensors large enough for it to pay, on a CPU
    where it is faster. Other dtypes keep torch's kernel: in bfloat16 the identity would lose the relative
    precision near 0. A traced model (ONNX export) keeps torch's tanh: the trace would fix the size test's outcome."""
    if (
        not torch.jit.is_tracing()
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.numel() >= FAST_TANH_MIN_ELEMENTS
        and identity_pays()
    ):
        if x.requires_grad and torch.is_grad_enabled():
            return _TanhFromSigmoid.apply(x)
        return _identity(x)  # inference: no autograd node to build
    return torch.tanh(x)


class Tanh(nn.Module):
    """Drop-in for nn.Tanh (no parameters, so checkpoints are interchangeable)."""

    def forward(self, x: Tensor) -> Tensor:
        return tanh(x)
