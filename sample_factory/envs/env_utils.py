"""Env creation (registry, gymnasium ids, the built-in families: Atari, MinAtar, MuJoCo, VizDoom, PettingZoo) and
probing the spaces in a subprocess. Stepping envs in lockstep is envs/env_group.py."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import multiprocessing
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium as gym

from sample_factory.config import Config
from sample_factory.config.env_defaults import ATARI_V4_ID, MUJOCO_NAMES, env_name, gym_env_name, is_atari_name
from sample_factory.config.extras import install_hint
from sample_factory.config.parse import set_spaces_reader
from sample_factory.envs.atari import atari_env_id, make_atari_env, register_ale_envs
from sample_factory.envs.env_group import env_num_agents
from sample_factory.envs.minatar import is_minatar_id, make_minatar_env, parse_minatar_id, unknown_minatar_message
from sample_factory.envs.process_tree import LEFT_BEHIND_GRACE_SEC, descendants, end_processes
from sample_factory.envs.spaces import left_out_keys, with_dict_observations

_ENV_REGISTRY: dict[str, Callable[..., gym.Env]] = {}


def register_env(name: str, make_env_fn: Callable[..., gym.Env]) -> None:
    """Register a custom env: `make_env_fn(cfg, env_config)` returns a gymnasium.Env."""
    _ENV_REGISTRY[name] = make_env_fn


# Env families whose package comes with an extra of ours: (name prefixes/fragments, extra).
_EXTRAS = (
    (("ALE/", "atari_", "NoFrameskip-v4"), "atari"),
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
    (("MinAtar/",), "minatar"),
    (("LunarLander", "BipedalWalker", "CarRacing"), "box2d"),  # gymnasium's own message names swig and its extra
    (("MiniGrid-", "BabyAI-"), "minigrid"),
    (("popgym-",), "popgym"),
)


def _missing_extra_hint(env_name: str) -> str:
    for fragments, extra in _EXTRAS:
        if any(f in env_name for f in fragments):
            return f"; this env needs an optional package: {install_hint(extra)}"
    return ""


def make_env(cfg: Config, env_config: dict | None = None, render_mode: str | None = None) -> gym.Env:
    """`--env` is a registered custom name, a gymnasium id, or `module:EnvId` (the module is imported first, so
    envs registered by it exist in every worker process too). A render mode goes to gym.make, or to a custom
    env's factory as env_config["render_mode"]."""
    name = gym_env_name(cfg)
    ale_id = atari_env_id(name)
    if ale_id is not None:
        return make_atari_env(cfg, ale_id, render_mode)
    if name.startswith(("doom_", "Vizdoom")):
        from sample_factory.envs.doom import doom_env_id, make_doom_env

        doom_id = doom_env_id(name)
        if doom_id is not None:
            return make_doom_env(cfg, doom_id, render_mode)
    if is_minatar_id(name):
        return make_minatar_env(cfg, name, render_mode)
    if name.startswith("pettingzoo."):
        from sample_factory.envs.pettingzoo_env import make_pettingzoo_env

        return make_pettingzoo_env(cfg, name, render_mode)
    if ":" in name:
        module, name = name.split(":", 1)
        importlib.import_module(module)
    limit = cfg.max_episode_steps
    if name in _ENV_REGISTRY:
        config = dict(env_config or {})
        if render_mode is not None:
            config["render_mode"] = render_mode
        env = with_dict_observations(_ENV_REGISTRY[name](cfg, config), cfg.obs_keys)
        return gym.wrappers.TimeLimit(env, limit) if limit else env
    import_env_package(name)
    if name not in gym.registry:
        raise ValueError(_unknown_gym_env(name))
    kwargs: dict[str, Any] = {"render_mode": render_mode} if render_mode else {}
    if limit:
        kwargs["max_episode_steps"] = limit  # replaces the registered limit
    try:
        return with_dict_observations(gym.make(name, **kwargs), cfg.obs_keys)
    except gym.error.DependencyNotInstalled as e:
        # gymnasium's message names its own pip command; where an extra of ours brings the package, ours alone
        hint = _missing_extra_hint(name)
        raise ValueError(f"env {name!r} cannot be created: {'a package is missing' if hint else e}{hint}") from None


# Env packages whose module is not their ids' prefix in lower case
_ID_PACKAGES = {"babyai": "minigrid"}


def import_env_package(name: str) -> str | None:
    """Import the installed package a gymnasium id belongs to when gymnasium knows the id only after that import
    (MiniGrid-Empty-5x5-v0: minigrid, popgym-RepeatPreviousEasy-v0: popgym): the module named by the id's prefix in
    lower case. Its name where the import registered the id, else None (standard-library modules are never
    tried)."""
    if name in gym.registry:
        return None
    module = _id_package(name)
    if module is None or module in sys.stdlib_module_names or not _installed(module):
        return None
    try:
        importlib.import_module(module)
    except Exception:  # noqa: BLE001 - a broken package: the id stays unknown, and the error names the way around
        return None
    return module if name in gym.registry else None


