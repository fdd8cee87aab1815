"""The defaults a run takes where flags are not typed: its env family's preset, else the one its spaces choose
(config/presets.py), with the reason logged at start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sample_factory.config.cfg import Config
from sample_factory.config.machine import usable_cores
from sample_factory.config.presets import (
    GPU_PRESETS,
    MUJOCO_NAMES,
    fit_to_cores,
    gpu_expected,
    preset_name_for_env,
    preset_values,
    space_preset,
)


def gymnasium_spaces(cfg: Any) -> tuple[Any, Any, int | None] | str:
    """(observation space, action space, max episode steps) of a gymnasium id or a mujoco_* name, from the env made
    once (gymnasium only, no torch); where it cannot be made, why. The reader of the spaces until envs/env_utils.py
    installs its own, which makes every env make_env makes (set_spaces_reader)."""
    import gymnasium as gym

    name = MUJOCO_NAMES.get(cfg.env, cfg.env)
    if name not in gym.registry:
        return "not a gymnasium id"
    try:
        made = gym.make(name)
    except Exception as e:  # noqa: BLE001 - a missing package or a broken env: make_env reports it with its hint
        return f"it could not be made here ({type(e).__name__})"
    try:
        return made.observation_space, made.action_space, cfg.max_episode_steps or gym.spec(name).max_episode_steps
    finally:
        made.close()


SpacesReader = Callable[[Config], "tuple[Any, Any, int | None] | str"]
# How an env's spaces are read for the defaults chosen from them: (observation space, action space, episode limit), or
# why they cannot be. envs/env_utils.py installs one that makes any env make_env makes (names given to register_env,
# module:EnvId, env packages' ids) when it is imported: by train.py and enjoy.py, and by every script that registers
# an env. Until then, gymnasium ids only.
_spaces_reader: SpacesReader = gymnasium_spaces


def set_spaces_reader(reader: SpacesReader) -> None:
    global _spaces_reader
    _spaces_reader = reader


def describe_space(space: Any) -> str:
    """A space in a few characters: Box(4,), Discrete(2), Dict(image: Box(7, 7, 3), direction: Discrete(4))."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {describe_space(v)}" for k, v in space.spaces.items()) + ")"
    if isinstance(space, gym.spaces.Tuple):
        return "Tuple(" + ", ".join(describe_space(v) for v in space.spaces) + ")"
    if isinstance(space, gym.spaces.Discrete):
        return f"Discrete({space.n})"
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return f"{type(space).__name__}{tuple(space.shape)}"
    return type(space).__name__


def preset_for(
    env: str | None, algo: str, device: str, cfg: Config | None = None, tuned_for: str = "auto"
) -> tuple[str | None, dict[str, Any], str]:
    """The preset a run of `env` gets here, its values and why: the env family's (with its GPU changes where training
    will run on a GPU, or as --tuned_for says), else, for any other env trained with PPO (DQN always gets a preset
    here), the one its spaces choose: a gymnasium id, `module:EnvId` or a name given to register_env is made once
    with `cfg` (the defaults where None) to read them, and gamma follows --max_episode_steps where given, else the
    env's own limit.
    (None, {}, why) where neither applies."""
    preset = preset_name_for_env(env, algo)
    if preset:
        gpu = preset in GPU_PRESETS and (tuned_for == "gpu" or (tuned_for == "auto" and gpu_expected(device)))
        setup = (" on a GPU" if tuned_for == "auto" else ", --tuned_for=gpu") if gpu else ""
        return preset, preset_values(preset, usable_cores(), gpu), f"{env}'s family{setup}"
    if env is None:
        return None, {}, "no --env"
    if cfg is None:
        cfg = Config.from_dict({"env": env, "algo": algo, "device": device})
    spaces = _spaces_reader(cfg)
    if isinstance(spaces, str):
        return None, {}, f"no defaults chosen from {env}'s spaces: {spaces}"
    shown = f"{describe_space(spaces[0])} observations, {describe_space(spaces[1])} actions"
    chosen = space_preset(*spaces)
    if chosen is None:
        return None, {}, f"{env}'s spaces ({shown}) fit no space defaults"
    return chosen[0], fit_to_cores(chosen[1], usable_cores()), f"chosen from {env}'s spaces: {shown}"


def defaults_line(cfg: Config) -> str:
    """The run's start line on its defaults: which preset filled the flags not typed, and why."""
    if cfg.preset:
        return f"defaults: the {cfg.preset} preset ({cfg.preset_reason}) for the flags not typed"
    why = f" ({cfg.preset_reason})" if cfg.preset_reason else ""
    return f"defaults: the global defaults{why}"
