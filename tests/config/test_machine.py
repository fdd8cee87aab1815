"""usable_cores: the cores a run sizes its workers and learner threads by (affinity, then the cgroup's quota)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sample_factory.config.machine import cgroup_cpu_limit, usable_cores

V2_ROOT = "0::/\n"
V1_ROOT = "4:cpu,cpuacct:/\n1:name=systemd:/\n"


def _cgroup(root: Path, files: dict[str, str], proc: str = V2_ROOT) -> tuple[Path, Path]:
    """A fake /sys/fs/cgroup under `root` with `files`, and a fake /proc/self/cgroup saying `proc`."""
    (root / "mnt").mkdir(parents=True)
    for name, text in files.items():
        (root / "mnt" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "mnt" / name).write_text(text)
    (root / "proc_cgroup").write_text(proc)
    return root / "mnt", root / "proc_cgroup"


@pytest.mark.parametrize(
    ("files", "proc", "limit"),
    [
        ({"cpu.max": "max 100000\n"}, V2_ROOT, None),
        ({"cpu.max": "150000 100000\n"}, V2_ROOT, 1.5),
        ({"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, V1_ROOT, None),
        ({"cpu,cpuacct/cpu.cfs_quota_us": "300000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, V1_ROOT, 3.0),
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, V1_ROOT, 2.0),
        ({}, V2_ROOT, None),
        ({"cpu.max": "garbage"}, V2_ROOT, None),
        # systemd's slices without a cgroup namespace: the process's own folder, and the smallest quota on the way up
        (
            {"cpu.max": "max 100000", "a.slice/cpu.max": "400000 100000", "a.slice/b.scope/cpu.max": "max 100000"},
            "0::/a.slice/b.scope\n",
            4.0,
        ),
        ({"a.slice/cpu.max": "400000 100000", "a.slice/b.scope/cpu.max": "50000 100000"}, "0::/a.slice/b.scope\n", 0.5),
        # an older docker on v1: /proc names the host's path, the container sees its own cgroup at the mount
        ({"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000"}, "3:cpu,cpuacct:/docker/abc\n", 1.0),
        # a path that is not absolute: the mount's own quota, no exception
        ({"cpu.max": "200000 100000"}, "0::relative/path\n", 2.0),
    ],
)
def test_cgroup_cpu_limit(tmp_path, files, proc, limit):
    assert cgroup_cpu_limit(*_cgroup(tmp_path, files, proc)) == limit


def test_usable_cores_takes_the_smaller_of_affinity_and_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7})
    assert usable_cores(*_cgroup(tmp_path / "none", {"cpu.max": "max 100000"})) == 8
    assert usable_cores(*_cgroup(tmp_path / "v2", {"cpu.max": "250000 100000"})) == 3  # 2.5 cores: round up
    assert usable_cores(*_cgroup(tmp_path / "tiny", {"cpu.max": "10000 100000"})) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    v1 = {"cpu/cpu.cfs_quota_us": "400000", "cpu/cpu.cfs_period_us": "100000"}
    assert usable_cores(*_cgroup(tmp_path / "v1", v1, V1_ROOT)) == 1


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
