"""The supervisor's restart budget: --max_worker_restarts restarts of one worker within --worker_restart_window_sec
(a crash loop stops the run, crashes further apart do not add up), on a fake clock."""

from __future__ import annotations

import multiprocessing
import os
import time
from types import SimpleNamespace

import numpy as np
import psutil
import pytest

from sample_factory.config import parse_cfg
from sample_factory.envs.process_tree import LEFT_BEHIND_GRACE_SEC, descendants, running
from sample_factory.runtime import supervisor as supervisor_module
from sample_factory.runtime.component import ComponentKey
from sample_factory.runtime.supervisor import ChildProcess, Supervisor


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _DeadProcess:
    descendants: dict = {}

    def join(self, timeout: float) -> None:
        pass


def _supervisor(monkeypatch, *flags: str) -> tuple[Supervisor, _Clock, list[str]]:
    clock = _Clock()
    monkeypatch.setattr(supervisor_module, "time", clock)
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=2", *flags])
    buffers = SimpleNamespace(generation=np.zeros(cfg.num_workers, dtype=np.int64))
    lines: list[str] = []
    sup = Supervisor(cfg, multiprocessing.get_context("spawn"), None, buffers, None, lines.append)
    return sup, clock, lines


def _crash(sup: Supervisor, key: ComponentKey) -> str | None:
    sup.processes[key] = _DeadProcess()
    return sup._on_death(key, "exit code -9", stopping=False)


def test_sporadic_crashes_over_a_long_run_do_not_add_up(monkeypatch):
    sup, clock, lines = _supervisor(monkeypatch, "--max_worker_restarts=3", "--worker_restart_window_sec=600")
    actor = ComponentKey("actor", 1)
    for _ in range(20):  # one crash every 5 minutes: at most 2 restarts in any 10-minute window
        assert _crash(sup, actor) is None, lines
        clock.now += 301
    assert sup.restarts[actor] == 20 and sup.buffers.generation[1] == 20
    assert "restarting it (2 of 3 within 600 s)" in lines[-1]


def test_a_crash_loop_stops_the_run(monkeypatch):
    sup, clock, lines = _supervisor(monkeypatch, "--max_worker_restarts=3", "--worker_restart_window_sec=600")
    actor, other = ComponentKey("actor", 1), ComponentKey("policy", (0, 0))
    clock.now += 10_000  # an old crash (outside the window) does not count
    assert _crash(sup, actor) is None
    clock.now += 601
    for _ in range(3):
        assert _crash(sup, actor) is None
        assert _crash(sup, other) is None  # budgets are per worker
        clock.now += 30
    fatal = _crash(sup, actor)
    assert fatal is not None and fatal.startswith("actor 1 crashed 4 times in 90 s (exit code -9)"), fatal
    assert "--max_worker_restarts=3 reached (per --worker_restart_window_sec=600)" in fatal


def test_window_zero_counts_every_restart_of_the_run(monkeypatch):
    sup, clock, _ = _supervisor(monkeypatch, "--max_worker_restarts=2", "--worker_restart_window_sec=0")
    actor = ComponentKey("actor", 0)
    for _ in range(2):
        assert _crash(sup, actor) is None
        clock.now += 100_000
    fatal = _crash(sup, actor)
    assert fatal is not None and "crashed 3 times" in fatal and "--max_worker_restarts=2 reached" in fatal


@pytest.mark.parametrize("flag", ["--max_worker_restarts=-1", "--worker_restart_window_sec=-5"])
def test_negative_budget_or_window_is_refused(flag):
    with pytest.raises(SystemExit):
        parse_cfg(["--env=CartPole-v1", flag])


def test_a_worker_dying_as_the_run_stops_does_not_fail_it(monkeypatch):
    """Found by the chaos test: a policy worker killed just before the time limit, noticed in the pass that stops the
    run, made a finished run exit 1. A worker is not needed any more then; a learner is (its final checkpoint)."""
    sup, _, lines = _supervisor(monkeypatch)
    assert _crash_while_stopping(sup, ComponentKey("policy", (0, 0))) is None
    assert lines[-1] == "policy (0, 0) died while the run stops (exit code -9): not restarted"
    assert not sup.pending_restarts and ComponentKey("policy", (0, 0)) in sup.finished
    fatal = _crash_while_stopping(sup, ComponentKey("learner", 0))
    assert fatal is not None and fatal.startswith("learner 0 died (exit code -9")


def _crash_while_stopping(sup: Supervisor, key: ComponentKey) -> str | None:
    sup.processes[key] = _DeadProcess()
    return sup._on_death(key, "exit code -9", stopping=True)


def _start_with_server(seconds: str) -> None:
    """A component stand-in: starts a helper process (an env's server) and hangs."""
    import subprocess
    import time

    subprocess.Popen(["sleep", seconds])
    time.sleep(600)


def _is_server(procs: list[psutil.Process], seconds: str) -> bool:
    try:
        return len(procs) == 1 and procs[0].cmdline() == ["sleep", seconds]
    except psutil.Error:
        return False


def test_what_a_killed_worker_started_is_killed_after_a_grace(monkeypatch):
    """A worker killed during the run (silent, or in the way of its replacement) cannot stop the processes it
    started: they get LEFT_BEHIND_GRACE_SEC to exit by themselves (doom's watchdogs clean up after their engines),
    then the supervisor kills them, also after the worker's replacement took its place."""
    sup, clock, lines = _supervisor(monkeypatch)
    seconds = f"598.{os.getpid()}"  # the server's command line, ours alone
    proc = multiprocessing.get_context("spawn").Process(target=_start_with_server, args=(seconds,), name="sf_actor_1")
    proc.start()
    key = ComponentKey("actor", 1)
    try:
        child = ChildProcess(proc)
        deadline = time.monotonic() + 60
        # exec'd, not only forked: between fork and exec the child still has python's command line (seen under load)
        while not _is_server(servers := descendants(child.ps), seconds) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _is_server(servers, seconds), servers
        sup.processes[key] = child
        child.kill()
        proc.join(10)
        sup.replaced.append(child)  # as start() does when it replaces the killed worker
        sup.processes[key] = _DeadProcess()
        sup.end_left_behind()
        assert running(servers[0]), "killed before its grace"
        clock.now += LEFT_BEHIND_GRACE_SEC
        sup.end_left_behind()
        assert not running(servers[0])
        assert lines == [f"sf_actor_1 left 1 processes running: killed them (sleep {servers[0].pid})"]
        assert not child.descendants  # done with it: dropped from `replaced` at the next check
    finally:
        proc.kill()
        for p in psutil.process_iter(["cmdline"]):
            if p.info["cmdline"] == ["sleep", seconds]:
                p.kill()


def test_temp_folders_of_runs_that_died_whole_are_removed(tmp_path, monkeypatch):
    """kill -9 of a run's whole process group left its pymp-* folder (the fork server's stale socket) for good: no
    process of the run was left to remove it. The next run removes folders marked by a runner that is gone, and
    leaves a live runner's and other programs' alone."""
    import socket
    import subprocess
    import tempfile

    from sample_factory.runtime import supervisor

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    folders = {}
    for name, pid in (("dead", dead.pid), ("live", os.getppid()), ("other", None)):
        d = tmp_path / f"pymp-{name}"
        d.mkdir()
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(d / "listener-x"))  # the socket file a fork server leaves
        if pid is not None:
            (d / supervisor.RUN_MARKER).write_text(str(pid))
        folders[name] = d
    assert supervisor.remove_stale_temp_dirs() == [folders["dead"]]
    assert not folders["dead"].exists() and folders["live"].exists() and folders["other"].exists()
