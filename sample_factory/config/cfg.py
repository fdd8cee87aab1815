"""The typed config: `Config` is what `parse_cfg` returns and what every component takes as `cfg`.

Its attributes are the options, typed where they are declared (it inherits every option group: config/options.py's
AllOptions), plus the derived fields declared below, which code sets rather than a flag. It is an
`argparse.Namespace`, so `vars(cfg)` is exactly what cfg.json and checkpoints store, and it pickles and copies as
before."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping, Sequence
from typing import Any

from sample_factory.config.options import AllOptions, all_options


def option_defaults() -> dict[str, Any]:
    """Every option's default (fresh copies: a default list is never shared between configs)."""
    return {opt.name: copy.deepcopy(opt.default) for opt in all_options()}


def reproducible(cfg: Config) -> bool:
    """Whether a multi-process run promises the same weights for the same command: synchronous, with a seed
    (runtime/reproducible.py). Serial mode is reproducible by running everything in one thread, in a fixed order."""
    return cfg.seed is not None and not cfg.async_rl


class Config(AllOptions, argparse.Namespace):
    """Every option is an instance attribute (argparse or `from_dict` sets each one; the option groups keep no
    class-level values, or argparse would not set their defaults on the instance). Derived fields have class-level
    defaults instead, so `vars(cfg)` (cfg.json) holds only the ones code has set."""

    preset: str | None = None
    """The env-family preset applied to the flags not typed (config/presets.py); None: the env has none."""
    preset_reason: str = ""
    """Why the run got `preset` (the env's family, its spaces) or none; logged at start."""
    command_line: str = ""
    """This run's command-line arguments, joined by spaces."""
    cli_flags: Sequence[str] = ()
    """Options typed on this command line (aliases resolved), sorted: on resume they win over cfg.json."""
    evaluation_run: bool = False
    """Set by enjoy.py: the runner evaluates a checkpoint (writes nothing, no training-only env wrappers)."""
    frames_per_env_step: int = 1
    """What one agent step counts as in env-step counters: --env_frameskip on envs with a frame skip (Atari,
    VizDoom) with --summaries_use_frameskip, else 1. Set by the runner once the env is known."""
    reward_shaping: dict[str, float] | None = None
    """A learner's reward-shaping coefficients (name -> value), set by PBT on that learner's own cfg copy."""

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Config:
        """Every option's default <- `values`: a cfg.json or checkpoint cfg of an older run gets the options added
        since. Keys the table no longer has are kept, as they were read."""
        return cls(**{**option_defaults(), **values})
