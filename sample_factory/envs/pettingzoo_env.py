"""PettingZoo parallel envs as sample_factory multi-agent envs (the [pettingzoo] extra).

A multi-agent env (docs/environments.md) is a gymnasium.Env with `num_agents > 1` whose spaces are those of ONE
agent; `reset` returns a list of observations and a list of info dicts, `step` takes one action per agent and
returns lists/arrays with one entry per agent. An agent whose episode ended before the others' is inactive for the
rest of the episode: zero observation, reward 0, terminated/truncated False, `info["is_active"] = False`. The env
does not reset itself; the caller resets it once every agent that was active is done.

Names: `pettingzoo.<family>.<env_module>`, e.g. `pettingzoo.butterfly.knights_archers_zombies_v11`; the module's
`parallel_env()` builds the env. `pettingzoo.mpe.<env>` imports from the `mpe2` package, where MPE lives now.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

import gymnasium as gym
import numpy as np

from sample_factory.config import Config
from sample_factory.config.extras import install_hint

PREFIX = "pettingzoo."
# Families that left PettingZoo for a package of their own that kept the module names.
_MOVED_FAMILIES = {"mpe": "mpe2"}
_NOT_FAMILIES = {"utils", "test", "env_registry"}
_ENV_MODULE = re.compile(r"[A-Za-z_]+_v\d+")


def is_pettingzoo_name(name: str) -> bool:
    """True for names that `make_pettingzoo_env` handles (`pettingzoo.<family>.<env_module>`)."""
    return name.startswith(PREFIX)


def _is_mask_dict(space: gym.Space) -> TypeGuard[gym.spaces.Dict]:
    return isinstance(space, gym.spaces.Dict) and set(space.spaces) == {"observation", "action_mask"}


def _zeros(space: gym.Space) -> Any:
    """The observation of an inactive agent: zeros of the space's structure, shape and dtype (an action mask too:
    the engine keeps fully masked rows finite, and the step is masked out of training anyway)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _zeros(s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_zeros(s) for s in space.spaces)
    return np.zeros(space.shape, dtype=space.dtype)


def _copy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_copy(v) for v in x)
    return x.copy() if isinstance(x, np.ndarray) else x


def _shared_space(space_of: Callable[[Any], gym.Space], agents: list[Any], what: str) -> gym.Space:
    """One policy acts for every agent, so every agent must have the same space."""
    first = space_of(agents[0])
    differ = [a for a in agents[1:] if space_of(a) != first]
    if differ:
        details = "; ".join(f"{a!r}: {space_of(a)}" for a in differ)
        raise ValueError(
            f"the agents' {what} spaces differ ({agents[0]!r}: {first}; {details}); one policy controls all agents, "
            f"so all agents need the same {what} space"
        )
    return first


class PettingZooParallelEnv(gym.Env):
    """A PettingZoo ParallelEnv as a multi-agent gymnasium.Env. Agent i is `env.possible_agents[i]`. Agents that
    leave `env.agents` (or report terminated/truncated) become inactive until the next reset; an agent that is not
    in `env.agents` at reset joins when it first appears there (the step it appears in is inactive for it: it did
    not act, but its observation is the one to act on next). A Dict observation of exactly "observation" and
    "action_mask" is passed through as is, the mask untouched."""

    def __init__(self, env: Any):
        self.env = env
        self.agent_ids: list[Any] = list(env.possible_agents)
        self.num_agents = len(self.agent_ids)
        if self.num_agents < 2:
            raise ValueError(
                f"the PettingZoo env has {self.num_agents} possible agent(s); multi-agent envs need at least 2 "
                "(a single-agent env should be a plain gymnasium env)"
            )
        self._index = {a: i for i, a in enumerate(self.agent_ids)}
        self.observation_space = _shared_space(env.observation_space, self.agent_ids, "observation")
        self.action_space = _shared_space(env.action_space, self.agent_ids, "action")
        if _is_mask_dict(self.observation_space):
            self._check_mask_space(self.observation_space["action_mask"])
        self.metadata = getattr(env, "metadata", {}) or {}
        self.render_mode = getattr(env, "render_mode", None)
        self._zero_obs = _zeros(self.observation_space)
        self._live: set[Any] = set()  # agents acting in the current episode
        self._done: set[Any] = set()  # agents whose episode already ended (they must not rejoin)

    def _check_mask_space(self, mask: gym.Space) -> None:
        # the engine reads "action_mask" as allowed/forbidden per discrete action
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(f"an action_mask observation needs Discrete actions, got {self.action_space}")
        n = int(self.action_space.n)
        if (
            mask.shape is None
            or tuple(mask.shape) != (n,)
            or mask.dtype is None
            or np.dtype(mask.dtype).kind not in "biu"
        ):
            raise ValueError(
                f"the action_mask space {mask} does not fit {self.action_space}: expected an integer or bool "
                f"mask of shape ({n},)"
            )

    def _obs(self, obs: dict[Any, Any], agent: Any) -> Any:
        o = obs.get(agent)
        if o is None:  # some envs return no final observation for an agent that left
            return _copy(self._zero_obs)
        if isinstance(o, dict) and _is_mask_dict(self.observation_space):
            return {"observation": o["observation"], "action_mask": o["action_mask"]}
        return o

    def _inactive(self) -> tuple[Any, dict[str, Any]]:
        return _copy(self._zero_obs), {"is_active": False}

    def _action(self, a: Any) -> Any:
        if isinstance(self.action_space, gym.spaces.Discrete):
            return int(np.asarray(a).item())  # PettingZoo envs often index lists with the action
        if isinstance(self.action_space, gym.spaces.Box):
            return np.asarray(a, dtype=self.action_space.dtype).reshape(self.action_space.shape)
        return a

    # the multi-agent interface (docs/environments.md): lists of one entry per agent, not gymnasium's single values
    def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list, list[dict]]:
        super().reset(seed=seed)
        obs_d, info_d = self.env.reset(seed=seed, options=options)
        self._live = set(self.env.agents)
        self._done = set()
        obs, infos = [], []
        for a in self.agent_ids:
            if a in self._live:
                obs.append(self._obs(obs_d, a))
                infos.append({**(info_d.get(a) or {}), "is_active": True})
            else:
                o, info = self._inactive()
                obs.append(o)
                infos.append(info)
        return obs, infos

    def step(  # type: ignore[override]
        self, actions: Sequence[Any]
    ) -> tuple[list, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        if len(actions) != self.num_agents:
            raise ValueError(f"expected {self.num_agents} actions (one per agent), got {len(actions)}")
        # the env wants actions exactly for the agents it still lists
        act_d = {a: self._action(actions[self._index[a]]) for a in self.env.agents}
        obs_d, rew_d, term_d, trunc_d, info_d = self.env.step(act_d)
        present = set(self.env.agents)
        n = self.num_agents
        rewards = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        obs, infos = [], []
        for i, a in enumerate(self.agent_ids):
            if a in self._live:
                term, trunc = bool(term_d.get(a, False)), bool(trunc_d.get(a, False))
                if not (term or trunc) and a not in present:
                    term = True  # left without a flag: its episode is over all the same
                obs.append(self._obs(obs_d, a))
                infos.append({**(info_d.get(a) or {}), "is_active": True})
                rewards[i] = float(rew_d.get(a, 0.0))
                terminated[i], truncated[i] = term, trunc
                if term or trunc:
                    self._live.discard(a)
                    self._done.add(a)
            elif a in present and a not in self._done and a in obs_d:
                # joins now: it did not act in this step, but acts on this observation next
                self._live.add(a)
                obs.append(self._obs(obs_d, a))
                infos.append({**(info_d.get(a) or {}), "is_active": False})
            else:
                o, info = self._inactive()
                obs.append(o)
                infos.append(info)
        return obs, rewards, terminated, truncated, infos

    @property
    def episode_over(self) -> bool:
        """True once no agent is acting any more (the caller resets then)."""
        return not self._live

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def _env_modules(package: Any) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if _ENV_MODULE.fullmatch(m.name))


