"""Which preset a run gets where flags are not typed: its env family's (by name), else the one its spaces choose,
with a GPU setup where training runs on a GPU and learner threads fitted to the cores; the reason is logged at start.
The preset tables themselves are config/presets.py."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from sample_factory.config.cfg import Config
from sample_factory.config.machine import usable_cores
from sample_factory.config.presets import GPU_PRESETS, PRESETS

CLASSIC_CONTROL_ENVS = ("CartPole-v0", "CartPole-v1", "Acrobot-v1")
LUNAR_LANDER_ENVS = ("LunarLander-v3",)
SPARSE_CLASSIC_CONTROL_ENVS = ("MountainCar-v0",)
# Pendulum only: the preset was tuned there (LunarLanderContinuous-v3 gets the defaults of its space, measured on it)
CONTINUOUS_CONTROL_ENVS = ("Pendulum-v1",)
SPARSE_CONTINUOUS_ENVS = ("MountainCarContinuous-v0",)
# VizDoom scenarios whose state is visible in one frame; maze and deathmatch scenarios keep the defaults
DOOM_FRAME_ENVS = (
    "doom_basic",
    "doom_defend_the_center",
    "doom_defend_the_line",
    "doom_health_gathering",
    "doom_take_cover",
)

# Short names for gymnasium's MuJoCo v5 envs (the [mujoco] extra; envs/env_utils.py makes them).
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


def env_name(cfg: Any) -> str:
    """--env as given (parse_cfg requires it)."""
    assert cfg.env, "parse_cfg requires --env"
    return str(cfg.env)


def gym_env_name(cfg: Any) -> str:
    """--env, a mujoco_<name> short name as its gymnasium id."""
    name = env_name(cfg)
    return MUJOCO_NAMES.get(name, name)


# The locomotion envs the mujoco preset was measured on (benchmarks/results/mujoco.md); the other MuJoCo ids get the
# defaults of their spaces (vector_continuous: the same PPO), measured on a sample of envs without a preset.
MUJOCO_ENV_PATTERN = re.compile(r"^(mujoco_(halfcheetah|hopper|walker)|(HalfCheetah|Hopper|Walker2d)-v\d+)$")

# CleanRL's and SB3's Atari ids (BreakoutNoFrameskip-v4): the same game as ALE/Breakout-v5 with v4's protocol (no
# sticky actions, which the atari preset sets anyway), made by envs/atari.py like our other Atari names.
ATARI_V4_ID = re.compile(r"^([A-Z][A-Za-z]*)NoFrameskip-v4$")

# family preset -> its --algo=DQN variant (the PPO presets' horizons, entropy bonuses and minibatches mean nothing to
# DQN; benchmarks/notebook.md#classic_control_dqn-preset for MountainCar's)
DQN_VARIANT = {
    "classic_control": "classic_control_dqn",
    "lunar_lander": "classic_control_dqn",
    "sparse_classic_control": "classic_control_dqn",
    "atari": "atari_dqn",
    "minatar": "minatar_dqn",
}

# preset -> the envs it applies to, as the config reference lists them
PRESET_ENVS = {
    "classic_control": ", ".join(CLASSIC_CONTROL_ENVS),
    "continuous_control": ", ".join(CONTINUOUS_CONTROL_ENVS),
    "atari": "atari_*, ALE/*, *NoFrameskip-v4",
    "lunar_lander": ", ".join(LUNAR_LANDER_ENVS),
    "sparse_classic_control": ", ".join(SPARSE_CLASSIC_CONTROL_ENVS),
    "sparse_continuous": ", ".join(SPARSE_CONTINUOUS_ENVS),
    "doom_frame": ", ".join(DOOM_FRAME_ENVS),
    "dqn": "--algo=DQN on envs without a family preset",
    "classic_control_dqn": ", ".join(CLASSIC_CONTROL_ENVS + LUNAR_LANDER_ENVS + SPARSE_CLASSIC_CONTROL_ENVS)
    + " with --algo=DQN",
    "atari_dqn": "atari_*, ALE/*, *NoFrameskip-v4 with --algo=DQN",
    "minatar": "MinAtar/*",
    "minatar_dqn": "MinAtar/* with --algo=DQN",
    "mujoco": "HalfCheetah-v*, Hopper-v*, Walker2d-v*, mujoco_halfcheetah, mujoco_hopper, mujoco_walker",
    "vector_discrete": "envs without a family preset: vector or index observations, discrete actions",
    "vector_continuous": "envs without a family preset: vector or index observations, continuous actions",
    "image": "envs without a family preset: image observations",
}


def is_atari_name(env: str | None) -> bool:
    """atari_<game>, ALE/<Game>-v5 or <Game>NoFrameskip-v4: the names envs/atari.py makes."""
    if not env:
        return False
    return env.startswith(("atari_", "ALE/")) or ATARI_V4_ID.match(env) is not None


def _family_preset(env: str | None) -> str | None:
    if env in CLASSIC_CONTROL_ENVS:
        return "classic_control"
    if env in LUNAR_LANDER_ENVS:
        return "lunar_lander"
    if env in SPARSE_CLASSIC_CONTROL_ENVS:
        return "sparse_classic_control"
    if env in CONTINUOUS_CONTROL_ENVS:
        return "continuous_control"
    if env in SPARSE_CONTINUOUS_ENVS:
        return "sparse_continuous"
    if is_atari_name(env):
        return "atari"
    if env and env.startswith("MinAtar/"):
        return "minatar"
    if env in DOOM_FRAME_ENVS:
        return "doom_frame"
    if env and MUJOCO_ENV_PATTERN.match(env):
        return "mujoco"
    return None


def preset_name_for_env(env: str | None, algo: str = "APPO") -> str | None:
    """The preset of the env's family; with --algo=DQN its DQN variant where there is one, else the family's
    (when it is feed-forward) or the generic "dqn" preset."""
    base = _family_preset(env)
    if algo != "DQN":
        return base
    if base in DQN_VARIANT:
        return DQN_VARIANT[base]
    return base if base is not None and PRESETS[base].get("use_rnn") is False else "dqn"


# frames with a shorter side below this (e.g. MinAtar's 10x10) get the `image` preset with IMPALA's ResNet
SMALL_FRAME = 36


def channels_last_frames(shape: tuple[int, ...]) -> bool:
    """Whether an image space of this shape is [H, W, C] (gymnasium's renders, CarRacing, board planes, most custom
    envs) rather than [C, H, W] (our Atari and VizDoom frames): a square frame decides ([N, N, C] or [C, N, N], as
    chess's [8, 8, 111] planes), otherwise the channels are a last size smaller than both others."""
    if shape[0] == shape[1] != shape[2]:
        return True
    if shape[1] == shape[2] != shape[0]:
        return False
    return shape[2] < shape[0] and shape[2] < shape[1]


def horizon_gamma(max_episode_steps: int | None) -> float:
    """0.99, longer for episodes of over 1,000 steps (1 - 10 / steps, at most 0.999): a return that looks about a
    tenth of an episode ahead."""
    if not max_episode_steps or max_episode_steps <= 1000:
        return 0.99
    return min(0.999, 1.0 - 10.0 / max_episode_steps)


def _is_vector(space: Any) -> bool:
    import gymnasium as gym

    return isinstance(space, gym.spaces.Discrete) or (isinstance(space, gym.spaces.Box) and len(space.shape) == 1)


def _is_image(space: Any) -> bool:
    import gymnasium as gym

    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def space_preset(obs_space: Any, action_space: Any, max_episode_steps: int | None) -> tuple[str, dict[str, Any]] | None:
    """The SPACE_PRESETS entry for an env with these gymnasium spaces, with gamma from its episode length: `image`
    where an image is among the observations (a frame, or a Dict or Tuple of frames and vectors: MiniGrid's image and
    direction), else `vector_*` by the actions. None for spaces none fits (nested Dicts or Tuples, multi-discrete
    actions: the global defaults apply)."""
    import gymnasium as gym

    if isinstance(obs_space, (gym.spaces.Tuple, gym.spaces.Dict)):
        # Blackjack's Tuple of Discretes (made a Dict by the env layer), a Dict of vectors and an action mask
        parts = list(obs_space.values() if isinstance(obs_space, gym.spaces.Dict) else obs_space)
    else:
        parts = [obs_space]
    if not parts or not all(_is_vector(s) or _is_image(s) for s in parts):
        return None
    frames = [s.shape for s in parts if _is_image(s)]
    if frames:
        if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.Box)):
            return None
        name = "image"
    elif isinstance(action_space, gym.spaces.Discrete):
        name = "vector_discrete"
    elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        name = "vector_continuous"
    else:
        return None
    values = {**PRESETS[name], "gamma": horizon_gamma(max_episode_steps)}
    if frames:
        smallest = min(min(shape[:2] if channels_last_frames(shape) else shape[1:]) for shape in frames)
        if smallest < SMALL_FRAME:
            # the atari conv net's 8x8 stride-4 first layer needs 36 pixels; IMPALA's ResNet pads and pools, so it
            # takes any size (MiniGrid's 7x7 view, MinAtar's 10x10 board)
            values["encoder_conv_architecture"] = "resnet_impala"
    return name, values


