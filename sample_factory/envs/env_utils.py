"""Env creation (registry + gymnasium ids), probing the spaces in a subprocess, and `EnvGroup`, which steps the
envs of one split in lockstep with same-step autoreset into preallocated arrays."""

from __future__ import annotations

import difflib
import importlib
import multiprocessing
import traceback
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from sample_factory.envs.atari import atari_env_id, make_atari_env

_ENV_REGISTRY: dict[str, Callable[..., gym.Env]] = {}


def register_env(name: str, make_env_fn: Callable[..., gym.Env]) -> None:
    """Register a custom env: `make_env_fn(cfg, env_config)` returns a gymnasium.Env."""
    _ENV_REGISTRY[name] = make_env_fn


# Env families whose package comes with an extra of ours: (name prefixes/fragments, extra).
_EXTRAS = (
    (("ALE/", "atari_"), "atari"),
    (
        (
            "HalfCheetah",
            "Ant-",
            "Hopper",
            "Walker2d",
            "Humanoid",
            "Swimmer",
            "Reacher",
            "InvertedPendulum",
            "Pusher",
            "mujoco_",
        ),
        "mujoco",
    ),
    (("Vizdoom", "doom_"), "vizdoom"),
)


# Short names for gymnasium's MuJoCo v5 envs (the [mujoco] extra).
MUJOCO_NAMES = {
    f"mujoco_{short}": f"{full}-v5"
    for short, full in {
        "halfcheetah": "HalfCheetah",
        "ant": "Ant",
        "hopper": "Hopper",
        "walker": "Walker2d",
        "humanoid": "Humanoid",
        "humanoidstandup": "HumanoidStandup",
        "swimmer": "Swimmer",
        "reacher": "Reacher",
        "pusher": "Pusher",
        "invertedpendulum": "InvertedPendulum",
        "inverteddoublependulum": "InvertedDoublePendulum",
    }.items()
}


def _missing_extra_hint(env_name: str) -> str:
    for fragments, extra in _EXTRAS:
        if any(f in env_name for f in fragments):
            return f"; this env needs an optional package: pip install -e .[{extra}]"
    return ""


