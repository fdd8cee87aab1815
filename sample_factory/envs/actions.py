"""From a stored action row to what the env's step() takes. Actions are stored unbounded (the policy's sample, so
log-probs stay exact); Box parts are brought into the space's bounds here (--action_bounds), Tuple actions stored as
one row [K] become (nested) tuples."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def bound_box(x: np.ndarray, space: gym.spaces.Box, mode: str) -> np.ndarray:
    """[..., D] unbounded Gaussian samples -> the space's bounds: clip, tanh (squash), or none."""
    if mode == "clip":
        return np.clip(x, space.low, space.high).astype(space.dtype, copy=False)
    if mode == "tanh":
        return (space.low + (np.tanh(x) + 1.0) * 0.5 * (space.high - space.low)).astype(space.dtype, copy=False)
    return x.astype(space.dtype, copy=False)


def _check_bounds(space: gym.Space, mode: str) -> None:
    if isinstance(space, gym.spaces.Tuple):
        for sub in space.spaces:
            _check_bounds(sub, mode)
    elif isinstance(space, gym.spaces.Box) and mode == "tanh" and not space.is_bounded("both"):
        raise ValueError(f"--action_bounds=tanh needs finite bounds; the action space is {space}")


class ActionConverter:
    """Callable row -> env action. (A class, not a closure: serial snapshots pickle the env group.)"""

    def __init__(self, space: gym.Space, bounds: str = "clip"):
        _check_bounds(space, bounds)
        self.space, self.bounds = space, bounds

    def __call__(self, row: np.ndarray) -> Any:
        if isinstance(self.space, gym.spaces.Box):
            return bound_box(row, self.space, self.bounds)
        return self._build(self.space, row, 0)[0]

    def _build(self, sp: gym.Space, row: np.ndarray, i: int) -> tuple[Any, int]:
        if isinstance(sp, gym.spaces.Discrete):
            return int(row[i]), i + 1
        if isinstance(sp, gym.spaces.MultiDiscrete):
            k = sp.nvec.size
            return row[i : i + k].astype(sp.dtype).reshape(sp.nvec.shape), i + k  # stored flat: [K] -> nvec's shape
        if isinstance(sp, gym.spaces.Tuple):
            parts = []
            for sub in sp.spaces:
                part, i = self._build(sub, row, i)
                parts.append(part)
            return tuple(parts), i
        assert isinstance(sp, gym.spaces.Box), f"no action converter for {sp}"  # _check_bounds checked the kinds
        k = int(sp.shape[0])
        return bound_box(row[i : i + k], sp, self.bounds), i + k


def action_converter(space: gym.Space, bounds: str = "clip") -> ActionConverter | None:
    """None where the stored row is already the env's action (Discrete, 1-D MultiDiscrete, unbounded Box)."""
    if isinstance(space, gym.spaces.Tuple) or (isinstance(space, gym.spaces.Box) and bounds != "none"):
        return ActionConverter(space, bounds)
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim > 1:
        return ActionConverter(space, bounds)  # the flat row takes nvec's shape
    return None


def sample_action(space: gym.Space, mask: np.ndarray | None = None) -> Any:
    """A random env action; `mask` (the observation's flat action mask over the discrete parts) is respected."""
    if mask is None:
        return space.sample()
    return _masked_sample(space, np.asarray(mask, dtype=np.int8), 0)[0]


def _masked_sample(space: gym.Space, mask: np.ndarray, i: int) -> tuple[Any, int]:
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)
        return space.sample(mask=mask[i : i + n]), i + n
    if isinstance(space, gym.spaces.MultiDiscrete):
        parts = []
        for n in space.nvec.reshape(-1):
            parts.append(mask[i : i + int(n)])
            i += int(n)
        flat = gym.spaces.MultiDiscrete(space.nvec.reshape(-1), dtype=space.dtype, seed=space.np_random)
        return flat.sample(mask=tuple(parts)).reshape(space.nvec.shape), i
    if isinstance(space, gym.spaces.Tuple):
        out = []
        for sub in space.spaces:
            a, i = _masked_sample(sub, mask, i)
            out.append(a)
        return tuple(out), i
    return space.sample(), i
