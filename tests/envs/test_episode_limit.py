"""--max_episode_steps: every env backend truncates an episode at the cap (a truncation, not a termination), and
a gymnasium id that registers no limit gets a line in the log that names the flag."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from sample_factory.config import Config
from sample_factory.envs import env_utils
from sample_factory.envs.env_utils import episode_limit_note, make_env, register_env
from sample_factory.envs.vector_group import make_vector_group

UP = 0  # CliffWalking-v1: at the start (bottom left) UP moves one row up, then bumps the top wall


def _cfg(env: str, limit: int | None) -> Config:
    return Config.from_dict(dict(env=env, max_episode_steps=limit))


def _steps_to_the_end(env: gym.Env, action, most: int) -> tuple[int, bool, bool]:
    env.reset(seed=0)
    for t in range(1, most + 1):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return t, terminated, truncated
    return most, False, False


def test_a_gymnasium_id_without_a_limit_is_truncated_at_the_cap():
    free = make_env(_cfg("CliffWalking-v1", None))
    assert _steps_to_the_end(free, UP, 500) == (500, False, False)  # the env itself never ends this episode
    capped = make_env(_cfg("CliffWalking-v1", 7))
    assert _steps_to_the_end(capped, UP, 500) == (7, False, True)
    free.close()
    capped.close()


def test_the_cap_replaces_a_registered_limit():
    env = make_env(_cfg("FrozenLake-v1", 250))  # registered: 100 steps
    assert env.spec.max_episode_steps == 250
    env.close()


class Endless(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 1.0, False, False, {}


def test_a_custom_env_is_wrapped_only_when_a_cap_is_given():
    name = "sf_test_endless"
    register_env(name, lambda cfg, env_config: Endless())
    try:
        assert isinstance(make_env(_cfg(name, None)), Endless)
        assert _steps_to_the_end(make_env(_cfg(name, 4)), 0, 100) == (4, False, True)
        assert episode_limit_note(_cfg(name, None)) is None  # we cannot know a custom env's own limit
    finally:
        env_utils._ENV_REGISTRY.pop(name)


def test_the_batched_cartpole_truncates_at_the_cap():
    cfg = Config.from_dict(dict(env="CartPole-v1", env_backend="gymnasium_vector", max_episode_steps=5))
    group = make_vector_group(cfg, 4, 0, [0, 1, 2, 3])
    try:
        group.reset()
        ends = [group.step(np.array([0, 1, 0, 1])) for _ in range(5)]
        assert all(not e for e in ends[:4])  # no CartPole falls within 5 alternating steps
        assert [length for _, length in ends[4]] == [5, 5, 5, 5] and group.truncated.all()
    finally:
        group.close()


@pytest.mark.parametrize(
    "env, limit, noted",
    [
        ("CliffWalking-v1", None, True),
        ("CliffWalking-v1", 200, False),  # capped: nothing to say
        ("CartPole-v1", None, False),  # registers 500
        ("mujoco_hopper", None, False),  # our short name of Hopper-v5 (1,000)
        ("atari_pong", None, False),  # ALE's own limit
        ("not_an_env", None, False),  # make_env reports it
    ],
)
def test_the_log_names_the_flag_for_envs_without_a_limit(env, limit, noted):
    note = episode_limit_note(_cfg(env, limit))
    assert (note is not None) == noted
    if noted:
        assert "registers no step limit" in note and "--max_episode_steps=N" in note
