"""Every command-line option, declared once in a typed group: `name: type = opt(default, help)` in an
`OptionGroup` subclass (config/option_types.py). The groups, by concept, are in options_<concept>.py; `AllOptions`
merges them, and `Config` (cfg.py) inherits it, so each option's annotation is its attribute's type. OPTIONS
(title -> options, in this order) is what the parser, the checks and the reference (docs/config-reference.md) read."""

from __future__ import annotations

from sample_factory.config.option_types import ConfigError, Option, OptionGroup, int_list, opt, str2bool  # noqa: F401
from sample_factory.config.options_devices import DeviceOptions
from sample_factory.config.options_eval import EnjoyOptions, EvalOptions
from sample_factory.config.options_learner import LearnerOptions, SpeedOptions
from sample_factory.config.options_model import ModelOptions
from sample_factory.config.options_pbt import PbtOptions
from sample_factory.config.options_remote import RemoteOptions
from sample_factory.config.options_replay import ReplayOptions
from sample_factory.config.options_run import FaultOptions, LoggingOptions, RunOptions
from sample_factory.config.options_sampling import EnvOptions, SamplingOptions


class BasicOptions(OptionGroup, title="Basic"):
    """What to train, where its files go, and the run's mode."""

    env: str | None = opt(
        None,
        "Environment: a gymnasium id (CartPole-v1), a custom env registered with register_env, or module:EnvId "
        "(the module is imported first, in every process).",
        aliases=("env_id",),
    )

    experiment: str | None = opt(
        None,
        "Experiment name; its folder is <train_dir>/<experiment>. A plain folder name: not '.' or '..', no '/', "
        "at most 200 bytes. Not given: <env>__<algo>__<seed> (CleanRL's run name without its start time, so the "
        "same command resumes the run).",
        aliases=("exp_name",),
    )

    train_dir: str = opt("./train_dir", "Root folder for experiments.")

    device: str = opt(
        "auto",
        "Where policy workers and learners run: auto (GPU when available), gpu, or cpu.",
        choices=("auto", "gpu", "cpu"),
    )

    tuned_for: str = opt(
        "auto",
        "Which of the preset's setups applies: gpu (the GPU setup: larger batches, more epochs), cpu (the CPU "
        "one), or auto (gpu where training runs on a GPU). --device=cpu --tuned_for=gpu trains what a GPU user "
        "gets, on the CPU: same samples per update, same frames to a score (up to policy lag), slower.",
        choices=("auto", "gpu", "cpu"),
    )

    seed: int | None = opt(
        None,
        "Random seed. With --async_rl=False or --serial_mode=True a fixed seed makes the run reproducible "
        "(same weights for the same command, on the CPU; docs/algorithms.md).",
    )

    serial_mode: bool = opt(False, "Run actor, policy and learner components in one process (debugging).")

    async_rl: bool = opt(
        True,
        "Asynchronous collection (APPO). False: collect one batch with the current policy, train, repeat "
        "(with --seed: reproducible, see docs/algorithms.md).",
    )

    restart_behavior: str = opt(
        "resume",
        "What to do when the experiment folder already exists: resume it, restart (archive the old one), "
        "or overwrite (delete it).",
        choices=("resume", "restart", "overwrite"),
    )


class AllOptions(
    BasicOptions,
    SamplingOptions,
    EnvOptions,
    LearnerOptions,
    SpeedOptions,
    ReplayOptions,
    ModelOptions,
    RunOptions,
    LoggingOptions,
    FaultOptions,
    EvalOptions,
    EnjoyOptions,
    DeviceOptions,
    RemoteOptions,
    PbtOptions,
):
    """Every group, merged: the option attributes of `Config`. The order of the bases is the reference's."""


GROUPS: tuple[type[OptionGroup], ...] = AllOptions.__bases__
# Groups make the reference readable.
OPTIONS: dict[str, list[Option]] = {group.group_title: list(group.group_options) for group in GROUPS}

# Groups of options only enjoy.py reads: train.py refuses them, with a line saying where they belong.
ENJOY_ONLY_GROUP = EnjoyOptions.group_title
EVAL_GROUPS = (EvalOptions.group_title, ENJOY_ONLY_GROUP)


def all_options() -> list[Option]:
    return [option for options in OPTIONS.values() for option in options]
