"""Return / advantage estimators (V-trace and GAE).

Shape conventions: T = rollout length, B = number of trajectories (envs) in the batch.
``dones[t] == 1`` means the episode ended *after* step t, so step t must not bootstrap
from ``values[t + 1]`` (which then belongs to the next episode).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

NUMPY_LOOP = True  # the CPU path of reverse_recurrence (a switch for benchmarks and tests)


def _check_shapes(rewards: Tensor, dones: Tensor, values: Tensor) -> None:
    if rewards.dim() != 2 or rewards.shape != dones.shape:
        raise ValueError(f"rewards and dones must both be [T, B], got {tuple(rewards.shape)} and {tuple(dones.shape)}")
    t, b = rewards.shape
    if tuple(values.shape) != (t + 1, b):
        raise ValueError(f"values must be [T+1, B] = [{t + 1}, {b}], got {tuple(values.shape)}")


def reverse_recurrence(x: Tensor, coefs: Tensor) -> Tensor:
    """out[t] = x[t] + coefs[t] * out[t + 1] backwards over time, with out[T] = 0: x, coefs, out [T, B].

    T is small (32..128), so a loop over time vectorised over B. On CPU it runs in numpy: the same float32
    multiply-then-add per element (results identical to the torch loop), at ~1 us per step instead of ~6 for
    torch's dispatch on [B]-sized slices (37 vs 196 us for T = B = 32)."""
    if NUMPY_LOOP and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        xs, cs = x.detach().numpy(), coefs.detach().to(x.dtype).numpy()
        out_np = np.empty(xs.shape, xs.dtype)
        acc_np = np.zeros(xs.shape[1:], xs.dtype)
        for t in range(xs.shape[0] - 1, -1, -1):
            acc_np = xs[t] + cs[t] * acc_np
            out_np[t] = acc_np
        return torch.from_numpy(out_np)
    if x.device.type != "cpu" and x.shape[0] ** 2 * x[0].numel() <= CLOSED_FORM_MAX_ELEMENTS:
        return reverse_recurrence_closed_form(x, coefs)
    out = torch.empty_like(x)
    acc = torch.zeros_like(x[0])  # [B]
    for t in range(x.shape[0] - 1, -1, -1):
        acc = x[t] + coefs[t] * acc
        out[t] = acc
    return out


# Largest [T, T, B] weight tensor reverse_recurrence builds on an accelerator instead of looping over time.
CLOSED_FORM_MAX_ELEMENTS = 1 << 24


def reverse_recurrence_closed_form(x: Tensor, coefs: Tensor) -> Tensor:
    """reverse_recurrence as a weighted sum: out[t] = sum_{k >= t} (prod_{j=t}^{k-1} coefs[j]) x[k]; x, coefs,
    out [T, B]. On a GPU the time loop is 2T kernel launches of a few microseconds each on [B]-sized slices (V-trace
    runs it once per minibatch); this is six kernels over a [T, T, B] tensor. Same values up to float rounding."""
    T = x.shape[0]
    tri = torch.ones(T, T, dtype=torch.bool, device=x.device).triu().view(T, T, *([1] * (x.dim() - 1)))  # j >= t
    factors = torch.where(tri, coefs.to(x.dtype).unsqueeze(0), 1.0)  # [t, j, B]: coefs[j] where j >= t, else 1
    prods = torch.cumprod(factors, dim=1)  # [t, k, B]: prod_{j=t}^{k} coefs[j] for k >= t
    weights = torch.cat([torch.ones_like(prods[:, :1]), prods[:, :-1]], dim=1)  # [t, k, B]: prod up to k - 1
    return (torch.where(tri, weights, 0.0) * x.unsqueeze(0)).sum(dim=1)  # [t, B]


@torch.no_grad()
def calculate_vtrace(
    rewards: Tensor,
    dones: Tensor,
    values: Tensor,
    log_rhos: Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018, "IMPALA").

    Args:
        rewards: [T, B] rewards r_t.
        dones: [T, B] float 0/1, episode terminated after step t (no bootstrapping across it).
        values: [T+1, B] behaviour-time value estimates V(x_t); values[T] bootstraps the last step.
        log_rhos: [T, B] log pi_target(a_t|x_t) - log mu_behaviour(a_t|x_t).
        gamma: discount factor.
        rho_bar: truncation level of the importance weights used in the TD error and the pg advantage.
        c_bar: truncation level of the "trace cutting" coefficients c_t.

    Returns:
        (vs [T, B], pg_advantages [T, B]), both detached.
    """
    _check_shapes(rewards, dones, values)
    if log_rhos.shape != rewards.shape:
        raise ValueError(f"log_rhos must be [T, B] like rewards, got {tuple(log_rhos.shape)}")

    rhos = torch.exp(log_rhos)  # [T, B]
    clipped_rhos = torch.clamp(rhos, max=rho_bar)  # [T, B]
    cs = torch.clamp(rhos, max=c_bar)  # [T, B]
    discounts = gamma * (1.0 - dones)  # [T, B]; zero across episode boundaries

    values_t = values[:-1]  # [T, B]  V(x_t)
    values_tp1 = values[1:]  # [T, B]  V(x_{t+1})
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values_t)  # [T, B]

    # vs_t - V(x_t) = delta_t + gamma_t * c_t * (vs_{t+1} - V(x_{t+1})), with vs_T - V(x_T) = 0.
    vs = values_t + reverse_recurrence(deltas, discounts * cs)  # [T, B]

    # pg advantage bootstraps from vs_{t+1} (vs_T := V(x_T)); rho clipped at rho_bar as in the paper.
    vs_tp1 = torch.cat([vs[1:], values[-1:]], dim=0)  # [T, B]
    pg_advantages = clipped_rhos * (rewards + discounts * vs_tp1 - values_t)  # [T, B]
    return vs, pg_advantages


@torch.no_grad()
def calculate_gae(
    rewards: Tensor,
    dones: Tensor,
    values: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (Schulman et al., 2016).

    Args:
        rewards: [T, B]; dones: [T, B] float 0/1 (terminated after step t); values: [T+1, B].

    Returns:
        (advantages [T, B], returns [T, B] = advantages + values[:T]), both detached.
    """
    _check_shapes(rewards, dones, values)

    discounts = gamma * (1.0 - dones)  # [T, B]
    deltas = rewards + discounts * values[1:] - values[:-1]  # [T, B] one-step TD errors
    advantages = reverse_recurrence(deltas, discounts * gae_lambda)  # [T, B]
    returns = advantages + values[:-1]  # [T, B]
    return advantages, returns
