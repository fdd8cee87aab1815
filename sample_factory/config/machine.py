"""What this process may use of its machine: the cores a run sizes its workers and learner threads by."""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_cgroup(proc_cgroup: Path, controller: str) -> Path:
    """This process's cgroup path for `controller` ("" for v2's unified line "0::/path"), relative to its mount;
    "/" when /proc says nothing (a container's cgroup namespace shows its own cgroup as "/")."""
    try:
        for line in proc_cgroup.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == controller or controller in controllers.split(","):
                return Path(path or "/")
    except (OSError, ValueError):
        pass
    return Path("/")


def _quota(folder: Path) -> float | None:
    """The quota of one cgroup folder in cores, None when unlimited or unreadable."""
    try:  # v2: "quota period", quota "max" when unlimited
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:  # v1: two files, -1 when unlimited
        quota_us, period_us = (int((folder / f).read_text()) for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
        return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPU quota of this process's cgroup in cores (docker --cpus, a Kubernetes limit, systemd CPUQuota), or
    None without one: the smallest quota along the path from its own cgroup up to the root (a parent's limit binds
    its children), under cgroup v2's single tree or v1's cpu controller (mounted as cpu/ or cpu,cpuacct/)."""
    limits = []
    for mount, controller in ((root, ""), (root / "cpu", "cpu"), (root / "cpu,cpuacct", "cpu")):
        if not mount.is_dir():
            continue
        try:
            folder = mount / _own_cgroup(proc_cgroup, controller).relative_to("/")
        except ValueError:  # not an absolute path: no kernel writes one, but parsing a config must not fail here
            folder = mount
        while True:
            if (limit := _quota(folder)) is not None:
                limits.append(limit)
            if folder == mount or mount not in folder.parents:
                break
            folder = folder.parent
    return min(limits, default=None)


def usable_cores(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """Cores this process can run on: its CPU affinity (taskset, a cpuset), then capped by its cgroup's CPU quota
    rounded up. os.cpu_count() counts the whole machine, so under `taskset -c 0` on a 16-core box a run sized by it
    started 16 workers and 2 learner threads that all shared one core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(root, proc_cgroup)
    if limit is not None:
        cores = min(cores, math.ceil(limit))
    return max(1, cores)
