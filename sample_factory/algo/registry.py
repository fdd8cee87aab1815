"""Training algorithms by name (--algo) and the learner's constructor for them."""

from __future__ import annotations

import torch

from sample_factory.algo.appo import APPOAlgorithm
from sample_factory.algo.base import Algorithm
from sample_factory.algo.dqn import DQNAlgorithm
from sample_factory.config import Config

ALGORITHMS: dict[str, type[Algorithm]] = {"APPO": APPOAlgorithm, "DQN": DQNAlgorithm}


def algorithm_class(cfg: Config) -> type[Algorithm]:
    """The class of --algo: policy workers call its `act` / `values` without building an instance."""
    return ALGORITHMS[cfg.algo]


def make_algorithm(cfg: Config, model: torch.nn.Module, device: torch.device) -> Algorithm:
    """The learner's algorithm for one policy, training `model` (already on `device`) in place."""
    return algorithm_class(cfg)(cfg, model, device)
