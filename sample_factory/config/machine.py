"""What this process may use of its machine: the cores a run sizes its workers and learner threads by."""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (docker --cpus, a Kubernetes limit, systemd CPUQuota), or
    None without one. cgroup v2 writes "quota period" to cpu.max ("max" when unlimited); v1 splits it in two files
    with -1 for unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def usable_cores(root: Path = CGROUP_ROOT) -> int:
    """Cores this process can run on: its CPU affinity (taskset, a cpuset), then capped by its cgroup's CPU quota
    rounded up. os.cpu_count() counts the whole machine, so under `taskset -c 0` on a 16-core box a run sized by it
    started 16 workers and 2 learner threads that all shared one core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)
