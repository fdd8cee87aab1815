"""Command-line configuration: the options (declared once, in cfg_options.py), the presets, parsing and checks.

`parse_cfg(argv)` returns an `argparse.Namespace` with presets applied and combinations validated.
`python -m sample_factory.cfg --markdown` prints the config reference (docs/config-reference.md).
"""

from __future__ import annotations

import argparse
import difflib
import multiprocessing
import sys
from collections.abc import Sequence
from typing import Any

from sample_factory.cfg_options import _BOOL, OPTIONS, ConfigError, _num, int_list, str2bool  # noqa: F401

# Per env-family presets: used unless the flag is given on the command line; recorded in cfg.json.
# The classic-control preset is tuned for high FPS on small CPU machines: many cheap envs per worker so
# each inference request carries a large batch, and several epochs because samples are cheap.
CLASSIC_CONTROL_ENVS = ("CartPole-v0", "CartPole-v1", "Acrobot-v1", "MountainCar-v0", "LunarLander-v3")
CONTINUOUS_CONTROL_ENVS = ("Pendulum-v1", "MountainCarContinuous-v0", "LunarLanderContinuous-v3")
PRESETS: dict[str, dict[str, Any]] = {
    "classic_control": {
        "num_envs_per_worker": 64,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 2048,
        "num_batches_per_epoch": 2,
        "num_epochs": 4,
        "num_minibatches_to_accumulate": 0,  # less policy lag: CartPole is solved in fewer samples
        "use_rnn": False,
        "encoder_mlp_layers": [64, 64],
        "nonlinearity": "tanh",
        "learning_rate": 3e-3,
        "lr_schedule": "constant",
        "gamma": 0.99,
        "ppo_clip_ratio": 0.2,
        "ppo_clip_value": 0.0,
        "exploration_loss_coeff": 0.0,
        "max_grad_norm": 0.5,
        "value_loss_coeff": 0.5,
        "reward_scale": 0.1,
        "adam_eps": 1e-5,
    },
    # Small continuous-action tasks: Gaussian actions, both normalizers, short horizon.
    "continuous_control": {
        "num_envs_per_worker": 16,
        "worker_num_splits": 2,
        "rollout": 64,
        "batch_size": 2048,
        "num_batches_per_epoch": 4,
        "num_epochs": 8,
        "num_minibatches_to_accumulate": 0,
        "use_rnn": False,
        "encoder_mlp_layers": [64, 64],
        "nonlinearity": "tanh",
        "learning_rate": 1e-3,
        "gamma": 0.95,
        "normalize_input": True,
        "normalize_returns": True,
        "exploration_loss_coeff": 0.0,
        "ppo_clip_ratio": 0.2,
        "max_grad_norm": 0.5,
    },
    # Atari (atari_* and ALE/* names): uint8 frames, a conv net, no RNN; clipped rewards as in the DQN setup.
    "atari": {
        "num_envs_per_worker": 16,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 1024,
        "num_batches_per_epoch": 1,
        "num_epochs": 1,
        "use_rnn": False,
        "encoder_conv_architecture": "convnet_simple",
        "encoder_mlp_layers": [512],
        "nonlinearity": "relu",
        "learning_rate": 2.5e-4,
        "gamma": 0.99,
        "ppo_clip_ratio": 0.1,
        "ppo_clip_value": 1.0,
        "exploration_loss_coeff": 0.01,
        "max_grad_norm": 0.5,
        "reward_clip": 1.0,
        "learner_main_loop_num_cores": 2,
    },
}


def preset_name_for_env(env: str | None) -> str | None:
    if env in CLASSIC_CONTROL_ENVS:
        return "classic_control"
    if env in CONTINUOUS_CONTROL_ENVS:
        return "continuous_control"
    if env and (env.startswith("atari_") or env.startswith("ALE/")):
        return "atari"
    return None


