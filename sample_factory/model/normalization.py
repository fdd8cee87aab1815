"""Running mean / std normalization of observations (--normalize_input).

The statistics are buffers of the model: the learner updates them from each training batch, and they travel to the
policy workers with the published weights and into checkpoints with the state dict, so every process normalizes
with the same numbers."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RunningMeanStd(nn.Module):
    """Per-feature mean and variance over every sample seen (Chan et al.'s parallel update), in float64."""

    mean: Tensor  # [*shape]
    var: Tensor  # [*shape], biased
    count: Tensor  # [] samples seen

    def __init__(self, shape: tuple[int, ...], clip: float = 5.0, eps: float = 1e-8):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.clip, self.eps = clip, eps

    @torch.no_grad()
    def update(self, x: Tensor, mask: Tensor | None = None) -> None:
        """x [N, *shape]: a batch of samples; mask [N] (bool): only those samples count. The masked update selects
        by weights rather than by indexing, so the count stays on the device (no host read: boolean indexing asks
        the GPU how many rows it kept), and an empty selection leaves the statistics as they were."""
        x = x.reshape(-1, *self.mean.shape).double()
        n: Tensor | int
        if mask is None:
            n = x.shape[0]
            if n == 0:
                return
            batch_mean = x.mean(dim=0)
            # not x.var(): on a CPU its full reduction (scalar statistics: the returns normalizer) reads the mean
            # back with .item(), which the learner loop's host-sync count takes for a GPU stall
            batch_var = ((x - batch_mean) ** 2).mean(dim=0)
        else:
            w = mask.reshape(-1, *([1] * self.mean.dim())).double()  # [N, 1...]
            n = w.sum()
            denom = n.clamp(min=1.0)
            batch_mean = (x * w).sum(dim=0) / denom
            batch_var = ((x - batch_mean) ** 2 * w).sum(dim=0) / denom
        self._merge(n, batch_mean, batch_var, masked=mask is not None)

    @torch.no_grad()
    def update_moments(self, n: Tensor, batch_mean: Tensor, batch_var: Tensor) -> None:
        """Merge a batch given by its count (scalar), mean and biased variance [*shape] (float64): the statistics
        a data-parallel learner group computes over all ranks' samples (algo/data_parallel.py)."""
        self._merge(n, batch_mean, batch_var, masked=True)

    def _merge(self, n: Tensor | int, batch_mean: Tensor, batch_var: Tensor, masked: bool) -> None:
        total = self.count + n
        delta = batch_mean - self.mean
        # with n = 0 every term below reduces to the old statistics (total = count; count 0 only before any data)
        safe_total = total.clamp(min=1.0) if masked else total
        self.mean += delta * n / safe_total
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / safe_total
        if not masked:
            self.var.copy_(m2 / total)
        else:
            self.var.copy_(torch.where(total > 0, m2 / safe_total, self.var))
        self.count.copy_(total)

    def normalize(self, x: Tensor) -> Tensor:
        """Without clipping (value targets)."""
        return (x - self.mean.to(x.dtype)) / torch.sqrt(self.var + self.eps).to(x.dtype)

    def denormalize(self, x: Tensor) -> Tensor:
        return x * torch.sqrt(self.var + self.eps).to(x.dtype) + self.mean.to(x.dtype)

    def forward(self, x: Tensor) -> Tensor:
        std = torch.sqrt(self.var + self.eps).to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / std).clamp(-self.clip, self.clip)