def gpu_expected(device: str) -> bool:
    """Whether --device will put training on a CUDA GPU (runtime/device.py decides for real). torch, slow to import,
    is imported only where an NVIDIA driver is present and --device=auto leaves the choice open."""
    if device == "cpu":
        return False
    if device in ("gpu", "cuda") or device.startswith("cuda:"):
        return True
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() in ("-1",) or (
        "CUDA_VISIBLE_DEVICES" in os.environ and not os.environ["CUDA_VISIBLE_DEVICES"].strip()
    ):
        return False
    if not (os.path.exists("/dev/nvidia0") or os.path.isdir("/proc/driver/nvidia")):
        return False
    import torch

    # NVML's count, not is_available()'s CUDA runtime query: this runs in the launcher before it forks the fork
    # server, and a fork of a process that queried the CUDA runtime cannot use CUDA (runtime/fork_server.py)
    return torch.cuda.device_count() > 0


def preset_values(name: str, cpu_count: int, gpu: bool = False) -> dict[str, Any]:
    """The preset's values on a machine with `cpu_count` cores, with its GPU_PRESETS changes where `gpu`."""
    return fit_to_cores({**PRESETS[name], **(GPU_PRESETS.get(name, {}) if gpu else {})}, cpu_count)


def fit_to_cores(values: dict[str, Any], cpu_count: int) -> dict[str, Any]:
    """A preset's values with its learner threads capped at half the cores: the samplers need the others, and a
    learner thread left without a core stalls the rest at every barrier
    (benchmarks/notebook.md#learner-threads-capped-at-half-the-cores)."""
    if "learner_main_loop_num_cores" in values:
        cap = max(1, cpu_count // 2)
        values = {**values, "learner_main_loop_num_cores": min(values["learner_main_loop_num_cores"], cap)}
    return values


def gymnasium_spaces(cfg: Any) -> tuple[Any, Any, int | None] | str:
    """(observation space, action space, max episode steps) of a gymnasium id or a mujoco_* name, from the env made
    once (gymnasium only, no torch); where it cannot be made, why. The reader of the spaces until envs/env_utils.py
    installs its own, which makes every env make_env makes (set_spaces_reader)."""
    import gymnasium as gym

    name = gym_env_name(cfg)
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
