"""The algorithm base (algo/base.py): the per-step statistics that APPO and DQN sum on the device and read back once
per iteration."""

from __future__ import annotations

import gymnasium as gym
import torch

from sample_factory.algo import base
from sample_factory.algo.base import StepStats
from sample_factory.config import parse_cfg
from sample_factory.model.actor_critic import ActorCritic
from tests.algo.a2c import A2CAlgorithm
from tests.algo.appo_fixture import SMALL, VEC


def _algo() -> A2CAlgorithm:
    cfg = parse_cfg([*SMALL, "--use_rnn=False"])
    return A2CAlgorithm(cfg, ActorCritic(cfg, VEC, gym.spaces.Discrete(2)), torch.device("cpu"))


def test_step_statistics_are_means_over_applied_steps_read_in_one_go(monkeypatch):
    algo = _algo()
    stats = StepStats(algo.device)
    yes, no = torch.tensor(True), torch.tensor(False)
    stats.add(["loss", "grad_norm"], torch.tensor([1.0, 4.0]), yes)
    stats.add(["loss", "grad_norm"], torch.tensor([float("nan"), float("inf")]), no)  # skipped: never summed
    stats.add(["loss", "grad_norm"], torch.tensor([3.0, 2.0]), yes)
    algo._skip_counts.copy_(torch.tensor([5, 1]))
    reads = []
    real = base.host_read
    monkeypatch.setattr(base, "host_read", lambda x: reads.append(x) or real(x))
    means, applied, extra = algo.read_back(stats, torch.tensor(0.5), torch.tensor(7, dtype=torch.int64))
    assert means == {"loss": 2.0, "grad_norm": 3.0} and applied == 2 and extra == [0.5, 7.0]
    assert (algo.skipped_updates, algo.consecutive_skipped) == (5, 1) and len(reads) == 1


def test_an_iteration_without_steps_reads_only_the_counts():
    algo = _algo()
    means, applied, extra = algo.read_back(StepStats(algo.device))
    assert means == {} and applied == 0 and extra == []