def _id_package(name: str) -> str | None:
    m = re.match(r"^([A-Za-z][A-Za-z0-9_]*)[-/]", name)
    return _ID_PACKAGES.get(m.group(1).lower(), m.group(1).lower()) if m else None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _unknown_gym_env(name: str) -> str:
    package = _id_package(name)
    extra = "" if package and _installed(package) else _missing_extra_hint(name)  # installed: a misspelt id
    hint = extra or _did_you_mean(name, list(_ENV_REGISTRY) + list(gym.registry.keys()))
    # gymnasium knows an env package's ids once the package is imported
    package = f"; an id of an env package: --env=PACKAGE:{name} imports the package first"
    return f"unknown env {name!r}{hint or package}"


def _atari_names() -> list[str]:
    """Our atari_<game> names of ALE's v5 games (atari_space_invaders for ALE/SpaceInvaders-v5)."""
    games = [i[4:-3] for i in gym.registry if i.startswith("ALE/") and i.endswith("-v5") and "-ram" not in i]
    return ["atari_" + re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", g).lower() for g in games]


# ALE's other ids (Breakout-v5, Breakout-v4, BreakoutDeterministic-v4, Pong-ram-v0): named by the game's title
_ALE_ID = re.compile(r"^([A-Z][A-Za-z]*?)(NoFrameskip|Deterministic)?(-ram)?-v\d+$")


def _atari_near_miss(name: str) -> str | None:
    """For a name of an ALE game in another scheme than ours (Breakout-v5, Breakout-v4: ALE's ids whose frame skip
    or sticky actions differ from what our Atari pipeline applies), the names that make that game here."""
    m = _ALE_ID.match(name)
    if m is None or (name in gym.registry and not str(gym.spec(name).entry_point).startswith("ale_py")):
        return None
    if not register_ale_envs():
        return None
    game = m.group(1)
    if f"ALE/{game}-v5" not in gym.registry:
        return None
    return f"{game}NoFrameskip-v4 (CleanRL's and SB3's id: no sticky actions) or ALE/{game}-v5"


def unknown_env_message(name: str) -> str | None:
    """Why `name` is no env we can make (one line, with the closest names in the same naming scheme), None when it
    may be one. Creates no env and imports no torch: train.py checks --env with it before starting anything. Names
    whose check needs the env's own code (module:EnvId, pettingzoo.*, a missing optional package) pass here;
    make_env reports them."""
    if name in _ENV_REGISTRY or name in MUJOCO_NAMES or ":" in name or name.startswith("pettingzoo."):
        return None
    if name.startswith("mujoco_"):
        return f"unknown env {name!r}{_did_you_mean(name, list(MUJOCO_NAMES))}"
    if is_atari_name(name):
        if not register_ale_envs() or atari_env_id(name) in gym.registry:
            return None  # without ale_py, make_atari_env names the missing extra
        if name.startswith("atari_"):
            return f"unknown env {name!r}{_did_you_mean(name, _atari_names())}"
        ids = [i for i in gym.registry if i.startswith("ALE/") or ATARI_V4_ID.match(i)]
        return f"unknown env {name!r}{_did_you_mean(name, ids)}"
    if near := _atari_near_miss(name):
        return f"unknown env {name!r}; did you mean {near}?"
    if name.startswith("doom_"):
        from sample_factory.envs.doom import DOOM_ENVS

        return None if name in DOOM_ENVS else f"unknown env {name!r}{_did_you_mean(name, list(DOOM_ENVS))}"
    if is_minatar_id(name):
        return None if parse_minatar_id(name) else unknown_minatar_message(name)
    if name.startswith("Vizdoom"):
        return None  # vizdoom registers its ids when imported; make_env checks them
    import_env_package(name)
    return None if name in gym.registry else _unknown_gym_env(name)


def env_spaces(cfg: Config) -> tuple[gym.Space, gym.Space, int | None] | str:
    """(observation space, action space, episode limit) of `cfg.env` made once here, for the defaults chosen from
    its spaces: a gymnasium id, `module:EnvId` (the module imported first) or a name given to register_env (in the
    script running this); the env families (Atari, VizDoom, PettingZoo) have presets of their own. Where the env
    cannot be made here, why (make_env then says it in full)."""
    name = gym_env_name(cfg)
    if atari_env_id(name) is not None or name.startswith(("doom_", "Vizdoom", "pettingzoo.")):
        return "an env family without a preset"
    try:
        env = make_env(cfg)
    except Exception as e:  # noqa: BLE001 - a missing package, an unknown name or a broken env: reported by make_env
        return f"it could not be made here ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    try:
        limit = cfg.max_episode_steps or (env.spec.max_episode_steps if env.spec is not None else None)
        return env.observation_space, env.action_space, limit
    finally:
        env.close()


set_spaces_reader(env_spaces)  # the defaults chosen from an env's spaces apply to every env make_env makes


def episode_limit_note(cfg: Config) -> str | None:
    """A line for the log when `cfg.env` is a gymnasium id that registers no step limit and --max_episode_steps is
    not given: an agent that never reaches the end (CliffWalking-v1's goal) then plays one endless episode."""
    name = gym_env_name(cfg)
    if cfg.max_episode_steps or name in _ENV_REGISTRY or name not in gym.registry or atari_env_id(name) is not None:
        return None
    if gym.spec(name).max_episode_steps is not None:
        return None
    return f"{name} registers no step limit: an episode lasts until the env ends it (--max_episode_steps=N caps it)"


def set_step_units(cfg: Config) -> None:
    """`cfg.frames_per_env_step`, and CleanRL's --total_timesteps (agent steps) as --train_for_env_steps in that
    unit (frames on Atari and VizDoom)."""
    cfg.frames_per_env_step = frames_per_env_step(cfg)
    if cfg.total_timesteps is not None:
        cfg.train_for_env_steps = int(cfg.total_timesteps) * cfg.frames_per_env_step


def frames_per_env_step(cfg: Config) -> int:
    """What one agent step counts as (--summaries_use_frameskip): --env_frameskip frames on the envs whose frame
    skip we apply (Atari, with gymnasium or EnvPool, and VizDoom), else 1."""
    if not cfg.summaries_use_frameskip:
        return 1
    name = env_name(cfg)
    if atari_env_id(name) is not None:
        return cfg.env_frameskip
    if name.startswith(("doom_", "Vizdoom")):
        from sample_factory.envs.doom import doom_env_id

        if doom_env_id(name) is not None:
            return cfg.env_frameskip
    return 1


class EnvInfo(NamedTuple):
    """What the runner needs to know about an env before building the model and the buffers."""

    observation_space: gym.Space
    action_space: gym.Space
    num_agents: int
    reward_shaping: dict[str, float] | None = None  # the env's default coefficients, if PBT may tune them
    left_out_keys: tuple[str, ...] = ()  # Dict observation keys no encoder takes (or not in --obs_keys), with kinds


def default_reward_shaping(env: gym.Env) -> dict[str, float] | None:
    """Envs whose reward has tunable coefficients expose `get_default_reward_shaping() -> {name: value}` and
    `set_reward_shaping(coefficients, agent_idx)`; PBT then mutates the coefficients per policy."""
    try:
        getter = env.get_wrapper_attr("get_default_reward_shaping")
    except AttributeError:
        return None
    return {k: float(v) for k, v in getter().items()}


def env_backend(cfg: Config) -> str:
    """--env_backend with auto resolved: gymnasium_vector where gymnasium has a batched implementation of the env
    that we run with same-step autoreset (envs/vector_group.py: CartPole), else gymnasium."""
    if cfg.env_backend != "auto":
        return cfg.env_backend
    from sample_factory.envs.vector_group import VECTOR_ENVS

    return "gymnasium_vector" if cfg.env in VECTOR_ENVS else "gymnasium"


def _env_info(cfg: Config) -> EnvInfo:
    backend = env_backend(cfg)
    if backend == "envpool":
        from sample_factory.envs.envpool_group import envpool_spaces

        return EnvInfo(*envpool_spaces(cfg), 1)
    if backend == "gymnasium_vector":
        from sample_factory.envs.vector_group import vector_spaces

        return EnvInfo(*vector_spaces(cfg), 1)
    env = make_env(cfg)
    try:
        return EnvInfo(
            env.observation_space,
            env.action_space,
            env_num_agents(env),
            default_reward_shaping(env),
            tuple(left_out_keys(env)),
        )
    finally:
        env.close()


def _probe_target(cfg: Config, conn) -> None:
    try:
        conn.send(("ok", _env_info(cfg)))
    except Exception as e:  # sent back to the parent as one clear line
        conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
    finally:
        conn.close()


def probe_env(cfg: Config, ctx: Any = None) -> EnvInfo:
    """Create the env once to read its spaces and number of agents. A subprocess (from multiprocessing context `ctx`,
    spawn when not given) keeps env state out of the runner; a timeout turns a hanging env constructor into an
    error. `ctx=False` probes in this process (serial mode)."""
    if ctx is False:
        return _env_info(cfg)
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
        if proc.is_alive():  # hung (its constructor or close): what it started would outlive it
            started = descendants(proc.pid)
            proc.kill()
            proc.join(5)
            end_processes(started, LEFT_BEHIND_GRACE_SEC)
    if result[0] == "error":
        raise RuntimeError(f"could not create env {cfg.env!r}: {result[1]}")
    return result[1]
