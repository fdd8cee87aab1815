"""Generalized state-dependent exploration (gSDE, Raffin et al. 2022; `use_sde` in Stable-Baselines3) for Gaussian
actions: the exploration noise is a linear function of the policy's features, a = mu(s) + z(s) @ W, with one matrix
W [L, D] per agent, held for --sde_sample_freq steps. Per-step Gaussian noise averages out over a few steps; held W
pushes the same way in similar states for many steps (MountainCarContinuous: swing, where white noise dithers).

Given s, z(s) @ W with W_ld ~ N(0, sigma_ld^2) is Gaussian with variance sum_l z_l^2 sigma_ld^2: the action's
distribution given the state is a diagonal Gaussian with that per-state std, which is what training scores actions
with (log-prob, entropy, KL). The features enter the std detached (SB3's learn_features=False): the std's gradient
moves sigma, not the features. Shapes: B batch, L policy features, D action dimensions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_VAR_EPS = 1e-6  # keeps the std above 0 where every feature is 0


def initial_sde_log_std(initial_stddev: float, num_features: int) -> float:
    """log sigma at the start: an action std of initial_stddev where every feature has magnitude 1."""
    return math.log(initial_stddev / math.sqrt(num_features))


def sde_log_std(features: Tensor, log_sigma: Tensor) -> Tensor:
    """features [B, L], log_sigma [L, D] -> [B, D] log-std of the action given the state, in fp32 (also under the
    learner's bf16 autocast: the distribution's parameters stay fp32)."""
    with torch.autocast(features.device.type, enabled=False):
        z = features.detach().float()
        var = z.pow(2) @ (2.0 * log_sigma.float()).exp()  # [B, D]
        return 0.5 * torch.log(var + _VAR_EPS)


def sde_noise(features: Tensor, eps: Tensor, log_sigma: Tensor) -> Tensor:
    """features [B, L], eps [B, L, D] unit normals (each row's held matrix), log_sigma [L, D] -> [B, D] noise
    z @ (eps * sigma)."""
    w = eps * log_sigma.exp()  # [B, L, D]
    return torch.einsum("bl,bld->bd", features.detach().float(), w)


def matrices_seed(seed: int | None, env_seed_offset: int, worker: int, version: int = 0) -> int | None:
    """The seed of a policy worker's matrices: one per run seed, worker and sampler node (a node's config has its own
    env_seed_offset), so that no two draw the same sequence, and per weights version the worker starts with, so that
    a worker restarted or resumed later does not repeat its first matrices; None (unseeded) without a run seed. Ints
    hash the same in every process."""
    return None if seed is None else hash((seed, env_seed_offset, worker, version)) & (2**63 - 1)


class ExplorationMatrices:
    """Each agent's unit-normal matrix eps [L, D], drawn anew after `period` steps of that agent (the first step
    included). Scaled by the current sigma when used (`sde_noise`), so a learned sigma acts at once. Kept by the
    process that acts (a policy worker): CPU tensors, [num_agents, L, D]."""

    def __init__(self, num_agents: int, shape: tuple[int, int], period: int, seed: int | None = None):
        if period < 1:
            raise ValueError(f"period must be at least 1, got {period}")
        self.period = period
        self.gen = torch.Generator()
        if seed is not None:
            self.gen.manual_seed(seed)
        else:
            self.gen.seed()
        self.eps = torch.empty(num_agents, *shape)  # [A, L, D]
        self.age = torch.full((num_agents,), period, dtype=torch.int64)  # steps since the agent's draw: all due

    def draw(self, agents: Tensor, out: Tensor | None = None) -> Tensor:
        """agents [N] (int64, distinct) -> [N, L, D] their matrices for this step: a copy, written into `out` [N, L, D]
        when given (the policy worker's staging rows: one copy, not two)."""
        due = agents[self.age[agents] >= self.period]  # [n]
        if due.numel():
            self.eps[due] = torch.randn((due.numel(), *self.eps.shape[1:]), generator=self.gen)
            self.age[due] = 0
        self.age[agents] += 1
        return torch.index_select(self.eps, 0, agents, out=out)
