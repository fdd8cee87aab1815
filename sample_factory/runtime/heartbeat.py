"""Liveness: heartbeats sent by every component, the runner-side monitor, and process identity (names that
`ps`/psutil show, parent-death signal)."""

from __future__ import annotations

import ctypes
import faulthandler
import io
import os
import signal
import time
from typing import Any, NamedTuple

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def _prctl(option: int, arg) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: names and death signals are best effort
        pass


def set_process_name(name: str) -> None:
    """Shown by `ps -o comm`, `top` and psutil.Process.name() (15 chars max)."""
    _prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


def die_with_parent() -> None:
    """The kernel sends SIGTERM to this process when its parent dies, even when the parent was SIGKILLed (also
    when it is re-parented later: ask for it only where the parent is the process to follow)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Heartbeat:
    """Sends ('heartbeat', activity) reports at most every `interval` seconds."""

    def __init__(self, report, interval: float):
        self.report, self.interval = report, interval
        self.last = 0.0

    def beat(self, activity: str) -> None:
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self.report("heartbeat", activity)


class Seen(NamedTuple):
    time: float  # time.monotonic() of the last report
    activity: str  # the last activity a heartbeat named


class HeartbeatMonitor:
    """Runner side: remembers when each (role, index) was last heard from and what it was doing."""

    STARTING = "starting"  # the activity of a process whose init (envs, model) has not finished yet

    def __init__(self, timeout: float, startup_timeout: float | None = None):
        self.timeout = timeout
        # Init sends no heartbeats and may be slow on a loaded machine (torch import, env creation): a process still
        # starting gets at least this long before it counts as hung.
        self.startup_timeout = max(timeout, startup_timeout if startup_timeout is not None else 30.0)
        self.last_seen: dict[Any, Seen] = {}  # keyed by component key

    def seen(self, who: tuple, activity: str = "") -> None:
        self.last_seen[who] = Seen(time.monotonic(), activity or self.last_activity(who, default=""))

    def last_activity(self, who: tuple, default: str = "unknown") -> str:
        seen = self.last_seen.get(who)
        return default if seen is None else seen.activity

    def forget(self, who: tuple) -> None:
        self.last_seen.pop(who, None)

    def stale(self) -> list[tuple[Any, float, str]]:
        now = time.monotonic()
        return [
            (who, now - s.time, s.activity)
            for who, s in self.last_seen.items()
            if now - s.time > (self.startup_timeout if s.activity == self.STARTING else self.timeout)
        ]


def process_alive(pid: int) -> bool:
    """Children are forked by the fork server, not the runner, so the parent-death signal does not cover a
    SIGKILLed runner: children poll the runner's pid instead. A zombie is dead: a killed runner whose parent has
    not reaped it yet (a notebook's Popen, a container whose PID 1 does not reap) still answers `kill(pid, 0)`."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (or not readable): the signal probe
        pass
    else:
        return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")  # the state after "(comm)"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dump_stacks(pid: int, wait: float = 0.5) -> None:
    """Ask process `pid` to print its threads' stacks to its stderr (SIGUSR1: `enable_stack_dumps`) and give it
    `wait` seconds to do so. faulthandler answers from a C signal handler, so a process stuck in C code (a held
    lock, a CUDA call) prints too; a stopped one (SIGSTOP) does not. Only for a process about to be killed: where
    stack dumps are not enabled, SIGUSR1 ends it."""
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return
    time.sleep(wait)


def enable_stack_dumps() -> None:
    """Crashes print every thread's stack; SIGUSR1 prints them on demand (docs/troubleshooting.md). Skipped when
    stderr is not a real file (e.g. captured by a test runner)."""
    try:
        faulthandler.enable()
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (io.UnsupportedOperation, AttributeError, ValueError):
        pass
