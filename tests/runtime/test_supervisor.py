"""The supervisor's restart budget: --max_worker_restarts restarts of one worker within --worker_restart_window_sec
(a crash loop stops the run, crashes further apart do not add up), on a fake clock."""

from __future__ import annotations

import multiprocessing
from types import SimpleNamespace

import numpy as np
import pytest

from sample_factory.config import parse_cfg
from sample_factory.runtime import supervisor as supervisor_module
from sample_factory.runtime.component import ComponentKey
from sample_factory.runtime.supervisor import Supervisor


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _DeadProcess:
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
