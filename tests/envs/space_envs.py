"""One small env per observation kind x action kind, registered as `SpaceCombo-<obs>-<act>-v0` on import (usable
from worker processes via `--env=tests.envs.space_envs:SpaceCombo-dict-tuple-v0`).

The env checks every action it receives against its space and, for the `dict_mask` observation, against the mask
it sent: a masked action reaching the env raises. Reward favours one fixed action, so a learning step has signal."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

IMAGE = gym.spaces.Box(0, 255, (3, 36, 36), np.uint8)
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

ACTION_SPACES = {
    "discrete": gym.spaces.Discrete(3),
    "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 4]),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32))),
}


def discrete_sizes(space: gym.Space) -> list[int]:
    """Sizes of the discrete parts of an action space, in order (the action mask covers these)."""
    if isinstance(space, gym.spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, gym.spaces.MultiDiscrete):
        return [int(n) for n in space.nvec]
    if isinstance(space, gym.spaces.Tuple):
        return [n for sub in space.spaces for n in discrete_sizes(sub)]
    return []


def observation_space(kind: str, action_space: gym.Space) -> gym.Space:
    if kind == "vector":
        return VECTOR
    if kind == "image":
        return IMAGE
    if kind == "image_hwc":  # gymnasium's frame layout (CarRacing, renders)
        return gym.spaces.Box(0, 255, (36, 40, 3), np.uint8)
    if kind == "tuple":  # as Blackjack's (the env layer makes it a Dict keyed "0", "1")
        return gym.spaces.Tuple((gym.spaces.Discrete(5), VECTOR))
    if kind == "discrete":
        return gym.spaces.Discrete(6)
    if kind == "dict":
        return gym.spaces.Dict({"screen": IMAGE, "vars": VECTOR, "room": gym.spaces.Discrete(4)})
    if kind == "dict_mask":
        return gym.spaces.Dict(
            {"obs": VECTOR, "action_mask": gym.spaces.MultiBinary(sum(discrete_sizes(action_space)))}
        )
    raise ValueError(kind)


OBS_KINDS = ("vector", "image", "image_hwc", "discrete", "tuple", "dict", "dict_mask")


def combinations() -> list[tuple[str, str]]:
    """Every (obs kind, action kind) pair; a mask needs discrete actions."""
    return [
        (o, a)
        for o in OBS_KINDS
        for a in ACTION_SPACES
        if not (o == "dict_mask" and not discrete_sizes(ACTION_SPACES[a]))
    ]


class SpaceComboEnv(gym.Env):
    def __init__(self, obs_kind: str, act_kind: str, episode_len: int = 10):
        self.action_space = ACTION_SPACES[act_kind]
        self.observation_space = observation_space(obs_kind, self.action_space)
        self.obs_kind, self.episode_len = obs_kind, episode_len
        self.sizes = discrete_sizes(self.action_space)
        self.mask = None
        self.t = 0

    def _obs(self):
        if self.obs_kind == "dict_mask":
            mask = (self.np_random.random(sum(self.sizes)) < 0.6).astype(np.int8)
            offset = 0
            for n in self.sizes:  # at least one allowed action per discrete part
                if not mask[offset : offset + n].any():
                    mask[offset + int(self.np_random.integers(n))] = 1
                offset += n
            self.mask = mask
            return {"obs": self.np_random.uniform(-1, 1, 4).astype(np.float32), "action_mask": mask}
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self._obs(), {}

    def _discrete_parts(self, action) -> list[int]:
        if isinstance(self.action_space, gym.spaces.Discrete):
            return [int(action)]
        if isinstance(self.action_space, gym.spaces.MultiDiscrete):
            return [int(a) for a in action]
        if isinstance(self.action_space, gym.spaces.Tuple):
            return [int(action[0])]
        return []

    def step(self, action):
        assert self.action_space.contains(
            np.asarray(action, dtype=self.action_space.dtype)
            if not isinstance(self.action_space, gym.spaces.Tuple)
            else (int(action[0]), np.asarray(action[1], np.float32))
        ), f"action {action!r} outside {self.action_space}"
        parts = self._discrete_parts(action)
        if self.mask is not None:
            offset = 0
            for a, n in zip(parts, self.sizes, strict=True):
                assert self.mask[offset + a], f"masked action {a} taken (mask {self.mask[offset : offset + n]})"
                offset += n
        reward = float(sum(a == 1 for a in parts))
        if isinstance(self.action_space, gym.spaces.Box):
            reward -= float(np.abs(np.asarray(action) - 0.5).sum())
        self.t += 1
        return self._obs(), reward, False, self.t >= self.episode_len, {}


for _o, _a in combinations():
    gym.register(f"SpaceCombo-{_o}-{_a}-v0", entry_point=SpaceComboEnv, kwargs={"obs_kind": _o, "act_kind": _a})
