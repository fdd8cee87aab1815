"""set_niceness: a component process's priority (--default_niceness, --actor_worker_niceness)."""

from __future__ import annotations

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


def _configured_flushes(result) -> None:
    import torch

    from sample_factory.runtime.messages import LocalChannel

    comp = component.Component(0, LocalChannel(), LocalChannel())
    before = float(torch.tensor([1e-39]) * 1.0)  # a denormal: kept by default
    component._configure_process(comp, runner_pid=-1)
    result.put((before, float(torch.tensor([1e-39]) * 1.0), torch.get_num_threads()))


def test_component_processes_flush_denormals():
    """Every component process computes denormals as zero (Adam's moments of dead units would otherwise decay into
    x86's slow denormal arithmetic); checked in a spawned process, as the runner starts them."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    p = ctx.Process(target=_configured_flushes, args=(result,))
    p.start()
    try:
        before, after, threads = result.get(timeout=60)
    finally:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    assert before > 0 and after == 0.0 and threads == 1
