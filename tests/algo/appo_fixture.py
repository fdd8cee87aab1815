"""A fixed, seeded training batch and a few training iterations on it: the regression reference for the APPO
training step (tests/algo/test_appo.py). Everything is built from torch's seeded RNG, so a scenario is
deterministic on one machine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from sample_factory.config import parse_cfg
from sample_factory.envs.spaces import ACTION_MASK_KEY
from sample_factory.model.actor_critic import ActorCritic

M, T = 12, 8  # trajectories, rollout
# tests/algo/test_appo.py's record of the Gaussian scenario (parameter sum after training, without the ratio clamp)
RECORDED_GAUSSIAN_PARAM_SUM = 0.9759019964840263
VEC = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
MASKED = gym.spaces.Dict({"obs": VEC, ACTION_MASK_KEY: gym.spaces.Box(0, 1, (3,), np.int8)})
SMALL = ["--env=CartPole-v1", "--num_workers=1", f"--rollout={T}", "--encoder_mlp_layers=16", "--seed=1"]

# name: (flags, observation space, action space, policy_id passed to train, iterations)
SCENARIOS: dict[str, tuple[list[str], gym.Space, gym.Space, int | None, int]] = {
    "gru_vtrace_normalized": (
        [
            "--use_rnn=True",
            "--rnn_size=16",
            "--recurrence=4",
            "--num_epochs=2",
            "--num_batches_per_epoch=2",
            "--max_policy_lag=3",
            "--normalize_input=True",
            "--normalize_returns=True",
            "--learning_rate=1e-3",
            "--lr_schedule=linear_decay",
            "--train_for_env_steps=1000",
        ],
        VEC,
        gym.spaces.Discrete(2),
        0,
        3,
    ),
    "gaussian_gae_unclipped": (
        [
            "--use_rnn=False",
            "--with_vtrace=False",
            "--max_grad_norm=0",
            "--num_batches_per_epoch=3",
            "--learning_rate=3e-3",
            "--value_bootstrap=False",
            "--reward_scale=0.5",
            "--reward_clip=1",
            # recorded before the ratio clamp existed; its random behaviour log-probs give ratios below 1/20
            "--ppo_ratio_clamp=0",
        ],
        VEC,
        gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        None,
        2,
    ),
    "action_mask_raw_advantages": (
        [
            "--use_rnn=False",
            "--normalize_advantage=False",
            "--ppo_clip_value=0",
            "--actor_critic_share_weights=False",
            "--num_epochs=2",
            "--learning_rate=1e-3",
        ],
        MASKED,
        gym.spaces.Discrete(3),
        None,
        2,
    ),
}


def make_batch(obs_space: gym.Space, action_space: gym.Space, rnn_size: int, version: int) -> dict[str, Any]:
    """A batch shaped like TrajectoryBuffers.gather's: [M, T(+1), ...] CPU tensors, "obs" a dict of them."""
    g = torch.Generator().manual_seed(123)
    if isinstance(obs_space, gym.spaces.Dict):
        mask = (torch.rand(M, T + 1, 3, generator=g) < 0.7).to(torch.int8)
        mask[..., 0] = 1  # at least one allowed action
        obs = {"obs": torch.randn(M, T + 1, 4, generator=g), ACTION_MASK_KEY: mask}
    else:
        obs = {"obs": torch.randn(M, T + 1, 4, generator=g)}
    if isinstance(action_space, gym.spaces.Discrete):
        actions = torch.randint(0, action_space.n, (M, T + 1), generator=g)
        if ACTION_MASK_KEY in obs:
            actions = torch.where(obs[ACTION_MASK_KEY].gather(2, actions.unsqueeze(-1)).squeeze(-1).bool(), actions, 0)
    else:
        actions = torch.randn(M, T + 1, action_space.shape[0], generator=g)
    dones = torch.rand(M, T, generator=g) < 0.15
    return {
        "obs": obs,
        "rnn_states": 0.1 * torch.randn(M, T + 2, max(rnn_size, 1), generator=g),
        "is_first": torch.rand(M, T + 1, generator=g) < 0.1,
        "active": torch.rand(M, T, generator=g) < 0.95,
        "actions": actions,
        "log_probs": -0.7 + 0.3 * torch.randn(M, T + 1, generator=g),
        "values": torch.randn(M, T + 1, generator=g),
        "policy_version": version - torch.randint(0, 6, (M, T + 1), generator=g),
        "policy_id": torch.randint(0, 2, (M, T + 1), generator=g),
        "rewards": 2.0 * torch.randn(M, T, generator=g),
        "dones": dones,
        "truncated": dones & (torch.rand(M, T, generator=g) < 0.5),
        "final_values": torch.randn(M, T, generator=g),
    }


def run_scenario(name: str, make_algo: Callable, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Train `iterations` times on the scenario's batch; returns the stats of every iteration, the final version
    and the final model and optimizer state. `extra`: more flags on top of the scenario's."""
    flags, obs_space, action_space, policy_id, iterations = SCENARIOS[name]
    cfg = parse_cfg([*SMALL, *flags, *extra])
    torch.manual_seed(0)
    model = ActorCritic(cfg, obs_space, action_space).train()
    algo = make_algo(cfg, model, torch.device("cpu"))
    version, stats = 5, []
    for i in range(iterations):
        batch = make_batch(obs_space, action_space, model.rnn_state_size, version)
        algo.update_learning_rate(300 * i)
        s, version = algo.train(batch, version, policy_id)
        stats.append(s)
    return {"stats": stats, "version": version, "model": model.state_dict(), "algo": algo.state_dict()}
