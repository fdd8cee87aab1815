"""Opt-in pytest plugin: the CPU seconds each test costs, its processes' children included (train.py runs, their fork
servers and components, Ray and Slurm daemons), to find what makes the suite slow on a VM with less CPU
(benchmarks/notebook.md, "Where the CPU goes"). Wall time does not show it: a test that waits on a heartbeat timeout
is long and cheap; a learning run is short on 2 cores and 3-5x longer on one.

    SF_TEST_CPU_PROFILE=/tmp/cpu .venv/bin/python -m pytest tests -p tests.cpu_profile -n 2 --dist loadfile

Each pytest process (each xdist worker) moves itself into a cgroup-v1 `cpuacct` group of its own, which every process
it starts inherits, and reads the group's usage before and after each test. Needs root and a cgroup-v1 cpuacct
mount (/sys/fs/cgroup/cpuacct); does nothing otherwise. Rows go to <prefix>_<worker>.tsv (cpu_s, wall_s, test id);
the run's end prints the 30 costliest tests and the total."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TOP = 30
_group: Path | None = None
_rows = None


def _prefix() -> str | None:
    return os.environ.get("SF_TEST_CPU_PROFILE") or None


def _worker() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def pytest_configure(config: pytest.Config) -> None:
    global _group, _rows
    prefix = _prefix()
    if prefix is None or not os.access(CPUACCT, os.W_OK):
        return
    if _worker() == "main":  # the controller (or the only process): an earlier run's rows go
        for old in Path(prefix).parent.glob(Path(prefix).name + "_*.tsv"):
            old.unlink()
    group = CPUACCT / f"sf_test_{os.getpid()}"
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))
    _group = group
    _rows = open(f"{prefix}_{_worker()}.tsv", "w")


def pytest_unconfigure(config: pytest.Config) -> None:
    global _group
    if _group is None:
        return
    _rows.close()
    (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))  # back to the root group, so ours can be removed
    try:
        _group.rmdir()
    except OSError:  # a process of a test still runs in it; the kernel keeps the group until it exits
        pass
    _group = None


def _usage_s() -> float:
    return int((_group / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if _group is None:
        yield
        return
    cpu, wall = _usage_s(), time.monotonic()
    yield
    _rows.write(f"{_usage_s() - cpu:.2f}\t{time.monotonic() - wall:.2f}\t{item.nodeid}\n")
    _rows.flush()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    prefix = _prefix()
    if prefix is None or _worker() != "main":
        return
    rows = []
    for path in Path(prefix).parent.glob(Path(prefix).name + "_*.tsv"):
        for line in path.read_text().splitlines():
            cpu, wall, test = line.split("\t")
            rows.append((float(cpu), float(wall), test))
    if not rows:
        terminalreporter.write_line(f"cpu profile: no rows (needs root and {CPUACCT})")
        return
    rows.sort(reverse=True)
    terminalreporter.section(f"CPU seconds per test (the {TOP} costliest; children included)")
    for cpu, wall, test in rows[:TOP]:
        terminalreporter.write_line(f"{cpu:8.2f} cpu-s {wall:8.2f} s  {test}")
    total = sum(r[0] for r in rows)
    terminalreporter.write_line(f"total: {total:,.0f} cpu-s over {len(rows)} tests (rows in {prefix}_*.tsv)")
