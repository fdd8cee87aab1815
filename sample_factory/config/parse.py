"""Parsing: the argparse parser built from the option groups (options.py), its help with the preset's values, and
`parse_cfg`: the command line, the env-family preset applied to flags not typed (env_defaults.py), then the derived
values and checks of checks.py (`finalize_cfg`)."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any

from sample_factory.config.cfg import Config
from sample_factory.config.checks import finalize_cfg
from sample_factory.config.env_defaults import defaults_line, preset_for, set_spaces_reader  # noqa: F401
from sample_factory.config.extras import install_hint
from sample_factory.config.options import ENJOY_ONLY_GROUP, OPTIONS, ConfigError, Option, all_options

TRAIN_USAGE = "train.py --env=ENV [--experiment=NAME] [--option=value ...]"
TRAIN_DESCRIPTION = (
    "sample_factory: asynchronous PPO (APPO) and Ape-X DQN training. Each option shows its default; an env-family "
    "preset (config/presets.py) replaces the defaults of the options it sets unless they are typed: give --env=NAME "
    "with --help to see the preset's values. Flags may be written with dashes (--env-id) or underscores."
)


class _OneLineErrorParser(argparse.ArgumentParser):
    """Bad input gets one line naming the problem, not the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def package_version() -> str:
    """The installed distribution's version (setup.py declares it once)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sample_factory")
    except PackageNotFoundError:
        return f"unknown (not installed: {install_hint()})"


def normalize_flags(argv: Sequence[str]) -> list[str]:
    """`--env-id=X` -> `--env_id=X`: flags may be written with dashes (CleanRL's style); values are left alone."""
    out = []
    for a in argv:
        if a.startswith("--") and len(a) > 2:
            flag, sep, value = a.partition("=")
            a = "--" + flag[2:].replace("-", "_") + sep + value
        out.append(a)
    return out


def _show(value: Any) -> str:
    """A default as it would be typed on the command line."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "empty"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e7:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:g}"
    return "unset" if value is None else str(value)


def _values_text(opt: Option, preset: str | None, preset_vals: dict[str, Any], env: str | None) -> str:
    """The option's default (unless its help says it: "(default: number of CPU cores)") and the preset's value."""
    shown = [] if "(default" in opt.help else [f"default: {_show(opt.default)}"]
    if preset and opt.name in preset_vals:
        shown.append(f"{preset} preset for --env={env}: {_show(preset_vals[opt.name])}")
    return f"({'; '.join(shown)})" if shown else ""


class _ValuesOnOptionLine(argparse.HelpFormatter):
    """An option's default and preset value on the option's own line (`--help | grep rollout` shows them), its
    help wrapped below: argparse would wrap them anywhere in the help text."""

    def _format_action(self, action: argparse.Action) -> str:
        values = getattr(action, "values_text", "")
        if not values or action.help is argparse.SUPPRESS:
            return super()._format_action(action)
        help_position = min(self._action_max_length + 2, self._max_help_position)
        lines = [f"{' ' * self._current_indent}{self._format_action_invocation(action)}  {values}"]
        width = max(self._width - help_position, 11)
        lines += [" " * help_position + line for line in self._split_lines(self._expand_help(action), width)]
        return "\n".join(lines) + "\n"


def env_and_algo(argv: Sequence[str]) -> tuple[str | None, str]:
    """--env and --algo as typed (aliases and dashes included; --algo's default where absent), for --help and for
    tools that read them from passthrough flags; everything else is ignored."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for opt in all_options():
        if opt.name in ("env", "algo"):
            p.add_argument(*opt.flags, dest=opt.name, default=opt.default)
    args, _ = p.parse_known_args(normalize_flags(argv))
    return args.env, args.algo


def build_parser(
    defaults: bool = True,
    prog: str = "train.py",
    help_argv: Sequence[str] = (),
    listed: set[str] | None = None,
    usage: str | None = TRAIN_USAGE,
    description: str = TRAIN_DESCRIPTION,
) -> argparse.ArgumentParser:
    """`defaults=False` gives a parser whose unspecified options are absent: that tells which flags were typed.
    The help shows each option's default and, for the --env in `help_argv`, its preset's value; options not in
    `listed` (None: all) are accepted but left out of the help."""
    env, algo = env_and_algo(help_argv) if help_argv else (None, "APPO")
    device = next((a.split("=", 1)[1] for a in help_argv if a.startswith("--device=")), "auto")
    tuned_for = next((a.split("=", 1)[1] for a in help_argv if a.startswith("--tuned_for=")), "auto")
    preset, preset_vals, _ = preset_for(env, algo, device, tuned_for=tuned_for) if env else (None, {}, "")
    if env and not preset:
        description += f" --env={env} has no preset: the defaults apply."
    p = _OneLineErrorParser(
        prog=prog,
        usage=usage,
        description=description,
        formatter_class=_ValuesOnOptionLine,
        allow_abbrev=False,
        argument_default=None if defaults else argparse.SUPPRESS,
    )
    p.add_argument("--version", action="version", version=f"sample_factory {package_version()}")
    for group_name, options in OPTIONS.items():
        shown = [opt for opt in options if listed is None or opt.name in listed]
        g = p.add_argument_group(group_name) if shown else p
        for opt in options:
            kwargs: dict[str, Any] = {"metavar": opt.type_name.replace(" ", "_").upper()}
            if opt.choices:
                kwargs.update(choices=opt.choices, metavar="{" + ",".join(opt.choices) + "}")
            if opt.is_bool:
                kwargs.update(nargs="?", const=True)
            if defaults:
                kwargs["default"] = opt.default
            visible = listed is None or opt.name in listed
            help_text = opt.help.replace("%", "%%") if visible else argparse.SUPPRESS
            action = g.add_argument(*opt.flags, dest=opt.name, type=opt.type, help=help_text, **kwargs)
            action.values_text = _values_text(opt, preset, preset_vals, env)  # type: ignore[attr-defined]  # the help formatter reads it
    return p


def suggest_flag(argv: Sequence[str]) -> str | None:
    known = {flag for opt in all_options() for flag in opt.flags} | {"--help", "--version"}
    for a in normalize_flags(argv):
        if a.startswith("--"):
            flag = a.split("=", 1)[0]
            if flag not in known:
                close = difflib.get_close_matches(flag, sorted(known), n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                return f"unknown flag {flag}{hint}"
    return None


def typed_flags(argv: Sequence[str]) -> dict[str, Any]:
    """Only the options given on the command line (aliases resolved)."""
    return vars(build_parser(defaults=False).parse_args(normalize_flags(argv)))


def strip_flags(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """`argv` without the options `names` (any alias, as --flag=value or --flag value; a bool flag may have no
    value, then the next token starts with '-' like the next flag)."""
    wanted = {flag for opt in all_options() if opt.name in names for flag in opt.flags}
    argv = normalize_flags(argv)
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.split("=", 1)[0] in wanted:
            if "=" not in a and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                i += 1  # its value
        else:
            out.append(a)
        i += 1
    return out


def parse_cfg(argv: Sequence[str] | None = None) -> Config:
    """Parse, apply the env-family preset to flags not typed, and validate. Raises SystemExit on bad input."""
    argv = normalize_flags(sys.argv[1:] if argv is None else argv)
    parser = build_parser(help_argv=argv if ("-h" in argv or "--help" in argv) else ())
    unknown_msg = suggest_flag(argv)
    if unknown_msg:
        parser.error(unknown_msg)
    cfg = parser.parse_args(argv, namespace=Config())
    typed = typed_flags(argv)
    enjoy_only = [opt for opt in OPTIONS[ENJOY_ONLY_GROUP] if opt.name in typed]
    if enjoy_only:
        parser.error(_enjoy_only_message(enjoy_only[0]))
    cfg.preset, values, cfg.preset_reason = preset_for(cfg.env, cfg.algo, cfg.device, cfg, cfg.tuned_for)
    for k, v in values.items():
        if k not in typed:
            setattr(cfg, k, v)
    cfg.command_line = " ".join(argv)
    cfg.cli_flags = sorted(typed)
    try:
        _one_budget(cfg, typed)
        finalize_cfg(cfg)
    except ConfigError as e:
        parser.error(str(e))
    return cfg


# What train.py offers instead of an enjoy.py-only flag.
_TRAIN_EQUIVALENT = {
    "save_video": "--capture_video=True records the periodic evaluations",
    "max_num_episodes": "--eval_episodes sets the episodes of each periodic evaluation",
    "policy_index": "--eval_policies chooses the policies evaluated during training",
}


def _enjoy_only_message(opt: Option) -> str:
    instead = _TRAIN_EQUIVALENT.get(opt.name)
    return (
        f"--{opt.name} belongs to enjoy.py (python enjoy.py --env=... --experiment=... --{opt.name}=...), "
        f"train.py does not read it" + (f"; during training, {instead}" if instead else "")
    )


def _one_budget(cfg: Config, typed: dict[str, Any]) -> None:
    """CleanRL's --total_timesteps (agent steps; the runner sets --train_for_env_steps from it once the env's unit
    is known, envs/env_utils.py::set_step_units) or --train_for_env_steps: the one typed now wins on resume."""
    if "total_timesteps" in typed and "train_for_env_steps" in typed:
        raise ConfigError("--total_timesteps (agent steps) and --train_for_env_steps are the same budget: give one")
    if cfg.total_timesteps is not None and cfg.total_timesteps <= 0:
        raise ConfigError(f"--total_timesteps must be > 0, got {cfg.total_timesteps}")
    if "total_timesteps" in typed or "train_for_env_steps" in typed:  # as if both typed: no saved budget returns
        cfg.cli_flags = sorted({*cfg.cli_flags, "total_timesteps", "train_for_env_steps"})
