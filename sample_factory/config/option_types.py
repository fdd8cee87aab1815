"""How options are declared: typed groups (`OptionGroup` subclasses whose annotated attributes are `opt(default,
help)`), the `Option` record each attribute becomes, the value parsers (str2bool, int_list, str_list, numbers written
as floats) and ConfigError."""

from __future__ import annotations

import argparse
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar


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


# Sample Factory 2's encoder names -> ours (the same networks)
CONV_ARCHITECTURE_ALIASES = {"convnet_impala": "resnet_impala", "convnet_atari": "convnet_nature"}


def conv_architecture(v: str) -> str:
    """--encoder_conv_architecture: ours, or Sample Factory 2's name for the same network."""
    return CONV_ARCHITECTURE_ALIASES.get(v, v)


# An option's annotation names the type of its value; `Annotated` adds the parser where the plain type's is not the
# one: a count that may be typed 1e6, an encoder name that accepts Sample Factory 2's.
Number = Annotated[float, _num]
ConvArchitecture = Annotated[str, conv_architecture]

# The parser of each plain value type (argparse's `type=`)
_PARSERS: dict[Any, Callable[[str], Any]] = {
    str: str,
    int: int,
    float: float,
    bool: str2bool,
    list[int]: int_list,
    list[str]: str_list,
}
# parser -> its name in the reference's type column
_TYPE_NAMES: dict[Callable[[str], Any], str] = {
    str: "str",
    int: "int",
    float: "float",
    str2bool: "bool",
    int_list: "int list",
    str_list: "str list",
    _num: "number",
    conv_architecture: "str",
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
        return _TYPE_NAMES[self.type]


@dataclass(frozen=True)
class _Declared:
    """What `opt` returns in a group's class body; the group turns it into an `Option` named after the attribute."""

    default: Any
    help: str
    aliases: tuple[str, ...]
    choices: tuple[str, ...] | None


def opt(default: Any, help: str, *, aliases: tuple[str, ...] = (), choices: tuple[str, ...] | None = None) -> Any:
    """One option in an `OptionGroup`: `name: type = opt(default, help)`. The attribute's name is the flag, its
    annotation the type of the value (`| None` exactly when the default is None). Typed `Any` so that the annotation,
    not this call, is the attribute's type for mypy."""
    return _Declared(default, help, tuple(aliases), tuple(choices) if choices is not None else None)


def _parser(hint: Any, name: str, default: Any) -> Callable[[str], Any]:
    """The parser an annotation calls for: `Annotated[T, parser]`'s, else the plain type's."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
    optional = type(None) in args
    if optional:
        (hint,) = (a for a in args if a is not type(None))
    if optional != (default is None):
        raise TypeError(f"option {name}: `| None` in its annotation exactly when its default is None")
    if typing.get_origin(hint) is Annotated:
        return typing.get_args(hint)[1]
    if hint not in _PARSERS:
        raise TypeError(f"option {name}: no parser for {hint!r} (one of {', '.join(map(str, _PARSERS))}, or Annotated)")
    return _PARSERS[hint]


class OptionGroup:
    """A group of options, as the reference and --help show it: subclass with `title=`, one annotated attribute per
    option. At class creation each `opt(...)` becomes an `Option` in `group_options` and the class attribute is
    removed: argparse sets a default on the namespace only where the attribute is missing, so `Config`, which
    inherits every group, must have no class-level option values."""

    group_title: ClassVar[str]
    group_options: ClassVar[tuple[Option, ...]] = ()

    def __init_subclass__(cls, title: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = {name: d for name, d in vars(cls).items() if isinstance(d, _Declared)}
        if not declared:
            return
        if title is None:
            raise TypeError(f"{cls.__name__} declares options: give it a title= (its section in the reference)")
        hints = inspect.get_annotations(cls, eval_str=True)
        options = []
        for name, d in declared.items():
            if name not in hints:
                raise TypeError(f"option {name} has no annotation: declare it as `{name}: type = opt(...)`")
            options.append(Option(name, _parser(hints[name], name, d.default), d.default, d.help, d.aliases, d.choices))
            delattr(cls, name)
        cls.group_title = title
        cls.group_options = tuple(options)
