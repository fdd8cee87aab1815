"""gSDE's math (algo/sde.py): the noise a held matrix gives has the per-state std training scores actions with, and
each agent keeps its matrix for the period."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.algo.appo import APPOAlgorithm as APPO
from sample_factory.algo.dqn import DQNAlgorithm as DQN
from sample_factory.algo.sde import ExplorationMatrices, initial_sde_log_std, matrices_seed, sde_log_std, sde_noise
from sample_factory.config import ConfigError, parse_cfg

BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def test_the_noise_of_random_matrices_has_the_per_state_std():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4, 8, generator=g)  # [B, L]
    log_sigma = torch.randn(8, 2, generator=g) * 0.5  # [L, D]
    draws = 40_000
    eps = torch.randn(draws, 4, 8, 2, generator=g)  # one matrix per row and draw
    noise = sde_noise(z.repeat(draws, 1), eps.view(draws * 4, 8, 2), log_sigma).view(draws, 4, 2)
    std = noise.std(dim=0)  # [B, D]
    torch.testing.assert_close(std.log(), sde_log_std(z, log_sigma), atol=0.02, rtol=0)


def test_the_std_is_initial_stddev_where_every_feature_is_one_and_features_get_no_gradient():
    log_sigma = torch.full((16, 3), initial_sde_log_std(0.5, 16), requires_grad=True)
    z = torch.ones(2, 16, requires_grad=True)
    log_std = sde_log_std(z, log_sigma)
    torch.testing.assert_close(log_std, torch.full((2, 3), math.log(0.5)), atol=1e-5, rtol=0)
    log_std.sum().backward()
    assert z.grad is None and log_sigma.grad is not None
    # all features 0: a small positive std, not log(0)
    assert torch.isfinite(sde_log_std(torch.zeros(1, 16), log_sigma)).all()


def test_each_agent_keeps_its_matrix_for_the_period_then_draws_anew():
    m = ExplorationMatrices(num_agents=4, shape=(3, 2), period=3, seed=1)
    a01 = torch.tensor([0, 1])
    first = m.draw(a01)
    assert first.shape == (2, 3, 2) and not torch.equal(first[0], first[1])
    for _ in range(2):
        torch.testing.assert_close(m.draw(a01), first)
    first_of_2 = m.draw(torch.tensor([2]))  # agent 2's first step: its own matrix
    fourth = m.draw(a01)  # agents 0 and 1: their 4th step, a new matrix
    assert not torch.equal(fourth[0], first[0]) and not torch.equal(fourth[1], first[1])
    torch.testing.assert_close(m.draw(torch.tensor([2])), first_of_2)  # agent 2 is on its own count
    first[0].zero_()  # draw returns a copy
    assert not torch.equal(m.draw(torch.tensor([0]))[0], first[0])


def test_the_same_seed_draws_the_same_matrices():
    a = ExplorationMatrices(3, (4, 1), period=2, seed=7).draw(torch.arange(3))
    b = ExplorationMatrices(3, (4, 1), period=2, seed=7).draw(torch.arange(3))
    torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="at least 1"):
        ExplorationMatrices(3, (4, 1), period=0)


@pytest.mark.parametrize(
    ("flags", "space", "algo", "error"),
    [
        (["--use_sde=True"], gym.spaces.Discrete(3), APPO, "needs Gaussian actions"),
        (["--use_sde=True"], gym.spaces.Tuple([BOX, gym.spaces.Discrete(2)]), APPO, "needs Gaussian actions"),
        (["--use_sde=True", "--adaptive_stddev=True"], BOX, APPO, "choose one"),
        (["--use_sde=True", "--sde_sample_freq=0"], BOX, APPO, "at least 1"),
        (["--use_sde=True"], gym.spaces.Discrete(3), DQN, "needs Gaussian actions"),
        (["--use_sde=True"], BOX, DQN, "needs a Discrete action space"),
    ],
)
def test_use_sde_is_refused_where_it_cannot_apply(flags, space, algo, error):
    cfg = parse_cfg(["--env=Pendulum-v1", *flags])
    with pytest.raises(ConfigError, match=error):
        algo.check_spaces(cfg, OBS, space)


def test_use_sde_with_a_box_is_accepted():
    cfg = parse_cfg(["--env=Pendulum-v1", "--use_sde=True", "--sde_sample_freq=4"])
    APPO.check_spaces(cfg, OBS, BOX)


class _NoMatrices(APPO):
    @classmethod
    def act(cls, cfg, model, obs, rnn_states, action_mask, deterministic, agent_rank=None):
        return super().act(cfg, model, obs, rnn_states, action_mask, deterministic, agent_rank)


class _PassesEverything(APPO):
    @classmethod
    def act(cls, *args, **kwargs):
        return super().act(*args, **kwargs)


def test_a_custom_algorithm_whose_act_takes_no_matrices_is_refused_at_start():
    """Not a TypeError in every policy worker once the run has started."""
    cfg = parse_cfg(["--env=Pendulum-v1", "--use_sde=True"])
    with pytest.raises(ConfigError, match=r"_NoMatrices.act\(\) takes no sde_eps"):
        _NoMatrices.check_spaces(cfg, OBS, BOX)
    _PassesEverything.check_spaces(cfg, OBS, BOX)
    _NoMatrices.check_spaces(parse_cfg(["--env=Pendulum-v1"]), OBS, BOX)  # without --use_sde it acts as before


def test_each_worker_and_sampler_node_seeds_its_own_matrices():
    from sample_factory.distributed.sampler_node import node_cfg

    cfg = parse_cfg(["--env=Pendulum-v1", "--use_sde=True", "--seed=5"])
    seeds = {
        matrices_seed(c.seed, c.env_seed_offset, worker)
        for c in (cfg, node_cfg(cfg, 0), node_cfg(cfg, 1))
        for worker in (0, 1)
    }
    assert len(seeds) == 6
    assert matrices_seed(5, 0, 1) == matrices_seed(5, 0, 1)  # the same run seed: the same matrices
    # a worker restarted (or a run resumed) at a later weights version does not repeat its first matrices
    assert matrices_seed(5, 0, 1, version=0) != matrices_seed(5, 0, 1, version=37)
    assert matrices_seed(None, 0, 1) is None


def test_the_std_stays_fp32_under_bf16_autocast():
    z = torch.randn(3, 8)
    log_sigma = torch.randn(8, 2) * 0.3
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = sde_log_std(z, log_sigma)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, sde_log_std(z, log_sigma))