class _OneLineErrorParser(argparse.ArgumentParser):
    """Bad input gets one line naming the problem, not the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(defaults: bool = True) -> argparse.ArgumentParser:
    """`defaults=False` gives a parser whose unspecified options are absent: that tells which flags were typed."""
    p = _OneLineErrorParser(
        prog="train.py",
        description="sample_factory: asynchronous PPO (APPO) training.",
        allow_abbrev=False,
        argument_default=None if defaults else argparse.SUPPRESS,
    )
    for group_name, options in OPTIONS.items():
        g = p.add_argument_group(group_name)
        for name, aliases, typ, default, help_text, extra in options:
            flags = [f"--{name}"] + [f"--{a}" for a in aliases]
            kwargs = dict(extra)
            if typ is _BOOL:
                kwargs.update(nargs="?", const=True)
            if defaults:
                kwargs["default"] = default
            g.add_argument(*flags, dest=name, type=typ, help=help_text, **kwargs)
    return p


def suggest_flag(argv: Sequence[str]) -> str | None:
    known = {f"--{n}" for opts in OPTIONS.values() for n, al, *_ in opts for n in (n, *al)} | {"--help"}
    for a in argv:
        if a.startswith("--"):
            flag = a.split("=", 1)[0]
            if flag not in known:
                close = difflib.get_close_matches(flag, sorted(known), n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                return f"unknown flag {flag}{hint}"
    return None


def typed_flags(argv: Sequence[str]) -> dict[str, Any]:
    """Only the options given on the command line (aliases resolved)."""
    return vars(build_parser(defaults=False).parse_args(list(argv)))


def parse_cfg(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse, apply the env-family preset to flags not typed, and validate. Raises SystemExit on bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    unknown_msg = suggest_flag(argv)
    if unknown_msg:
        parser.error(unknown_msg)
    cfg = parser.parse_args(argv)
    typed = typed_flags(argv)
    cfg.preset = preset_name_for_env(cfg.env)
    if cfg.preset:
        for k, v in PRESETS[cfg.preset].items():
            if k not in typed:
                setattr(cfg, k, v)
    cfg.command_line = " ".join(argv)
    cfg.cli_flags = sorted(typed)
    try:
        finalize_cfg(cfg)
    except ConfigError as e:
        parser.error(str(e))
    return cfg


def finalize_cfg(cfg: argparse.Namespace) -> argparse.Namespace:
    """Fill derived values and validate combinations (raises ConfigError with a one-line message)."""
    if not cfg.env:
        raise ConfigError("--env is required (e.g. --env=CartPole-v1)")
    if cfg.num_workers is None:
        cfg.num_workers = max(1, multiprocessing.cpu_count())
    positive = [
        "num_workers",
        "num_envs_per_worker",
        "worker_num_splits",
        "policy_workers_per_policy",
        "num_policies",
        "rollout",
        "batch_size",
        "num_batches_per_epoch",
        "num_epochs",
        "min_traj_buffers_per_worker",
        "rnn_size",
        "rnn_num_layers",
        "learner_main_loop_num_cores",
    ]
    for k in positive:
        if getattr(cfg, k) < 1:
            raise ConfigError(f"--{k} must be >= 1, got {getattr(cfg, k)}")
    if cfg.num_envs_per_worker % cfg.worker_num_splits != 0:
        raise ConfigError(
            f"--num_envs_per_worker={cfg.num_envs_per_worker} must be divisible by "
            f"--worker_num_splits={cfg.worker_num_splits}"
        )
    if cfg.recurrence == -1:
        cfg.recurrence = cfg.rollout if cfg.use_rnn else 1
    if cfg.recurrence < 1 or cfg.rollout % cfg.recurrence != 0:
        raise ConfigError(f"--recurrence={cfg.recurrence} must divide --rollout={cfg.rollout}")
    if cfg.batch_size % cfg.rollout != 0:
        raise ConfigError(f"--batch_size={cfg.batch_size} must be a multiple of --rollout={cfg.rollout}")
    if not 0.0 <= cfg.gamma <= 1.0:
        raise ConfigError(f"--gamma must be in [0, 1], got {cfg.gamma}")
    if cfg.learning_rate <= 0:
        raise ConfigError(f"--learning_rate must be > 0, got {cfg.learning_rate}")
    if cfg.train_for_env_steps <= 0 or cfg.train_for_seconds <= 0:
        raise ConfigError("--train_for_env_steps and --train_for_seconds must be > 0")
    cfg.train_for_env_steps = int(cfg.train_for_env_steps)
    if cfg.env_backend == "envpool" and cfg.serial_mode:
        raise ConfigError("--env_backend=envpool does not run in --serial_mode (EnvPool batches cannot be snapshotted)")
    if cfg.num_policies > 1 and not cfg.async_rl:
        raise ConfigError("--num_policies > 1 needs --async_rl=True (policies share the actor workers' slots)")
    if not cfg.async_rl:
        envs_per_split = cfg.num_envs_per_worker // cfg.worker_num_splits
        round_samples = cfg.num_workers * cfg.worker_num_splits * envs_per_split * cfg.rollout
        it = cfg.batch_size * cfg.num_batches_per_epoch
        if it % round_samples != 0:
            raise ConfigError(
                f"--async_rl=False needs batch_size*num_batches_per_epoch ({it}) to be a multiple of "
                f"num_workers*num_envs_per_worker*rollout ({round_samples}) so every batch is on-policy"
            )
    if cfg.num_minibatches_to_accumulate < 0:
        cfg.num_minibatches_to_accumulate = cfg.num_batches_per_epoch if cfg.async_rl else 0
    return cfg


def markdown_reference() -> str:
    lines = [
        "# Config reference",
        "",
        "Generated from `sample_factory/cfg_options.py` by `make docs` (`python -m sample_factory.cfg --markdown`).",
        "Flags written `--a / --b` are aliases. Booleans take `True`/`False` (a bare `--flag` means True).",
        "",
    ]
    for group_name, options in OPTIONS.items():
        lines += [f"## {group_name}", "", "| flag | type | default | description |", "|---|---|---|---|"]
        for name, aliases, typ, default, help_text, extra in options:
            flags = " / ".join(f"`--{n}`" for n in (name, *aliases))
            tname = {_BOOL: "bool", int_list: "int list", _num: "number"}.get(typ, getattr(typ, "__name__", str(typ)))
            if "choices" in extra:
                tname += " (" + ", ".join(extra["choices"]) + ")"
            lines.append(f"| {flags} | {tname} | `{default}` | {help_text} |")
        lines.append("")
    lines += ["## Presets", "", "Applied by env family to flags not given on the command line; see `cfg.json`.", ""]
    for preset, values in PRESETS.items():
        envs = {
            "classic_control": ", ".join(CLASSIC_CONTROL_ENVS),
            "continuous_control": ", ".join(CONTINUOUS_CONTROL_ENVS),
        }
        envs = envs.get(preset, "atari_*, ALE/*")
        lines += [f"### {preset} ({envs})", "", "| flag | value |", "|---|---|"]
        lines += [f"| `--{k}` | `{v}` |" for k, v in values.items()]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        print(markdown_reference())
    else:
        print(vars(parse_cfg()))
