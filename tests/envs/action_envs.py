"""Tiny envs with MultiDiscrete and Tuple action spaces (registered on import, usable from worker processes via
`--env=tests.envs.action_envs:MultiDiscreteTarget-v0`). Reward is higher the closer the action is to a fixed
target, so a learning step visibly moves the policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class _TargetEnv(gym.Env):
    def __init__(self, action_space: gym.Space):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = action_space
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def _score(self, action) -> float:
        raise NotImplementedError

    def step(self, action):
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, self._score(action), False, self.t >= 20, {}


class MultiDiscreteTarget(_TargetEnv):
    def __init__(self):
        super().__init__(gym.spaces.MultiDiscrete([3, 4]))

    def _score(self, action) -> float:
        assert action.shape == (2,) and action.dtype.kind == "i", action
        return float(action[0] == 2) + float(action[1] == 1)


class MultiDiscrete2DTarget(_TargetEnv):
    """nvec of shape (2, 2): the env must receive a (2, 2) integer array inside its space."""

    def __init__(self):
        super().__init__(gym.spaces.MultiDiscrete([[2, 3], [4, 5]]))

    def _score(self, action) -> float:
        assert self.action_space.contains(action), action
        return float(action[0, 1] == 2) + float(action[1, 0] == 3)


class TupleTarget(_TargetEnv):
    def __init__(self):
        super().__init__(gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32))))

    def _score(self, action) -> float:
        discrete, box = action
        assert isinstance(discrete, (int, np.integer)) and np.shape(box) == (2,), action
        return float(discrete == 1) - float(np.abs(np.asarray(box) - 0.5).sum())


gym.register("MultiDiscreteTarget-v0", entry_point=MultiDiscreteTarget)
gym.register("MultiDiscrete2DTarget-v0", entry_point=MultiDiscrete2DTarget)
gym.register("TupleTarget-v0", entry_point=TupleTarget)
