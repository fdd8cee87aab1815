"""Which policy controls which agent when several policies share multi-agent envs (--num_policies > 1 with
--pbt_mix_policies_in_one_env). A mapping is chosen for an env at the start of each of its episodes.

A user mapping: `register_policy_mapping("teams", fn)` at import time of a module the workers import (e.g. the env's
module, with --env=module:EnvId), then --policy_mapping=teams. `fn(env_index, num_agents, num_policies, rng)` returns
one policy id per agent (a sequence of ints in [0, num_policies)); `rng` is the actor worker's numpy Generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

PolicyMapping = Callable[[int, int, int, np.random.Generator], Sequence[int] | np.ndarray]
_MAPPINGS: dict[str, PolicyMapping] = {}


def register_policy_mapping(name: str, fn: PolicyMapping) -> None:
    _MAPPINGS[name] = fn


def random_mapping(env_index: int, num_agents: int, num_policies: int, rng: np.random.Generator) -> np.ndarray:
    """Every agent gets a policy uniformly at random (self-play and league-style mixing)."""
    return rng.integers(0, num_policies, size=num_agents)


def get_policy_mapping(name: str | None) -> PolicyMapping:
    if name is None:
        return random_mapping
    if name not in _MAPPINGS:
        known = ", ".join(sorted(_MAPPINGS)) or "none registered"
        raise ValueError(f"--policy_mapping={name} is not registered (register_policy_mapping; known: {known})")
    return _MAPPINGS[name]


def checked_mapping(ids: Sequence[int] | np.ndarray, num_agents: int, num_policies: int) -> np.ndarray:
    out = np.asarray(ids, dtype=np.int64).reshape(-1)
    if out.shape != (num_agents,) or out.min() < 0 or out.max() >= num_policies:
        raise ValueError(f"policy mapping returned {list(out)}: expected {num_agents} ids in [0, {num_policies})")
    return out
