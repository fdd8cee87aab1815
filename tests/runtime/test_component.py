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
