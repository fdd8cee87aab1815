"""PPO loss terms. All per-sample inputs are flat [N] tensors (N = number of samples in the minibatch).

An optional ``mask`` [N] (bool or float 0/1) selects which samples count, e.g. to drop padding or
samples that are too stale (too policy-lagged).
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_mean(x: Tensor, mask: Tensor | None) -> Tensor:
    """Mean of x [N] over entries where mask [N] is nonzero. Returns a scalar; 0 (not NaN) if nothing is selected."""
    if mask is None:
        return x.mean()
    mask = mask.to(dtype=torch.bool)
    # torch.where (rather than x * mask) so NaN/inf in masked-out entries cannot leak into the result or its grad.
    total = torch.where(mask, x, torch.zeros_like(x)).sum()
    count = mask.sum().clamp(min=1).to(dtype=x.dtype)
    return total / count


def normalize_advantages(advantages: Tensor, mask: Tensor | None) -> Tensor:
    """advantages [N] shifted and scaled to zero mean and unit std over the entries where mask [N] is set (the
    others do not count, but are transformed too). With nothing selected, mean and std are 0: the result is
    advantages / 1e-7, finite, and every loss term masks it out anyway."""
    mean = masked_mean(advantages, mask)
    std = masked_mean((advantages - mean) ** 2, mask).sqrt()
    return (advantages - mean) / (std + 1e-7)


def ppo_policy_loss(
    log_prob_new: Tensor,
    log_prob_old: Tensor,
    advantages: Tensor,
    clip_ratio: float,
    mask: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate objective (Schulman et al., 2017), as a loss to minimise.

    Args:
        log_prob_new: [N] log pi_theta(a|s) under the current parameters (carries grad).
        log_prob_old: [N] log pi of the policy that produced the samples.
        advantages: [N] advantage estimates (treated as constants).
        clip_ratio: epsilon; the ratio is clipped to [1 - eps, 1 + eps].
        mask: optional [N] sample mask.

    Returns:
        (loss scalar, stats) with stats holding detached scalar tensors "clip_fraction", "ratio_mean",
        "approx_kl" (kept as tensors so logging does not force a device sync).
    """
    log_ratio = log_prob_new - log_prob_old.detach()  # [N]
    ratio = torch.exp(log_ratio)  # [N]
    adv = advantages.detach()  # [N]
    surr_unclipped = ratio * adv
    surr_clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * adv
    loss = -masked_mean(torch.min(surr_unclipped, surr_clipped), mask)

    with torch.no_grad():
        clipped = ((ratio - 1.0).abs() > clip_ratio).to(dtype=ratio.dtype)
        stats = {
            "clip_fraction": masked_mean(clipped, mask),
            "ratio_mean": masked_mean(ratio, mask),
            # Low-variance, always non-negative KL(old || new) estimator: E[(r - 1) - log r].
            "approx_kl": masked_mean((ratio - 1.0) - log_ratio, mask),
        }
    return loss, stats


def clipped_value_loss(
    values_new: Tensor,
    values_old: Tensor,
    targets: Tensor,
    clip_value: float,
    mask: Tensor | None = None,
) -> Tensor:
    """Value loss with PPO-style clipping of the value update.

    Args:
        values_new: [N] current value predictions (carries grad).
        values_old: [N] predictions of the network that collected the data.
        targets: [N] regression targets (returns / V-trace vs).
        clip_value: max change of the prediction relative to values_old; <= 0 disables clipping.
        mask: optional [N] sample mask.

    Returns:
        scalar 0.5 * mean(max(unclipped_sq_err, clipped_sq_err)).
    """
    targets = targets.detach()
    unclipped = (values_new - targets) ** 2  # [N]
    if clip_value <= 0:
        return 0.5 * masked_mean(unclipped, mask)
    values_old = values_old.detach()
    v_clipped = values_old + torch.clamp(values_new - values_old, -clip_value, clip_value)  # [N]
    clipped = (v_clipped - targets) ** 2  # [N]
    # Pessimistic max: the clipped branch removes the incentive to move V far from values_old.
    return 0.5 * masked_mean(torch.max(unclipped, clipped), mask)


def entropy_loss(entropy: Tensor, coeff: float, mask: Tensor | None = None) -> Tensor:
    """Entropy bonus as a loss: -coeff * mean(entropy [N]) (minimising it increases entropy)."""
    return -coeff * masked_mean(entropy, mask)