def make_env(cfg: Any, env_config: dict | None = None, render_mode: str | None = None) -> gym.Env:
    """`--env` is a registered custom name, a gymnasium id, or `module:EnvId` (the module is imported first, so
    envs registered by it exist in every worker process too). A render mode goes to gym.make, or to a custom
    env's factory as env_config["render_mode"]."""
    name = MUJOCO_NAMES.get(cfg.env, cfg.env)
    ale_id = atari_env_id(name)
    if ale_id is not None:
        return make_atari_env(cfg, ale_id, render_mode)
    if ":" in name:
        module, name = name.split(":", 1)
        importlib.import_module(module)
    if name in _ENV_REGISTRY:
        config = dict(env_config or {})
        if render_mode is not None:
            config["render_mode"] = render_mode
        return _ENV_REGISTRY[name](cfg, config)
    if name not in gym.registry:
        hint = _missing_extra_hint(name)
        if not hint:
            close = difflib.get_close_matches(name, list(_ENV_REGISTRY) + list(gym.registry.keys()), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown env {name!r}{hint}")
    try:
        return gym.make(name, render_mode=render_mode) if render_mode else gym.make(name)
    except gym.error.DependencyNotInstalled as e:
        raise ValueError(f"env {name!r} cannot be created: {e}{_missing_extra_hint(name)}") from None


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


class TupleActionConverter:
    """Tuple actions are stored as one float row [K]; the env wants a (nested) tuple. (A class, not a closure:
    serial snapshots pickle the envs' group.)"""

    def __init__(self, space: gym.spaces.Tuple):
        self.space = space

    def __call__(self, row: np.ndarray) -> Any:
        return self._build(self.space, row, 0)[0]

    def _build(self, sp: gym.Space, row: np.ndarray, i: int) -> tuple[Any, int]:
        if isinstance(sp, gym.spaces.Discrete):
            return int(row[i]), i + 1
        if isinstance(sp, gym.spaces.MultiDiscrete):
            k = sp.nvec.size
            return row[i : i + k].astype(np.int64), i + k
        if isinstance(sp, gym.spaces.Tuple):
            parts = []
            for sub in sp.spaces:
                part, i = self._build(sub, row, i)
                parts.append(part)
            return tuple(parts), i
        k = int(sp.shape[0])
        return row[i : i + k].astype(sp.dtype), i + k


class EnvError(RuntimeError):
    """An env raised or returned something invalid; the message names the env and the field."""


class EnvGroup:
    """n envs stepped in lockstep. After `step`, `obs[i]` is the observation to act on next: the reset
    observation where the episode ended (same-step autoreset); the final observation of a truncated episode is
    kept in `final_obs[i]` for value bootstrapping. Everything an env returns is checked here, at the boundary:
    a wrong shape or dtype, NaN/inf observations or rewards raise EnvError naming the env."""

    def __init__(self, envs: list[gym.Env], seeds: list[int | None], env_ids: list[int] | None = None):
        self.envs = envs
        self.n = len(envs)
        self.env_ids = env_ids if env_ids is not None else list(range(self.n))
        space = envs[0].observation_space
        self.obs_shape, self.obs_dtype = tuple(space.shape), space.dtype
        self.check_finite = np.issubdtype(space.dtype, np.floating)
        self.obs = np.zeros((self.n, *space.shape), dtype=space.dtype)  # [n, *obs_shape]
        self.final_obs = np.zeros_like(self.obs)
        self.rewards = np.zeros(self.n, dtype=np.float32)
        self.dones = np.zeros(self.n, dtype=bool)
        self.truncated = np.zeros(self.n, dtype=bool)
        self.episode_return = np.zeros(self.n, dtype=np.float64)
        self.episode_len = np.zeros(self.n, dtype=np.int64)
        self.seeds = seeds
        space = envs[0].action_space
        self.convert_action = TupleActionConverter(space) if isinstance(space, gym.spaces.Tuple) else None

    def _checked(self, i: int, o: Any, where: str) -> Any:
        shape = getattr(o, "shape", None)
        if shape is None:
            o = np.asarray(o)
            shape = o.shape
        if tuple(shape) != self.obs_shape:
            raise EnvError(
                f"env {self.env_ids[i]}: {where} returned an observation of shape {tuple(shape)}, "
                f"expected {self.obs_shape}"
            )
        dtype = getattr(o, "dtype", None)
        if dtype is not None and not np.can_cast(dtype, self.obs_dtype, "same_kind"):
            raise EnvError(
                f"env {self.env_ids[i]}: {where} returned an observation of dtype {dtype}, expected {self.obs_dtype}"
            )
        return o

    def _call(self, i: int, where: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise EnvError(f"env {self.env_ids[i]} raised in {where}: {type(e).__name__}: {e}") from e

    def reset(self) -> np.ndarray:
        for i, env in enumerate(self.envs):
            o, _ = self._call(i, "reset", env.reset, seed=self.seeds[i])
            self.obs[i] = self._checked(i, o, "reset")
        self._check_finite_obs("reset")
        self.episode_return[:] = 0
        self.episode_len[:] = 0
        return self.obs

    def random_steps(self, counts: list[int]) -> None:
        """Step env i `counts[i]` times with random actions (decorrelates episodes), with the same checks."""
        for i, env in enumerate(self.envs):
            o = None
            for _ in range(counts[i]):
                o, _, term, trunc, _ = self._call(i, "step", env.step, env.action_space.sample())
                if term or trunc:
                    o, _ = self._call(i, "reset", env.reset)
            if o is not None:
                self.obs[i] = self._checked(i, o, "step")
        self._check_finite_obs("step")

    def _check_finite_obs(self, where: str) -> None:
        if self.check_finite and not np.isfinite(self.obs).all():
            bad = int(np.argwhere(~np.isfinite(self.obs.reshape(self.n, -1)))[0][0])
            raise EnvError(f"env {self.env_ids[bad]}: {where} returned a NaN or inf observation")

    def step(self, actions: np.ndarray) -> list[tuple[float, int]]:
        """Step every env with actions [n, ...]; return the (return, length) of episodes that ended."""
        finished = []
        obs, rewards, dones, truncated = self.obs, self.rewards, self.dones, self.truncated
        for i, env in enumerate(self.envs):
            try:
                a = actions[i] if self.convert_action is None else self.convert_action(actions[i])
                o, r, term, trunc, _ = env.step(a)
            except Exception as e:
                raise EnvError(f"env {self.env_ids[i]} raised in step: {type(e).__name__}: {e}") from e
            o = self._checked(i, o, "step")
            rewards[i] = r
            self.episode_return[i] += r
            self.episode_len[i] += 1
            if term or trunc:
                finished.append((float(self.episode_return[i]), int(self.episode_len[i])))
                self.episode_return[i] = 0.0
                self.episode_len[i] = 0
                if trunc and not term:
                    self.final_obs[i] = o
                o, _ = self._call(i, "reset", env.reset)
                o = self._checked(i, o, "reset")
            obs[i] = o
            dones[i] = term or trunc
            truncated[i] = trunc and not term
        if not np.isfinite(rewards).all():
            raise EnvError(
                f"env {self.env_ids[int(np.argmin(np.isfinite(rewards)))]}: step returned a NaN or inf reward"
            )
        self._check_finite_obs("step")
        return finished

    def close(self) -> None:
        for env in self.envs:
            env.close()
