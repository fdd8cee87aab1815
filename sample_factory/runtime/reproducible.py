"""Reproducible synchronous runs: with --async_rl=False and a --seed, two runs of the same command end with the same
weights, whatever the process scheduling. What each component does for it:

- actor workers: each split fills its own slots, in a fixed order, and reports its samples tagged with
  (split, rollout number), so nothing depends on which split finished first (`ActorWorker`);
- policy workers: one forward pass per request, its random draws seeded from (seed, policy, worker, split,
  request number), so an action never depends on which requests were batched together (`PolicyWorker._serve`);
- learners: the slots of an iteration in (worker, split, rollout) order, and no iteration past the env-step budget
  (`Learner`);
- the runner: samples counted and progress rows written per complete iteration (`SyncProgress`);
- every process that runs the model: kernels picked without timing, torch's deterministic algorithms (`pin_kernels`).
"""

from __future__ import annotations

import os

import torch

from sample_factory.config import Config


def reproducible(cfg: Config) -> bool:
    """Whether a multi-process run promises the same weights for the same command: synchronous, with a seed.
    (Serial mode is reproducible by running everything in one thread, in a fixed order.)"""
    return cfg.seed is not None and not cfg.async_rl


def pin_kernels() -> None:
    """No kernel chosen by timing (tanh's sigmoid identity flips under load) and torch's deterministic variants
    (a warning, not an error, for an op that has none). Call before the process's first CUDA op."""
    from sample_factory.model import activations

    activations.USE_IDENTITY = False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's deterministic workspace
    torch.use_deterministic_algorithms(True, warn_only=True)


def request_seed(seed: int, policy_id: int, actor_idx: int, split_idx: int, seq: int) -> int:
    """The seed of the random draws (action sampling, exploration) answering one request: the same for the same
    split's same request in every run, however the requests were batched. Ints hash the same in every process."""
    return hash((seed, policy_id, actor_idx, split_idx, seq)) & (2**63 - 1)
