"""The package tree is the architecture (docs/architecture.md, "The package tree"): these tests keep it so.

Each sub-package may import only from the packages listed for it below, so dependencies point one way: the math
(algo/, model/) knows nothing of processes, the process plumbing (runtime/) knows nothing of the roles that run on
it, and nothing used for training imports tools/. Module-level imports (those under `if TYPE_CHECKING:` too: a
type-only cycle is still two modules that cannot be read apart) must not form a cycle. A module past the size a
reader can hold in mind gets a warning: split it by concept, not by line count. The package holds the product only:
the benchmarks live in benchmarks/, outside it, and setup.py installs sample_factory alone."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "sample_factory"
MAX_MODULE_LINES = 600

# package (first component under sample_factory/, or a top-level module) -> what it may import besides itself
ALLOWED: dict[str, set[str]] = {
    "config": set(),
    "envs": {"config"},
    "algo": {"config", "envs", "model"},
    "model": {"config", "envs", "algo"},
    "runtime": {"config", "envs", "algo"},  # buffer layout follows the env spaces and the action distributions
    "experiment": {"config"},
    # the ray backend runs members as launcher jobs and reads the env's reward-shaping coefficients
    "pbt": {"config", "runtime", "experiment", "launcher", "envs"},
    "workers": {"config", "runtime", "algo", "model", "envs", "experiment", "pbt"},
    "evaluation": {"config", "runtime", "algo", "model", "envs", "experiment", "workers", "runner"},
    "runner": {"config", "runtime", "experiment", "workers", "run_setup"},
    # what the runner is built of (run_setup.py): every part of a run, made before any starts
    "run_setup": {
        "config",
        "runtime",
        "algo",
        "model",
        "envs",
        "experiment",
        "pbt",
        "workers",
        "evaluation",
        "distributed",
    },
    # remote samplers on Ray: the same workers and runtime on other nodes; the runner imports it only with Ray (and
    # starts a local Ray as the launcher does, launcher/ray_init.py)
    "distributed": {"config", "runtime", "algo", "model", "envs", "experiment", "workers", "launcher"},
    # the launcher starts the fork server (runtime/fork_server.py): forked once the runner is imported
    "train": {"config", "runtime", "runner", "pbt", "envs", "experiment"},  # envs, experiment: checks before start
    # runs train.py as a subprocess command: it needs none of the training code, only the folder conventions
    "launcher": {"config", "experiment"},
    "tools": {
        *("config", "runtime", "algo", "model", "envs", "experiment", "pbt", "workers", "evaluation", "runner"),
        "launcher",
        "distributed",
    },
    # the user API, imported lazily (sample_factory/__init__.py): named under TYPE_CHECKING for type checkers
    "__init__": {"config", "envs", "evaluation", "experiment", "model", "train"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, module: str, top_level_only: bool) -> set[str]:
    """sample_factory modules imported by `module` (relative imports resolved); with `top_level_only`, those at
    module level (not inside functions), which are the ones that can cycle. `if TYPE_CHECKING:` imports count: a
    cycle through annotations still ties the two modules together."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg = module.split(".")
                    pkg = pkg[: len(pkg) - child.level + (1 if path.name == "__init__.py" else 0)]
                    base = ".".join(pkg + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{a.name}" for a in child.names)  # `from pkg import module`
            visit(child)

    visit(tree)
    return {m for m in found if m == "sample_factory" or m.startswith("sample_factory.")}


def _group(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


MODULES = _modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_follow_the_layering(module):
    own = _group(module)
    assert own in ALLOWED, f"{module}: new top-level package/module {own!r}: add it to ALLOWED with its rule"
    bad = sorted(
        m
        for m in _imports(MODULES[module], module, top_level_only=False)
        if m in MODULES and _group(m) not in ALLOWED[own] | {own}
    )
    assert not bad, f"{module} ({own}/) may import only {sorted(ALLOWED[own])}, but imports {bad}"


def test_no_import_cycles():
    graph = {m: {i for i in _imports(p, m, top_level_only=True) if i in MODULES and i != m} for m, p in MODULES.items()}
    # importing `a.b.c` first imports the package `a.b`: its __init__ is an edge too, unless the importer lives in
    # that package (then the package is already being imported, which Python allows)
    for m, deps in graph.items():
        for d in list(deps):
            parts = d.split(".")
            for k in range(2, len(parts)):
                parent = ".".join(parts[:k])
                if parent in MODULES and not (m == parent or m.startswith(parent + ".")):
                    deps.add(parent)
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def dfs(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = path[path.index(d) :] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                dfs(d)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m)


def test_module_size():
    """Long modules are reported, not failed: a split by line count scatters one concept over files."""
    for module, path in MODULES.items():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            warnings.warn(
                f"{module} has {lines} lines (> {MAX_MODULE_LINES}): is it more than one concept?", stacklevel=1
            )


def test_type_checking_imports_are_edges(tmp_path):
    """The cycle check sees imports under `if TYPE_CHECKING:` (one hid learner.py <-> learner_group.py)."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nimport typing\n"
        "if TYPE_CHECKING:\n    from sample_factory.workers.learner import Learner\n"
        "if typing.TYPE_CHECKING:\n    from . import roles\n"
    )
    found = _imports(source, "sample_factory.workers.m", top_level_only=True)
    assert {"sample_factory.workers.learner", "sample_factory.workers.roles"} <= found


def test_the_checker_sees_real_imports():
    """The rules above only mean something if the parser finds imports: spot-check known edges."""
    assert "sample_factory.runtime.component" in _imports(
        MODULES["sample_factory.workers.actor_worker"], "sample_factory.workers.actor_worker", True
    )
    assert "sample_factory.runner" in _imports(
        MODULES["sample_factory.evaluation.enjoy"], "sample_factory.evaluation.enjoy", True
    )


def test_tests_mirror_the_package_layout():
    """tests/<name>/ holds the tests of sample_factory/<name>/ (tests/benchmarks/: of the top-level benchmarks/); only
    cross-cutting suites live elsewhere."""
    cross_cutting = {"integration", "reliability"}  # whole runs; faults injected into whole runs
    test_dirs = {p.name for p in PACKAGE.parent.joinpath("tests").iterdir() if (p / "__init__.py").exists()}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} | {BENCHMARKS.name}
    assert test_dirs - cross_cutting <= packages, f"test folders with no package: {sorted(test_dirs - packages)}"


BENCHMARKS = REPO / "benchmarks"


def test_the_package_holds_no_benchmarks():
    """Benchmarks, side-by-sides, soak and GPU scripts live in benchmarks/ (not installed): none in the package, and
    nothing in the package imports them."""
    lab = {p.stem for p in BENCHMARKS.glob("*.py")} - {"__init__"}
    assert {"benchmark", "soak", "time_to_score"} <= lab  # the check below means something
    named = sorted(m for m in MODULES if m.rsplit(".", 1)[-1] in lab or "benchmark" in m.rsplit(".", 1)[-1])
    assert not named, f"benchmark modules in the package (move them to benchmarks/): {named}"
    scripts = sorted(str(p.relative_to(REPO)) for p in (PACKAGE / "tools").glob("*.sh"))
    assert not scripts, f"lab scripts in the package: {scripts}"
    importers = sorted(
        m for m, p in MODULES.items() if any(i == "benchmarks" or i.startswith("benchmarks.") for i in _all_imports(p))
    )
    assert not importers, f"package modules that import benchmarks/: {importers}"


def _all_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module or "")
    return found


def _setup_call() -> ast.Call:
    tree = ast.parse((REPO / "setup.py").read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")


def test_setup_installs_only_the_package():
    from setuptools import find_packages

    call = next(k.value for k in _setup_call().keywords if k.arg == "packages")
    assert isinstance(call, ast.Call) and getattr(call.func, "id", "") == "find_packages"
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    packages = find_packages(where=str(REPO), **kwargs)
    assert "sample_factory" in packages and "sample_factory.tools" in packages
    outside = sorted(p for p in packages if p.split(".")[0] != "sample_factory")
    assert not outside, f"setup.py would install {outside}"


def test_console_commands_point_at_mains():
    """Every console command of setup.py names a function that exists (sf-plot, sf-tune, ...)."""
    import importlib

    entry_points = next(k.value for k in _setup_call().keywords if k.arg == "entry_points")
    commands = ast.literal_eval(entry_points)["console_scripts"]
    names = {c.split("=")[0] for c in commands}
    assert {"sf-train", "sf-plot", "sf-tune"} <= names
    for command in commands:
        name, target = command.split("=")
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func, None)), f"{name}: {target} is not a function"
