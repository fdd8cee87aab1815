"""Env creation (registry + gymnasium ids), probing the spaces in a subprocess, and `EnvGroup`, which steps the
envs of one split in lockstep with same-step autoreset into preallocated arrays."""

from __future__ import annotations

import difflib
import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

_ENV_REGISTRY: dict[str, Callable[..., gym.Env]] = {}


def register_env(name: str, make_env_fn: Callable[..., gym.Env]) -> None:
    """Register a custom env: `make_env_fn(cfg, env_config)` returns a gymnasium.Env."""
    _ENV_REGISTRY[name] = make_env_fn


def make_env(cfg: Any, env_config: dict | None = None) -> gym.Env:
    if cfg.env in _ENV_REGISTRY:
        return _ENV_REGISTRY[cfg.env](cfg, env_config or {})
    if cfg.env not in gym.registry:
        known = list(_ENV_REGISTRY) + list(gym.registry.keys())
        close = difflib.get_close_matches(cfg.env, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown env {cfg.env!r}{hint}")
    return gym.make(cfg.env)


def _probe_target(cfg: Any, conn) -> None:
    try:
        env = make_env(cfg)
        conn.send(("ok", (env.observation_space, env.action_space)))
        env.close()
    except Exception as e:  # sent back to the parent as one clear line
        conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
    finally:
        conn.close()


def probe_env_spaces(cfg: Any, ctx: Any = None) -> tuple[gym.Space, gym.Space]:
    """Create the env once to read its spaces. A subprocess (from multiprocessing context `ctx`, spawn when not
    given) keeps env state out of the runner; a timeout turns a hanging env constructor into an error.
    `ctx=False` probes in this process (serial mode)."""
    if ctx is False:
        env = make_env(cfg)
        spaces = env.observation_space, env.action_space
        env.close()
        return spaces
    ctx = ctx or multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_probe_target, args=(cfg, child), name="sf_env_probe", daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(cfg.probe_env_timeout_sec):
            raise RuntimeError(f"creating env {cfg.env!r} took longer than {cfg.probe_env_timeout_sec} s")
        result = parent.recv()
    except EOFError:
        raise RuntimeError(f"the process creating env {cfg.env!r} died (exit code {proc.exitcode})") from None
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
    if result[0] == "error":
        raise RuntimeError(f"could not create env {cfg.env!r}: {result[1]}")
    return result[1]


class EnvGroup:
    """n envs stepped in lockstep. After `step`, `obs[i]` is the observation to act on next: the reset
    observation where the episode ended (same-step autoreset); the final observation of a truncated episode is
    kept in `final_obs[i]` for value bootstrapping."""

    def __init__(self, envs: list[gym.Env], seeds: list[int | None]):
        self.envs = envs
        self.n = len(envs)
        space = envs[0].observation_space
        self.obs = np.zeros((self.n, *space.shape), dtype=space.dtype)  # [n, *obs_shape]
        self.final_obs = np.zeros_like(self.obs)
        self.rewards = np.zeros(self.n, dtype=np.float32)
        self.dones = np.zeros(self.n, dtype=bool)
        self.truncated = np.zeros(self.n, dtype=bool)
        self.episode_return = np.zeros(self.n, dtype=np.float64)
        self.episode_len = np.zeros(self.n, dtype=np.int64)
        self.seeds = seeds

    def reset(self) -> np.ndarray:
        for i, env in enumerate(self.envs):
            self.obs[i], _ = env.reset(seed=self.seeds[i])
        self.episode_return[:] = 0
        self.episode_len[:] = 0
        return self.obs

    def step(self, actions: np.ndarray) -> list[tuple[float, int]]:
        """Step every env with actions [n, ...]; return the (return, length) of episodes that ended."""
        finished = []
        obs, rewards, dones, truncated = self.obs, self.rewards, self.dones, self.truncated
        for i, env in enumerate(self.envs):
            o, r, term, trunc, _ = env.step(actions[i])
            rewards[i] = r
            self.episode_return[i] += r
            self.episode_len[i] += 1
            if term or trunc:
                finished.append((float(self.episode_return[i]), int(self.episode_len[i])))
                self.episode_return[i] = 0.0
                self.episode_len[i] = 0
                if trunc and not term:
                    self.final_obs[i] = o
                o, _ = env.reset()
            obs[i] = o
            dones[i] = term or trunc
            truncated[i] = trunc and not term
        return finished

    def close(self) -> None:
        for env in self.envs:
            env.close()
