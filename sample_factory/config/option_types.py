"""The types of the option table (config/options.py): the `Option` record, the value parsers (str2bool, int_list,
str_list, numbers written as floats) and ConfigError."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """An invalid flag value or combination; the message is shown to the user as one line."""


def str2bool(v: str | bool) -> bool:
    if isinstance(v, bool):
        return v
    s = v.strip().lower()
    if s in ("true", "1", "yes", "y", "t", "on"):
        return True
    if s in ("false", "0", "no", "n", "f", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False), got {v!r}")


def int_list(v: str | Sequence[int]) -> list[int]:
    if not isinstance(v, str):
        return [int(x) for x in v]
    s = v.strip().strip("[]()")
    if not s:
        return []
    try:
        return [int(x) for x in s.replace(",", " ").split()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a list of ints like 64,64, got {v!r}") from e


def str_list(v: str | Sequence[str]) -> list[str]:
    """Comma-separated names (spaces ignored): "success, kills" -> ["success", "kills"]."""
    if not isinstance(v, str):
        return [str(x) for x in v]
    return [x.strip() for x in v.strip().strip("[]()").split(",") if x.strip()]


def _num(v: str) -> float:
    """Ints written as floats (1e6) are accepted for step counts."""
    return float(v)


# Parse function -> (its name in the reference's type column, the Python type of the values it returns).
# Sample Factory 2's encoder names -> ours (the same networks)
CONV_ARCHITECTURE_ALIASES = {"convnet_impala": "resnet_impala", "convnet_atari": "convnet_nature"}


def conv_architecture(v: str) -> str:
    """--encoder_conv_architecture: ours, or Sample Factory 2's name for the same network."""
    return CONV_ARCHITECTURE_ALIASES.get(v, v)


_VALUE_TYPES: dict[Callable[[str], Any], tuple[str, str]] = {
    str: ("str", "str"),
    int: ("int", "int"),
    float: ("float", "float"),
    str2bool: ("bool", "bool"),
    int_list: ("int list", "list[int]"),
    str_list: ("str list", "list[str]"),
    _num: ("number", "float"),
    conv_architecture: ("str", "str"),
}


@dataclass(frozen=True)
class Option:
    """One flag `--name` (and `--alias` for each alias, same destination). `type` parses the typed text (argparse's
    `type=`); `default` applies when the flag is not typed and no preset sets it."""

    name: str
    type: Callable[[str], Any]
    default: Any
    help: str
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(f"--{n}" for n in (self.name, *self.aliases))

    @property
    def is_bool(self) -> bool:
        return self.type is str2bool

    @property
    def type_name(self) -> str:
        """As the reference shows it: bool, int list, number (a float that may be written 1e6), str, int, float."""
        return _VALUE_TYPES[self.type][0]

    @property
    def annotation(self) -> str:
        """The type of the parsed value, as config/fields.py declares it (`| None` when the default is None)."""
        value_type = _VALUE_TYPES[self.type][1]
        return f"{value_type} | None" if self.default is None else value_type
