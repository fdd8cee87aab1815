"""What to run: a sweep described in Python (a module with `RUN = RunDescription(...)`) or in YAML, expanded into
one `train.py` command per experiment.

A `RunDescription` holds named `Experiment`s; each is a base command plus variations: a `ParamGrid` (every
combination of the listed values, the last parameter varying fastest) or a `ParamList` (the listed dicts as they
are). Each variation becomes one experiment whose name joins the experiment's name and its parameter values, and
whose command is the base command with `--name=value` flags appended, then `--experiment=<name>` and
`--train_dir=<train_dir>`. YAML describes the same:

    name: cartpole_sweep
    experiments:
      - name: lr
        cmd: python train.py --env=CartPole-v1 --train_for_env_steps=20000
        grid: {learning_rate: [0.001, 0.003], seed: [0, 1]}
      - name: arch
        cmd: [python, train.py, --env=CartPole-v1]   # a command as a list: one argument per item, no quoting
        variants: [{encoder_mlp_layers: [64, 64]}, {encoder_mlp_layers: [256]}]

A description that cannot be run (bad YAML, a wrong type, an unclosed quote in `cmd`, a name that cannot be a
folder name) raises `SweepError` with one line naming the file and the problem; the launcher exits 2 before
starting anything.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import re
import shlex
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sample_factory.config import experiment_name_problem
from sample_factory.config.extras import install_hint

Params = dict[str, Any]
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._+-]+")
_SAFE_NAME = re.compile(r"[A-Za-z0-9._+-]+")
_PYTHON_NAMES = ("python", "python3")
# Flags the launcher sets itself: a base command or a variation must not set them.
_LAUNCHER_FLAGS = ("experiment", "train_dir")


class SweepError(ValueError):
    """A sweep description that cannot be run; the message says what is wrong."""


class ParamGrid:
    """Every combination of the values: ParamGrid([("learning_rate", [1e-3, 3e-3]), ("seed", [0, 1])]) gives 4
    variations, in the order lr=1e-3/seed=0, lr=1e-3/seed=1, lr=3e-3/seed=0, lr=3e-3/seed=1."""

    def __init__(self, params: Sequence[tuple[str, Sequence[Any]]] | Mapping[str, Sequence[Any]]):
        items = list(params.items()) if isinstance(params, Mapping) else [tuple(p) for p in params]
        for item in items:
            if len(item) != 2 or isinstance(item[1], (str, bytes)) or not isinstance(item[1], Sequence):
                raise SweepError(f"ParamGrid entry {item!r}: expected (name, [values...])")
            if not item[1]:
                raise SweepError(f"ParamGrid parameter {item[0]!r} has no values")
        self.params: list[tuple[str, list[Any]]] = [(str(k), list(v)) for k, v in items]

    def __iter__(self) -> Iterator[Params]:
        names = [k for k, _ in self.params]
        for values in itertools.product(*(v for _, v in self.params)):
            yield dict(zip(names, values))


class ParamList:
    """The given variations as they are: ParamList([{"seed": 0}, {"seed": 1, "learning_rate": 1e-3}])."""

    def __init__(self, variations: Sequence[Mapping[str, Any]]):
        if (
            isinstance(variations, (Mapping, str, bytes))
            or not isinstance(variations, Sequence)
            or not all(isinstance(v, Mapping) for v in variations)
        ):
            raise SweepError("ParamList takes a list of {flag: value} dicts")
        self.variations: list[Params] = [dict(v) for v in variations]

    def __iter__(self) -> Iterator[Params]:
        return iter([dict(v) for v in self.variations])


@dataclass
class Experiment:
    """A base command and its variations (no variations: the base command alone, one experiment)."""

    name: str
    cmd: str | Sequence[str]  # a shell-like command line, or its arguments as a list
    params: ParamGrid | ParamList | None = None


@dataclass
class RunDescription:
    name: str
    experiments: list[Experiment] = field(default_factory=list)


@dataclass
class ExperimentCommand:
    """One experiment of the sweep, ready to run: `argv` is a full command (its python is the launcher's)."""

    name: str
    argv: list[str]
    params: Params

    @property
    def shell(self) -> str:
        return shlex.join(self.argv)


def format_value(value: Any) -> str:
    """A flag value as train.py parses it: lists as comma-separated (--encoder_mlp_layers=64,64)."""
    if isinstance(value, (list, tuple)):
        return ",".join(format_value(v) for v in value)
    return str(value)


def variation_suffix(params: Params) -> str:
    """`learning_rate0.001_seed0`: the part of an experiment's name that tells its parameter values."""
    parts = [f"{k}{format_value(v)}" for k, v in params.items()]
    return _UNSAFE_NAME_CHARS.sub("-", "_".join(parts))


def _check_name(what: str, name: str) -> None:
    if not _SAFE_NAME.fullmatch(name):
        raise SweepError(f"{what} {name!r}: use letters, digits and . _ + - only")
    why = experiment_name_problem(name)
    if why:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise SweepError(f"{what} {shown!r} {why}")


def command_argv(cmd: str | Sequence[str], name: str) -> list[str]:
    """An experiment's base command as arguments: a string is split as a shell would (quotes, no expansion)."""
    if isinstance(cmd, str):
        try:
            return shlex.split(cmd)
        except ValueError as e:  # "No closing quotation", "No escaped character"
            raise SweepError(f"experiment {name!r}: cannot split its cmd ({e}): {cmd!r}") from None
    if isinstance(cmd, (bytes, Mapping)) or not isinstance(cmd, Sequence):
        raise SweepError(f"experiment {name!r}: cmd must be a string or a list of arguments, got {type(cmd).__name__}")
    bad = [a for a in cmd if not isinstance(a, (str, int, float)) or isinstance(a, bool)]
    if bad:
        raise SweepError(f"experiment {name!r}: cmd arguments must be strings or numbers, got {bad[0]!r}")
    return [str(a) for a in cmd]


def _flag_names(argv: Sequence[str]) -> set[str]:
    return {a[2:].split("=", 1)[0] for a in argv if a.startswith("--")}


def expand(run: RunDescription, train_dir: str | Path, python: str = sys.executable) -> list[ExperimentCommand]:
    """Every experiment of the run as a command. A leading `python`/`python3` of a base command becomes `python`
    (the launcher's interpreter by default). Names must be unique: two experiments writing one folder would
    overwrite each other."""
    _check_name("run name", run.name)
    if not run.experiments:
        raise SweepError(f"run {run.name!r} has no experiments")
    out: list[ExperimentCommand] = []
    for exp in run.experiments:
        _check_name("experiment name", exp.name)
        base = command_argv(exp.cmd, exp.name)
        if not base:
            raise SweepError(f"experiment {exp.name!r} has an empty command")
        if base[0] in _PYTHON_NAMES:
            base[0] = python
        taken = _flag_names(base) & set(_LAUNCHER_FLAGS)
        if taken:
            raise SweepError(f"experiment {exp.name!r}: the launcher sets --{', --'.join(sorted(taken))} itself")
        variations = list(exp.params) if exp.params is not None else [{}]
        for params in variations:
            bad = set(params) & set(_LAUNCHER_FLAGS)
            if bad:
                raise SweepError(f"experiment {exp.name!r}: the launcher sets --{', --'.join(sorted(bad))} itself")
            suffix = variation_suffix(params)
            name = f"{exp.name}_{suffix}" if suffix else exp.name
            _check_name("experiment name", name)
            flags = [f"--{k}={format_value(v)}" for k, v in params.items()]
            argv = [*base, *flags, f"--experiment={name}", f"--train_dir={train_dir}"]
            out.append(ExperimentCommand(name, argv, dict(params)))
    seen: dict[str, int] = {}
    for c in out:
        seen[c.name] = seen.get(c.name, 0) + 1
    dup = sorted(n for n, k in seen.items() if k > 1)
    if dup:
        raise SweepError(f"experiment names repeat ({', '.join(dup)}): give the experiments distinct names")
    return out


# ---- loading -----------------------------------------------------------------------------------------------
def _from_mapping(data: Any, source: str) -> RunDescription:
    try:
        return _parse_mapping(data, source)
    except SweepError as e:
        msg = str(e)
        raise SweepError(msg if msg.startswith(f"{source}: ") else f"{source}: {msg}") from None


def _parse_mapping(data: Any, source: str) -> RunDescription:
    if not isinstance(data, Mapping) or "experiments" not in data:
        raise SweepError(f"{source}: expected a mapping with 'name' and 'experiments'")
    listed = data["experiments"] or []
    if isinstance(listed, (str, bytes, Mapping)) or not isinstance(listed, Sequence):
        raise SweepError(f"{source}: 'experiments' must be a list of experiments, got {type(listed).__name__}")
    if not isinstance(data.get("name", ""), (str, int, float)) or isinstance(data.get("name"), bool):
        raise SweepError(f"{source}: 'name' must be a string")
    experiments = []
    for i, e in enumerate(listed):
        if not isinstance(e, Mapping) or "cmd" not in e:
            raise SweepError(f"{source}: experiment #{i} needs at least 'cmd' (and 'name')")
        unknown = set(e) - {"name", "cmd", "grid", "variants"}
        if unknown:
            raise SweepError(f"{source}: experiment #{i} has unknown keys {sorted(unknown)}")
        if "grid" in e and "variants" in e:
            raise SweepError(f"{source}: experiment #{i} has both 'grid' and 'variants': choose one")
        params: ParamGrid | ParamList | None = None
        if e.get("grid") is not None:
            if not isinstance(e["grid"], Mapping):
                raise SweepError(f"{source}: experiment #{i}: 'grid' maps flag names to lists of values")
            params = ParamGrid(e["grid"])
        elif e.get("variants") is not None:
            params = ParamList(e["variants"])
        name = e.get("name", f"exp{i}")
        if not isinstance(name, (str, int, float)) or isinstance(name, bool):
            raise SweepError(f"{source}: experiment #{i}: 'name' must be a string")
        cmd = e["cmd"]
        command_argv(cmd, str(name))  # an unclosed quote or a wrong type, told now with the file's name
        experiments.append(Experiment(str(name), cmd, params))
    return RunDescription(str(data.get("name") or Path(source).stem), experiments)


def load_yaml(path: str | Path) -> RunDescription:
    try:
        import yaml
    except ImportError:
        raise SweepError(f"YAML sweeps need PyYAML (a dependency of the base install): {install_hint()}") from None
    try:
        data = yaml.safe_load(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SweepError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise SweepError(f"{path}: cannot read it: {e.strerror}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
        raise SweepError(f"{path}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    if _expanded_size(data, MAX_YAML_VALUES) > MAX_YAML_VALUES:
        raise SweepError(
            f"{path}: more than {MAX_YAML_VALUES:,} values once its aliases (*name) are expanded; a sweep needs no "
            f"aliases nested this deep"
        )
    return _from_mapping(data, str(path))


# A sweep file's values, aliases expanded: a few hundred in a large sweep. Nested aliases ("billion laughs") load
# as shared objects but expand exponentially in anything that walks them, which hung the launcher.
MAX_YAML_VALUES = 100_000


def _expanded_size(data: Any, limit: int) -> int:
    """The number of values in `data` with every alias expanded, counted up to just past `limit` (a recursive
    alias never ends otherwise)."""
    count, stack = 0, [data]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return count


def load_module(spec: str) -> RunDescription:
    """`spec` is a .py file or an importable module name; it must define RUN (a RunDescription)."""
    if spec.endswith(".py"):
        path = Path(spec)
        if not path.exists():
            raise SweepError(f"no such sweep file: {spec}")
        module_spec = importlib.util.spec_from_file_location(f"_sf_sweep_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise SweepError(f"{spec}: not a Python file Python can load")
        module = importlib.util.module_from_spec(module_spec)
        try:
            module_spec.loader.exec_module(module)
        except SweepError as e:
            raise SweepError(f"{spec}: {e}") from None
        except Exception as e:  # the user's code: one line here; `python FILE` shows the traceback
            raise SweepError(f"{spec}: {_one_line(e)} (run `python {spec}` for the traceback)") from None
    else:
        try:
            module = importlib.import_module(spec)
        except ModuleNotFoundError as e:
            raise SweepError(f"cannot import the sweep module {spec!r}: {e}") from None
        except SweepError as e:
            raise SweepError(f"{spec}: {e}") from None
        except Exception as e:
            raise SweepError(f"{spec}: {_one_line(e)} (run `python -m {spec}` for the traceback)") from None
    run = getattr(module, "RUN", None)
    if not isinstance(run, RunDescription):
        raise SweepError(f"{spec} must define RUN = RunDescription(...)")
    return run


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()  # a SyntaxError's names its file and line
    return f"{type(e).__name__}: {text[0] if text else ''}"


def load_run(spec: str) -> RunDescription:
    """--run=: a YAML file (.yaml/.yml), a Python file (.py) or a module name (a.b.sweep)."""
    if spec.endswith((".yaml", ".yml")):
        if not Path(spec).exists():
            raise SweepError(f"no such sweep file: {spec}")
        return load_yaml(spec)
    return load_module(spec)
