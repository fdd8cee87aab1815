"""usable_cores: the cores a run sizes its workers and learner threads by (affinity, then the cgroup's quota)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sample_factory.config.machine import cgroup_cpu_limit, usable_cores


def _cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3.0),
        ({}, None),
        ({"cpu.max": "garbage"}, None),
    ],
)
def test_cgroup_cpu_limit(tmp_path, files, limit):
    assert cgroup_cpu_limit(_cgroup(tmp_path, files)) == limit


def test_usable_cores_takes_the_smaller_of_affinity_and_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})
    assert usable_cores(_cgroup(tmp_path / "none", {"cpu.max": "max 100000"})) == 8
    assert usable_cores(_cgroup(tmp_path / "v2", {"cpu.max": "250000 100000"})) == 3  # 2.5 cores: round up
    assert usable_cores(_cgroup(tmp_path / "tiny", {"cpu.max": "10000 100000"})) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert (
        usable_cores(_cgroup(tmp_path / "v1", {"cpu/cpu.cfs_quota_us": "400000", "cpu/cpu.cfs_period_us": "100000"}))
        == 1
    )


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_a_run_pinned_to_one_core_sizes_itself_by_that_core():
    """Under `taskset -c 0` the presets' learner threads and the default --num_workers follow the one usable core,
    not the machine's core count (it was multiprocessing.cpu_count(): 2 learner threads on one core on a 4+ core
    box)."""
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
        "from sample_factory.config.parse import parse_cfg;"
        "c = parse_cfg(['--env=atari_pong']);"
        "print(c.num_workers, c.learner_main_loop_num_cores)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split()[-2:] == ["1", "1"]
