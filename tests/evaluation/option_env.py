"""A custom env whose episodes show two env options: every episode lasts `cfg.env_frameskip` steps and each step
pays `cfg.env_sticky_actions`, whatever the actions. Registered on import, so worker and evaluation processes get it
with `--env=tests.evaluation.option_env:OptionEcho-v0`; a test reads the options an evaluation played with off its
episode lengths and rewards."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from sample_factory.envs.env_utils import register_env

ENV_ID = "OptionEcho-v0"


class OptionEchoEnv(gym.Env):
    def __init__(self, length: int, reward: float):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length, self.reward, self.t = length, reward, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, self.reward, self.t >= self.length, False, {}


register_env(ENV_ID, lambda cfg, env_config: OptionEchoEnv(cfg.env_frameskip, cfg.env_sticky_actions))
