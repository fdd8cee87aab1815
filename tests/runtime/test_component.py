"""Per-process settings of a component: set_niceness (--default_niceness, --actor_worker_niceness) and denormal
flushing by role."""

from __future__ import annotations

import pytest

from sample_factory.runtime import component


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