def _families() -> list[str]:
    import pettingzoo

    found = {m.name for m in pkgutil.iter_modules(pettingzoo.__path__) if m.ispkg} - _NOT_FAMILIES
    return sorted(found | set(_MOVED_FAMILIES))


def _unknown_env_hint(package_name: str, family: str, env_module: str) -> str:
    try:
        modules = _env_modules(importlib.import_module(package_name))
    except ImportError:
        return ""
    close = difflib.get_close_matches(env_module, modules, n=3, cutoff=0.6)
    names = [f"{PREFIX}{family}.{m}" for m in (close or modules)]
    return f"; did you mean {', '.join(names)}?" if close else f"; available: {', '.join(names)}"


def _import_env_module(name: str, family: str, env_module: str) -> Any:
    package = _MOVED_FAMILIES.get(family, f"pettingzoo.{family}")
    full = f"{package}.{env_module}"
    try:
        with warnings.catch_warnings():
            # PettingZoo 1.27 warns that creating envs from their modules is deprecated in favour of its registry;
            # the modules still work, in older PettingZoo versions and in mpe2 too
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module(full)
    except ModuleNotFoundError as e:
        if e.name == full:
            raise ValueError(
                f"unknown PettingZoo env {name!r}{_unknown_env_hint(package, family, env_module)}"
            ) from None
        if e.name == package:
            if family in _MOVED_FAMILIES:
                raise ValueError(
                    f"env {name!r} needs the package {package!r}, which is not installed: "
                    f"{install_hint(packages=(package,))}"
                ) from None
            raise ValueError(
                f"unknown PettingZoo family {family!r} in {name!r}; families: {', '.join(_families())}"
            ) from None
        raise ValueError(
            f"env {name!r} needs the package {e.name!r}, which is not installed: "
            f"{install_hint(packages=(f'pettingzoo[{family}]',))}"
        ) from None
    except ImportError as e:  # e.g. PettingZoo's stub modules for families that moved elsewhere
        raise ValueError(f"env {name!r} cannot be imported: {e}") from None


def make_pettingzoo_env(cfg: Config, name: str, render_mode: str | None = None) -> PettingZooParallelEnv:
    """Create `pettingzoo.<family>.<env_module>` through the module's `parallel_env()`, wrapped as a multi-agent
    env. Every failure to find or import the env is a ValueError that says what to install or which names exist."""
    parts = name.split(".")
    if len(parts) != 3 or not all(parts) or parts[0] + "." != PREFIX:
        raise ValueError(
            f"PettingZoo env names look like pettingzoo.<family>.<env_module> "
            f"(e.g. pettingzoo.butterfly.knights_archers_zombies_v11), got {name!r}"
        )
    try:
        import pettingzoo  # noqa: F401
    except ImportError:
        raise ValueError(f"env {name!r} needs an optional package: {install_hint('pettingzoo')}") from None
    _, family, env_module = parts
    module = _import_env_module(name, family, env_module)
    if not hasattr(module, "parallel_env"):
        raise ValueError(
            f"env {name!r} has no parallel_env() (turn-based PettingZoo envs are AEC only); "
            "only parallel PettingZoo envs are supported"
        )
    kwargs = {} if render_mode is None else {"render_mode": render_mode}
    return PettingZooParallelEnv(module.parallel_env(**kwargs))
