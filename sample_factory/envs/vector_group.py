"""`--env_backend=gymnasium_vector`: gymnasium's own batched implementation of an env (its `vector_entry_point`,
numpy over all envs of a split) instead of n python envs stepped in a loop. gymnasium has one for CartPole; it steps
32 envs in ~45 us where the python loop takes ~270 us.

gymnasium's CartPoleVectorEnv resets on the call after the one that ended an episode (next-step autoreset); our
engine needs same-step autoreset, so `SameStepCartPole` resets the finished envs at once, drawing their start state
as gymnasium does. The dynamics, the time limit and the rewards stay gymnasium's code.

`VectorEnvGroup` has the interface of `EnvGroup` (obs, final_obs, rewards, dones, truncated, active; reset,
random_steps, step, close), so the actor worker can use either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

from sample_factory.config import Config
from sample_factory.envs.env_group import BatchedEnvGroup, EnvError
from sample_factory.envs.spaces import OBS_KEY


class SameStepCartPole(CartPoleVectorEnv):
    """gymnasium's CartPoleVectorEnv with same-step autoreset: after `step`, the rows of finished envs hold the first
    observation of their next episode and info["final_obs"] the last one of the episode that ended."""

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, reward, term, trunc, info = super().step(action)
        done = term | trunc  # what the parent would reset on the next call: we reset now instead
        if done.any():
            info = {"final_obs": obs.copy(), "_final_obs": done.copy()}
            obs[done] = self.reset_envs(done)
        return obs, reward, term, trunc, info

    def reset_envs(self, mask: np.ndarray) -> np.ndarray:
        """Start a new episode in the envs of `mask` [n] bool; return their first observations [k, 4]."""
        k = int(mask.sum())
        state = cast(np.ndarray, self.state)  # set by the first reset (gymnasium declares it None)
        state[:, mask] = self.np_random.uniform(low=self.low, high=self.high, size=(4, k))
        self.steps[mask] = 0
        self.prev_done[mask] = False
        return state[:, mask].T.astype(np.float32)


# gymnasium id -> (class, keyword arguments): the registered spec's own time limit.
VECTOR_ENVS: dict[str, tuple[type, dict[str, Any]]] = {
    "CartPole-v1": (SameStepCartPole, {"max_episode_steps": 500}),
    "CartPole-v0": (SameStepCartPole, {"max_episode_steps": 200}),
}


def _vector_class(cfg: Config) -> tuple[type, dict[str, Any]]:
    if cfg.env not in VECTOR_ENVS:
        raise ValueError(
            f"env {cfg.env!r} has no batched implementation for --env_backend=gymnasium_vector "
            f"({', '.join(VECTOR_ENVS)} have); use --env_backend=gymnasium"
        )
    cls, kwargs = VECTOR_ENVS[cfg.env]
    if cfg.max_episode_steps:
        kwargs = {**kwargs, "max_episode_steps": cfg.max_episode_steps}
    return cls, kwargs


def vector_spaces(cfg: Config) -> tuple[gym.Space, gym.Space]:
    """Observation and action space of one env (not batched), those of the gymnasium env."""
    cls, kwargs = _vector_class(cfg)
    env = cls(num_envs=1, **kwargs)
    env.close()
    return env.single_observation_space, env.single_action_space


def make_vector_group(cfg: Config, num_envs: int, base_seed: int | None, env_ids: list[int]) -> VectorEnvGroup:
    """The envs of the split whose global env indices are `env_ids`, as one batch. One generator draws the start
    states of the whole batch: it is seeded with base_seed + env_ids[0] (random when base_seed is None)."""
    if len(env_ids) != num_envs:
        raise ValueError(f"{len(env_ids)} env ids for {num_envs} envs")
    cls, kwargs = _vector_class(cfg)
    seed = None if base_seed is None else base_seed + env_ids[0]
    return VectorEnvGroup(cls(num_envs=num_envs, **kwargs), env_ids, seed)


class VectorEnvGroup(BatchedEnvGroup):
    """One batched env with the semantics of `EnvGroup`: after `step`, `obs[OBS_KEY][i]` is what env i acts on next
    (the first observation of a new episode where dones[i]); `final_obs` holds the last observation of episodes
    that ended by truncation."""

    source = "gymnasium's batched env"

    def __init__(self, env: SameStepCartPole, env_ids: list[int] | None = None, seed: int | None = None):
        self.env = env
        space, actions = env.single_observation_space, env.single_action_space
        assert isinstance(space, gym.spaces.Box) and isinstance(actions, gym.spaces.Discrete)
        self._init_arrays(int(env.num_envs), space.shape, space.dtype, env_ids, seed)
        self.seed = seed
        self.action_space = actions

    # --- the group's API --------------------------------------------------------------------------------------

    def reset(self, between: Callable[[], None] | None = None) -> None:
        obs, _ = self.env.reset(seed=self.seed)
        self._put_obs(None, obs, "reset")
        self._clear_step(episodes=True)

    def random_steps(self, counts: list[int], between: Callable[[], None] | None = None) -> None:
        """Env i takes counts[i] random actions (decorrelates episodes). The batch steps together: env i takes
        max(counts) steps and is restarted at step max(counts) - counts[i], which leaves counts[i] random steps of
        one episode. Neither the episodes that end on the way nor the ones left running are reported (random steps
        are not the policy's)."""
        steps = np.asarray(counts, dtype=np.int64)
        k_max = int(steps.max(initial=0))
        for k in range(k_max):
            actions = self.rng.integers(0, self.action_space.n, size=self.n)
            obs, rew, term, trunc, _ = self.env.step(actions)
            restart = steps == k_max - k - 1  # its counts[i] steps begin with the next one
            if restart.any():
                obs[restart] = self.env.reset_envs(restart)
            self.episode_return += rew
            self.episode_len += 1
            new_episode = restart | term | trunc
            self.episode_return[new_episode] = 0.0
            self.episode_len[new_episode] = 0
            self._put_obs(None, obs, "step")
        self._clear_step()
        self.unreported[steps > 0] = True

    def step(self, actions: np.ndarray) -> list[tuple[float, int]]:
        """Step every env with actions [n]; return the (return, length) of the episodes that ended."""
        actions = np.asarray(actions)
        if actions.size and (actions.min() < 0 or actions.max() >= self.action_space.n):
            bad = int(np.flatnonzero((actions < 0) | (actions >= self.action_space.n))[0])
            raise EnvError(f"env {self.env_ids[bad]}: action {actions[bad]} outside {self.action_space}")
        obs, rew, term, trunc, info = self.env.step(actions)
        if not np.isfinite(rew).all():
            bad = int(np.argmin(np.isfinite(rew)))
            raise EnvError(f"env {self.env_ids[bad]}: step returned a NaN or inf reward")
        trunc = trunc & ~term  # a fall on the time limit's last step is a termination: no bootstrap past it
        done = term | trunc
        self.rewards[:] = rew
        self.dones[:] = done
        self.truncated[:] = trunc
        self.episode_return += rew
        self.episode_len += 1
        self._put_obs(None, obs, "step")
        finished: list[tuple[float, int]] = []
        self.finished_columns, self.finished_infos = [], []
        if done.any():
            final = info["final_obs"]
            if trunc.any():
                self.final_obs[OBS_KEY][trunc] = final[trunc]
            for i in np.flatnonzero(done & ~self.unreported):
                finished.append((float(self.episode_return[i]), int(self.episode_len[i])))
                self.finished_columns.append(int(i))
                self.finished_infos.append({})
            self.unreported[done] = False
            self.episode_return[done] = 0.0
            self.episode_len[done] = 0
        return finished

    def close(self) -> None:
        self.env.close()
