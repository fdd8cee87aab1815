"""Per-process settings of a component: set_niceness (--default_niceness, --actor_worker_niceness) and denormal
flushing by role; a STOP that arrives while a component starts."""

from __future__ import annotations

import os

import pytest

from sample_factory.runtime import component
from sample_factory.runtime.messages import FreeSlots, Resend, Stop, decode


def _fake_priority(monkeypatch, current: int, allowed: bool) -> list[int]:
    calls: list[int] = []

    def setpriority(which, who, value):
        if not allowed:
            raise PermissionError("lowering needs CAP_SYS_NICE")
        calls.append(value)

    monkeypatch.setattr(component.os, "getpriority", lambda which, who: current)
    monkeypatch.setattr(component.os, "setpriority", setpriority)
    return calls


def test_sets_a_different_niceness_and_leaves_an_equal_one(monkeypatch):
    notes = []
    calls = _fake_priority(monkeypatch, current=0, allowed=True)
    component.set_niceness(10, lambda kind, payload: notes.append((kind, payload)))
    component.set_niceness(0, lambda kind, payload: notes.append((kind, payload)))
    assert calls == [10] and notes == []


def test_a_niceness_not_allowed_keeps_the_current_one_and_says_so(monkeypatch):
    notes = []
    _fake_priority(monkeypatch, current=5, allowed=False)
    component.set_niceness(-5, lambda kind, payload: notes.append((kind, payload)))
    assert notes == [("note", "niceness -5 not allowed (needs root or CAP_SYS_NICE): running at 5")]


class _Envs(component.Component):
    flushes_denormals = False  # as ActorWorker: its envs keep IEEE arithmetic


def _configured_flushes(result, keeps_ieee: bool) -> None:
    import torch

    from sample_factory.runtime.messages import LocalChannel

    comp = (_Envs if keeps_ieee else component.Component)(0, LocalChannel(), LocalChannel())
    before = float(torch.tensor([1e-39]) * 1.0)  # a denormal: kept by default
    component._configure_process(comp, runner_pid=-1)
    result.put((before, float(torch.tensor([1e-39]) * 1.0), torch.get_num_threads()))


@pytest.mark.parametrize("keeps_ieee", [False, True])
def test_learner_and_policy_processes_flush_denormals_actor_processes_do_not(keeps_ieee):
    """Learner and policy worker processes compute denormals as zero (Adam's moments of dead units would otherwise
    decay into x86's slow denormal arithmetic); actor workers, whose envs step in their threads, do not. Checked in
    a spawned process, as the runner starts them."""
    import multiprocessing as mp

    from sample_factory.workers.actor_worker import ActorWorker
    from sample_factory.workers.learner import Learner
    from sample_factory.workers.policy_worker import PolicyWorker

    assert not ActorWorker.flushes_denormals and Learner.flushes_denormals and PolicyWorker.flushes_denormals
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    p = ctx.Process(target=_configured_flushes, args=(result, keeps_ieee))
    p.start()
    try:
        before, after, threads = result.get(timeout=60)
    finally:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    assert before > 0 and threads == 1
    assert after == (before if keeps_ieee else 0.0)


class _SlowStart(component.Component):
    """An init of 5 steps that checks for STOP between them (as an actor between its envs); the runner's messages
    arrive during step `arrive_at`."""

    def __init__(self, arrive: list[tuple], arrive_at: int):
        from sample_factory.runtime.messages import LocalChannel

        super().__init__(0, LocalChannel(), LocalChannel())
        self.arrive, self.arrive_at = arrive, arrive_at
        self.steps_done, self.handled, self.finished = 0, [], False

    def init(self) -> None:
        for step in range(5):
            if step:
                self.raise_if_stopped()
            if step == self.arrive_at:
                for msg in self.arrive:
                    self.inbox.put(msg)
            self.steps_done += 1

    def on_message(self, msg) -> None:
        self.handled.append(msg)
        if len(self.handled) == 2:
            self.inbox.put(Stop.wire())

    def finish(self) -> None:
        self.finished = True


def _reports(comp: component.Component) -> list[str]:
    return [r[3] for r in comp.report.channel.get_many(block=False)]


def test_stop_during_init_ends_it_between_two_steps_as_an_orderly_stop():
    comp = _SlowStart([FreeSlots.wire([3], 0), Stop.wire()], arrive_at=1)
    assert component._serve(comp, 10.0, os.getpid(), terminated=[]) == 0
    assert comp.steps_done == 2 and not comp.initialized and comp.handled == []
    assert "started" not in _reports(comp) and "error" not in _reports(comp)


def test_messages_read_while_checking_for_stop_are_handled_after_init_in_order():
    """Other messages that arrive during init (a RESEND from the runner, returned slots) are not lost."""
    comp = _SlowStart([FreeSlots.wire([3], 0), Resend.wire()], arrive_at=2)
    assert component._serve(comp, 10.0, os.getpid(), terminated=[]) == 0
    assert comp.steps_done == 5 and comp.initialized
    assert comp.handled == [decode(FreeSlots.wire([3], 0)), decode(Resend.wire())]
    assert _reports(comp)[0] == "started"
