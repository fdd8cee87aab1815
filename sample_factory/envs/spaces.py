"""Observations as named arrays. Every observation travels as a dict key -> array: a plain Box (or Discrete) space
is the single key "obs"; a gymnasium Dict space keeps its own keys. Buffers, the env group, the model and the
policy API all work on these dicts, so images, vectors and masks of one observation stay separate (and uint8 frames
stay uint8) end to end.

The key "action_mask" is special: it is not encoded; it marks the discrete actions allowed at this step. A Tuple
observation space becomes a Dict keyed by position when the env is made (TupleAsDict).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

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


def is_dict_space(space: gym.Space) -> TypeGuard[gym.spaces.Dict]:
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
        assert isinstance(env.observation_space, gym.spaces.Tuple)
        parts = env.observation_space.spaces
        self._keys = [str(i).zfill(len(str(len(parts) - 1))) for i in range(len(parts))]
        self.observation_space = gym.spaces.Dict(dict(zip(self._keys, parts)))

    def observation(self, observation: tuple) -> dict[str, Any]:
        return dict(zip(self._keys, observation))


ENCODED_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)


class ObsKeys(gym.ObservationWrapper):
    """A Dict observation with only `keys` (in the space's order); `left_out` names the others."""

    def __init__(self, env: gym.Env, keys: list[str]):
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Dict)
        self.keys = keys
        self.left_out = [k for k in space.spaces if k not in keys]
        self.observation_space = gym.spaces.Dict({k: space.spaces[k] for k in keys})

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {k: observation[k] for k in self.keys}


def with_dict_observations(env: gym.Env, keys: list[str] | tuple[str, ...] = ()) -> gym.Env:
    """`env`, its Tuple observations (if any) as a Dict (TupleAsDict), and a Dict's keys narrowed to `keys`
    (--obs_keys), or where none are given to those an encoder takes (a text mission, a nested Dict are left out).
    Raises ValueError (one line) for keys the observations do not have or no encoder takes."""
    if isinstance(env.observation_space, gym.spaces.Tuple):
        env = TupleAsDict(env)
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        if keys:
            raise ValueError(f"--obs_keys chooses keys of Dict observations; this env's are {type(space).__name__}")
        return env
    if keys:
        if missing := [k for k in keys if k not in space.spaces]:
            raise ValueError(f"--obs_keys: no observation key {missing[0]!r} (keys: {', '.join(space.spaces)})")
        if bad := [k for k in keys if not isinstance(space.spaces[k], ENCODED_SPACES)]:
            kind = type(space.spaces[bad[0]]).__name__
            raise ValueError(f"--obs_keys: no encoder takes {bad[0]!r} ({kind}); encoded: Box, Discrete, Multi*")
        chosen = [k for k in space.spaces if k in keys]
    else:
        chosen = [k for k, s in space.spaces.items() if isinstance(s, ENCODED_SPACES)]
        if not chosen:
            raise ValueError(f"no observation key an encoder takes (Box, Discrete, Multi*): {', '.join(space.spaces)}")
    return env if chosen == list(space.spaces) else ObsKeys(env, chosen)


def left_out_keys(env: gym.Env) -> list[str]:
    """The observation keys with_dict_observations left out of `env`, with their spaces' kinds."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, ObsKeys):
            parent = env.env.observation_space
            assert isinstance(parent, gym.spaces.Dict)
            return [f"{k} ({type(parent[k]).__name__})" for k in env.left_out]
        env = env.env
    return []


def alloc_obs(fields: dict[str, ObsField], *lead: int) -> dict[str, np.ndarray]:
    """Zeroed arrays [*lead, *shape] per key."""
    return {k: np.zeros((*lead, *f.shape), dtype=f.dtype) for k, f in fields.items()}
