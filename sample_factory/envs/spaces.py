"""Observations as named arrays. Every observation travels as a dict key -> array: a plain Box (or Discrete) space
is the single key "obs"; a gymnasium Dict space keeps its own keys. Buffers, the env group, the model and the
policy API all work on these dicts, so images, vectors and masks of one observation stay separate (and uint8 frames
stay uint8) end to end.

The key "action_mask" is special: it is not encoded; it marks the discrete actions allowed at this step. A Tuple
observation space becomes a Dict keyed by position when the env is made (TupleAsDict).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

OBS_KEY = "obs"  # the key of a non-Dict observation
ACTION_MASK_KEY = "action_mask"


@dataclass(frozen=True)
class ObsField:
    shape: tuple[int, ...]
    dtype: np.dtype


def obs_fields(space: gym.Space) -> dict[str, ObsField]:
    """key -> (shape, dtype) of one observation from `space` (Box, Discrete, MultiBinary, MultiDiscrete, or a
    flat Dict of these)."""
    if isinstance(space, gym.spaces.Dict):
        out = {}
        for key, sub in space.spaces.items():
            if isinstance(sub, (gym.spaces.Dict, gym.spaces.Tuple)):
                raise ValueError(f"observation key {key!r}: nested {type(sub).__name__} spaces are not supported")
            out[key] = _field(sub, key)
        if not out:
            raise ValueError("empty Dict observation space")
        return out
    return {OBS_KEY: _field(space, OBS_KEY)}


def _field(space: gym.Space, key: str) -> ObsField:
    if isinstance(space, gym.spaces.Discrete):
        return ObsField((), np.dtype(np.int64))
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return ObsField(tuple(space.shape), np.dtype(space.dtype))
    raise ValueError(f"observation {key!r}: unsupported space {space} (Box, Discrete, MultiBinary, MultiDiscrete)")


def obs_subspaces(space: gym.Space) -> dict[str, gym.Space]:
    """key -> space, matching `obs_fields`."""
    return dict(space.spaces) if isinstance(space, gym.spaces.Dict) else {OBS_KEY: space}


def is_dict_space(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict)


def as_obs_dict(obs: Any, space: gym.Space) -> dict[str, Any]:
    """An env's observation as key -> value. A tuple for a Dict space is a Tuple env's raw observation (or a tuple
    of batches, one per part), taken in the keys' order (TupleAsDict's)."""
    if is_dict_space(space):
        return dict(zip(space.spaces, obs, strict=True)) if isinstance(obs, tuple) else obs
    return {OBS_KEY: obs}


class TupleAsDict(gym.ObservationWrapper):
    """A flat Tuple observation (Blackjack's player sum, dealer card and usable ace) as a Dict keyed "0", "1", ...
    (zero-padded past 10 parts, so the keys sort in the Tuple's order): the Dict path, one encoder per part, covers
    it."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        parts = env.observation_space.spaces
        self._keys = [str(i).zfill(len(str(len(parts) - 1))) for i in range(len(parts))]
        self.observation_space = gym.spaces.Dict(dict(zip(self._keys, parts)))

    def observation(self, observation: tuple) -> dict[str, Any]:
        return dict(zip(self._keys, observation))


def with_dict_observations(env: gym.Env) -> gym.Env:
    """`env`, its Tuple observations (if any) as a Dict (TupleAsDict); nested Tuples stay unsupported (obs_fields
    says so)."""
    return TupleAsDict(env) if isinstance(env.observation_space, gym.spaces.Tuple) else env


def alloc_obs(fields: dict[str, ObsField], *lead: int) -> dict[str, np.ndarray]:
    """Zeroed arrays [*lead, *shape] per key."""
    return {k: np.zeros((*lead, *f.shape), dtype=f.dtype) for k, f in fields.items()}
