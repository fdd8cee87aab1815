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
    total = torch.where(mask, x, 0.0).sum()
    count = mask.sum(dtype=x.dtype).clamp_(min=1)
    return total / count


def normalize_advantages(advantages: Tensor, mask: Tensor | None) -> Tensor:
    """advantages [N] shifted and scaled to zero mean and unit std over the entries where mask [N] is set (the
    others do not count, but are transformed too). With nothing selected, mean and std are 0: the result is
    advantages / 1e-7, finite, and every loss term masks it out anyway."""
    mean = masked_mean(advantages, mask)
    std = masked_mean((advantages - mean) ** 2, mask).sqrt()
    return (advantages - mean) / (std + 1e-7)


CLIP_MODES = ("symmetric", "unbiased")


def ppo_clip_bounds(clip_ratio: float, mode: str = "symmetric") -> tuple[float, float]:
    """The interval the PPO ratio is clipped to: symmetric [1 - c, 1 + c] (the PPO paper) or unbiased
    [1 / (1 + c), 1 + c], symmetric in log space (log-ratio within +-log(1 + c)), as Sample Factory 2 does."""
    if mode == "symmetric":
        return 1.0 - clip_ratio, 1.0 + clip_ratio
    if mode == "unbiased":
        return 1.0 / (1.0 + clip_ratio), 1.0 + clip_ratio
    raise ValueError(f"unknown PPO clip mode {mode!r}; one of {CLIP_MODES}")


def clamp_ratio(ratio: Tensor, clamp: float) -> Tensor:
    """ratio [N] clamped to [1 / clamp, clamp] (clamp <= 0: unchanged). Outside it the gradient is 0: a sample whose
    probability moved by more than that factor since it was collected (a very stale one) cannot dominate the
    minibatch's gradient through the unclipped branch of the surrogate (r * A with A < 0 grows without bound)."""
    if clamp <= 0:
        return ratio
    return torch.clamp(ratio, 1.0 / clamp, clamp)


def ppo_policy_loss(
    log_prob_new: Tensor,
    log_prob_old: Tensor,
    advantages: Tensor,
    clip_ratio: float,
    mask: Tensor | None = None,
    clip_mode: str = "symmetric",
    ratio_clamp: float = 0.0,
    log_prob_prox: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate objective (Schulman et al., 2017), as a loss to minimise.

    With `log_prob_prox` it is the decoupled objective (Hilton et al. 2021, arXiv:2110.00641): the ratio is clipped
    around the proximal policy pi_prox instead of the behaviour policy mu, and each sample is weighted by
    w = pi_prox / mu, i.e. w * min(r' A, clip(r', lo, hi) A) with r' = pi_theta / pi_prox, written below as the plain
    objective in r = pi_theta / mu = w r' with the interval [w lo, w hi]. With pi_prox = mu it is PPO's.

    Args:
        log_prob_new: [N] log pi_theta(a|s) under the current parameters (carries grad).
        log_prob_old: [N] log pi of the policy that produced the samples.
        advantages: [N] advantage estimates (treated as constants).
        clip_ratio: epsilon; the ratio is clipped to `ppo_clip_bounds(clip_ratio, clip_mode)`.
        mask: optional [N] sample mask.
        clip_mode: "symmetric" ([1 - eps, 1 + eps]) or "unbiased" ([1 / (1 + eps), 1 + eps]).
        ratio_clamp: the ratio is first clamped to [1 / ratio_clamp, ratio_clamp] (`clamp_ratio`; <= 0: off).
        log_prob_prox: optional [N] log pi_prox(a|s) of the proximal policy (constants): the decoupled objective.

    Returns:
        (loss scalar, stats) with stats holding detached scalar tensors "clip_fraction", "ratio_mean",
        "approx_kl" (kept as tensors so logging does not force a device sync). The stats use the raw ratio of the
        current policy to the one the clip is around (mu, or pi_prox), on the collected samples.
    """
    log_ratio = log_prob_new - log_prob_old.detach()  # [N] log r
    ratio = torch.exp(log_ratio)  # [N]
    lo, hi = ppo_clip_bounds(clip_ratio, clip_mode)
    r = clamp_ratio(ratio, ratio_clamp)  # [N]
    adv = advantages.detach()  # [N]
    surr_unclipped = r * adv
    if log_prob_prox is None:
        surr_clipped = torch.clamp(r, lo, hi) * adv
        log_ratio_c = log_ratio  # [N] log of the ratio the clip is around
    else:
        w = torch.exp(log_prob_prox.detach() - log_prob_old.detach())  # [N] pi_prox / mu
        surr_clipped = torch.clamp(r, w * lo, w * hi) * adv
        log_ratio_c = log_prob_new - log_prob_prox.detach()
    loss = -masked_mean(torch.min(surr_unclipped, surr_clipped), mask)

    with torch.no_grad():
        log_ratio_c = log_ratio_c.detach()
        ratio_c = torch.exp(log_ratio_c)  # [N]
        if clip_mode == "symmetric":
            clipped = (ratio_c - 1.0).abs() > clip_ratio
        else:
            clipped = (ratio_c < lo) | (ratio_c > hi)
        stats = {
            "clip_fraction": masked_mean(clipped.to(dtype=ratio_c.dtype), mask),
            "ratio_mean": masked_mean(ratio_c, mask),
            # Low-variance, always non-negative KL(old || new) estimator: E[(r - 1) - log r].
            "approx_kl": masked_mean((ratio_c - 1.0) - log_ratio_c, mask),
        }
    return loss, stats


def kl_penalty(log_prob_new: Tensor, log_prob_old: Tensor, mask: Tensor | None = None) -> Tensor:
    """Sample estimate of KL(behaviour || current) from the behaviour policy's own samples (a ~ mu), differentiable
    in log_prob_new [N]: mean of (r - 1) - log r with r = pi(a) / mu(a) (log_prob_old [N] is log mu(a)).

    Its expectation under mu is the KL (E_mu[r] = 1), each term is >= 0, and its gradient (r - 1) * grad log pi(a)
    is an unbiased estimate of the KL's gradient -E_mu[grad log pi(a)] (E_mu[r * grad log pi] = grad sum pi = 0)
    that vanishes sample by sample where pi = mu, so it adds little noise near the behaviour policy. It needs only
    the behaviour log-probabilities the buffers already hold, for every action space."""
    log_ratio = log_prob_new - log_prob_old.detach()  # [N]
    return masked_mean(torch.exp(log_ratio) - 1.0 - log_ratio, mask)


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


def symmetric_kl_loss(symmetric_kl: Tensor, coeff: float, mask: Tensor | None = None) -> Tensor:
    """--exploration_loss=symmetric_kl: coeff * mean(KL(u || pi) + KL(pi || u)) [N] with u uniform over the allowed
    actions (`CategoricalDist.symmetric_kl_to_uniform`). Unlike the entropy bonus, it grows without bound as the
    probability of an allowed action goes to 0, so the policy keeps some probability on every action."""
    return coeff * masked_mean(symmetric_kl, mask)
