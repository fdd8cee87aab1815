"""The package tree is the architecture (docs/architecture.md, "The package tree"): these tests keep it so.

Each sub-package may import only from the packages listed for it below, so dependencies point one way: the math
(algo/, model/) knows nothing of processes, the process plumbing (runtime/) knows nothing of the roles that run on
it, and nothing used for training imports tools/. Module-level imports must not form a cycle, and no module grows
past the size a reader can hold in mind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sample_factory"
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
    "runner": {
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
    "__init__": set(),
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, module: str, top_level_only: bool) -> set[str]:
    """sample_factory modules imported by `module` (relative imports resolved); with `top_level_only`, those
    executed at import time (not inside functions or `if TYPE_CHECKING:`), which are the ones that can cycle."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if top_level_only and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if top_level_only and isinstance(child, ast.If) and _is_type_checking(child):
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


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module} has {lines} lines (> {MAX_MODULE_LINES}): split it by role"


def test_the_checker_sees_real_imports():
    """The rules above only mean something if the parser finds imports: spot-check known edges."""
    assert "sample_factory.runtime.component" in _imports(
        MODULES["sample_factory.workers.actor_worker"], "sample_factory.workers.actor_worker", True
    )
    assert "sample_factory.runner" in _imports(
        MODULES["sample_factory.evaluation.enjoy"], "sample_factory.evaluation.enjoy", True
    )


def test_tests_mirror_the_package_layout():
    """tests/<name>/ holds the tests of sample_factory/<name>/; only cross-cutting suites live elsewhere."""
    cross_cutting = {"integration", "reliability"}  # whole runs; faults injected into whole runs
    test_dirs = {p.name for p in PACKAGE.parent.joinpath("tests").iterdir() if (p / "__init__.py").exists()}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert test_dirs - cross_cutting <= packages, f"test folders with no package: {sorted(test_dirs - packages)}"
