"""The runner's liveness check: a process still starting (init sends no heartbeats) gets the startup timeout, one that
has started gets --heartbeat_timeout_sec."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

from sample_factory.runtime import heartbeat
from sample_factory.runtime.heartbeat import HeartbeatMonitor


def test_starting_processes_get_the_startup_timeout(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(heartbeat.time, "monotonic", lambda: now[0])
    m = HeartbeatMonitor(timeout=4.0, startup_timeout=30.0)
    m.seen(("learner", 0), "starting")
    m.seen(("actor", 1), "starting")
    m.seen(("actor", 1), "stepping envs")  # its first heartbeat after init
    now[0] += 10.0
    assert [(who, act) for who, _, act in m.stale()] == [(("actor", 1), "stepping envs")]
    now[0] += 25.0
    assert {who for who, _, _ in m.stale()} == {("learner", 0), ("actor", 1)}
    assert HeartbeatMonitor(timeout=90.0).startup_timeout == 90.0  # never shorter than the heartbeat timeout


def test_a_zombie_is_not_alive():
    """A SIGKILLed runner that its parent has not reaped is a zombie: `kill(pid, 0)` still succeeds, and its
    components went on training. process_alive reads the process state instead."""
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert heartbeat.process_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE
        assert not heartbeat.process_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not heartbeat.process_alive(child.pid)
    assert heartbeat.process_alive(os.getpid())
