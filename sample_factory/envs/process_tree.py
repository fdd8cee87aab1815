"""The processes a process has started (env engines, simulator servers), and ending them when it cannot: one that is
killed (a component that did not stop in time, an env probe that hung) leaves its children running, reparented
away, where nothing else would end them. They are listed before the kill: psutil finds descendants by parent,
which they lose with it."""

from __future__ import annotations

import time

import psutil


def running(proc: psutil.Process) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for whoever reaps it: it holds nothing)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# What a killed process's descendants get to exit by themselves before they are killed too: doom's engine watchdogs
# and sweeper stop their engines and remove their /dev/shm files in about 5 s.
LEFT_BEHIND_GRACE_SEC = 10.0


def descendants(proc: psutil.Process | int | None) -> list[psutil.Process]:
    """Its children, theirs, ... now (`proc`: a process or a pid); none when it is gone."""
    try:
        return [] if proc is None else (psutil.Process(proc) if isinstance(proc, int) else proc).children(True)
    except psutil.Error:
        return []


def end_processes(procs: list[psutil.Process], grace: float) -> list[str]:
    """Give `procs` up to `grace` s to exit by themselves (their own clean-up), then kill the rest and wait for
    them. Returns "name pid" of those killed."""
    deadline = time.monotonic() + grace
    while any(map(running, procs)) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = []
    for p in filter(running, procs):
        try:
            name = p.name()
            p.kill()
            killed.append(f"{name} {p.pid}")
        except psutil.Error:
            pass
    deadline = time.monotonic() + 5.0
    while any(map(running, procs)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return killed
