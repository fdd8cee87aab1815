"""User hooks into a run (`--callbacks`): subclass `Callbacks`, override the hooks you need, and either register the
class under a name (`register_callbacks("name", MyCallbacks)` at import time of your script or module, then
`--callbacks=name`) or name it as `--callbacks=module:Class` (the module is imported in every process).

Every process that has an event builds its own instance (no arguments) and calls the hook there:

  hook                      process          called
  on_experiment_start       runner           once the components are started
  on_episode_end            actor worker     for every finished episode (every agent in multi-agent envs)
  on_training_result        learner          after every training iteration, with the stats dict that goes to
                                             TensorBoard (train/<key>); keys the hook adds go there too
  on_checkpoint             learner          after a checkpoint file was written (latest, best or milestone)
  on_pbt_decision           runner           after each PBT replacement or mutation was sent to a learner
  on_worker_restarted       runner           when an actor or policy worker is restarted after a crash or hang
  on_experiment_end         runner           once, after everything stopped and the final summary was printed

Hooks run inline, on the process's hot path: they must return quickly (no blocking I/O on every episode, no
sleeping, no waiting on other processes) and keep no large state (one instance per worker process, never shared;
state does not survive a worker restart). A hook that raises stops the run cleanly with exit code 1 and one error
line naming the hook.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, NamedTuple

from sample_factory.config import Config, ConfigError


class EpisodeEnd(NamedTuple):
    """A finished episode, as `on_episode_end` sees it."""

    worker: int  # actor worker index
    env_index: int  # global env index (worker * num_envs_per_worker + position; the seed offset)
    agent: int  # agent within the env (0 for single-agent envs)
    policy_id: int  # the policy that played the episode
    episode_return: float  # undiscounted, unscaled sum of rewards
    length: int  # env steps (agent steps; frames = steps * frameskip on Atari/VizDoom)
    info: dict  # the info of the episode's last step ({} for EnvPool envs without info fields)


class Callbacks:
    """Base class: every hook does nothing. Override the ones you need; see the module docstring for where each
    runs."""

    def on_experiment_start(self, cfg: Config, exp_dir: Path) -> None:
        """The runner started every component (the experiment folder and cfg.json exist)."""

    def on_episode_end(self, episode: EpisodeEnd) -> dict[str, float] | None:
        """Return a dict of numbers to have them averaged per policy like --episode_info_keys (policy_stats/<key>
        in TensorBoard, progress.csv, the final summary), or None."""
        return None

    def on_training_result(self, policy_id: int, result: dict[str, Any]) -> None:
        """`result`: the learner's stats of one iteration (loss, entropy, lr, env_steps, version, ...); numbers
        added to it are logged as train/<key>."""

    def on_checkpoint(self, policy_id: int, path: str, kind: str) -> None:
        """A checkpoint was written: kind is latest, best or milestone."""

    def on_pbt_decision(self, decision: dict[str, Any]) -> None:
        """decision: target (policy), kind (replacement or mutation), source (policy whose weights it takes, or None),
        changes ({hyperparameter: {old, new}}), hyperparams (the target's new values), env_steps."""

    def on_worker_restarted(self, role: str, index: Any, reason: str, restarts: int) -> None:
        """An actor ("actor", worker index) or policy worker ("policy", (policy, i)) died or hung (`reason`) and is
        being restarted for the `restarts`-th time."""

    def on_experiment_end(self, cfg: Config, exp_dir: Path, result: dict[str, Any]) -> None:
        """result: stop_reason, exit_code, and per policy (lists indexed by policy): env_steps, reward_mean,
        episodes, checkpoint (the latest file written, or None), episode_stats ({key: mean})."""


class EpisodeStatsError(ValueError):
    """An episode statistic is not a number: the run stops (a restarted worker would fail again)."""

    user_facing = True
    fatal = True


def _number(key: str, value: Any, where: str) -> float:
    try:
        return float(value)  # bool, int, float, numpy scalars and 0-d arrays
    except (TypeError, ValueError):
        raise EpisodeStatsError(f"episode statistic {key!r} from {where} is not a number: {value!r}") from None


def episode_stats(info: dict, keys: list[str]) -> dict[str, float]:
    """The numbers to average from an episode's final info: the `keys` present in it (--episode_info_keys) and
    everything in info["episode_extra_stats"] (Sample Factory's convention)."""
    stats = {k: _number(k, info[k], "the env's info") for k in keys if k in info}
    extra = info.get("episode_extra_stats")
    if extra:
        stats.update({k: _number(k, v, "info['episode_extra_stats']") for k, v in extra.items()})
    return stats


def hook_stats(stats: dict | None, hook: str) -> dict[str, float]:
    """What on_episode_end returned, checked."""
    if stats is None:
        return {}
    if not isinstance(stats, dict):
        raise CallbackError(f"callback {hook} returned {type(stats).__name__}, expected a dict of numbers or None")
    return {k: _number(k, v, hook) for k, v in stats.items()}


class CallbackError(RuntimeError):
    """A user hook raised: the run stops (no worker restart) with this one-line message."""

    user_facing = True  # the message says it all: no traceback unless SF_DEBUG is set
    fatal = True  # a restarted worker would raise again


_REGISTRY: dict[str, type[Callbacks]] = {}


def register_callbacks(name: str, cls: type[Callbacks]) -> None:
    """Make `--callbacks=name` build `cls()`. Register at import time of the module that runs training, so worker
    processes (which import it again) know the name too."""
    _REGISTRY[name] = cls


def callbacks_class(spec: str) -> type[Callbacks]:
    """The class named by `--callbacks`: a registered name or module:Class. Raises ConfigError."""
    if spec in _REGISTRY:
        return _REGISTRY[spec]
    if ":" not in spec:
        known = ", ".join(sorted(_REGISTRY)) or "none registered"
        raise ConfigError(f"--callbacks={spec}: not a registered name ({known}) nor module:Class")
    module_name, _, attr = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"--callbacks={spec}: cannot import it ({type(e).__name__}: {e})") from e
    if not (isinstance(cls, type) and issubclass(cls, Callbacks)):
        raise ConfigError(f"--callbacks={spec}: {cls!r} is not a subclass of sample_factory Callbacks")
    return cls


def make_callbacks(cfg: Config) -> Callbacks | None:
    """This process's instance, or None without --callbacks and in evaluation runs (enjoy.py calls no hook)."""
    if not cfg.callbacks or cfg.evaluation_run:
        return None
    cls = callbacks_class(cfg.callbacks)
    try:
        return cls()
    except Exception as e:
        raise CallbackError(f"callback {cls.__name__}() raised {type(e).__name__}: {e}") from e


def overrides(callbacks: Callbacks | None, hook: str) -> bool:
    """The instance overrides `hook` (hot paths skip the base class's no-ops)."""
    return callbacks is not None and getattr(type(callbacks), hook) is not getattr(Callbacks, hook)


def call_hook(callbacks: Callbacks | None, hook: str, *args: Any) -> Any:
    """callbacks.hook(*args); an exception becomes a CallbackError naming the hook."""
    if callbacks is None:
        return None
    try:
        return getattr(callbacks, hook)(*args)
    except Exception as e:
        raise CallbackError(f"callback {type(callbacks).__name__}.{hook} raised {type(e).__name__}: {e}") from e
