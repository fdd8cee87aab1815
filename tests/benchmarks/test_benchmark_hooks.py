"""The hook-cost benchmark runs both variants of this tree and prints their FPS and ratios."""

from __future__ import annotations

import json

import pytest

from benchmarks import benchmark_hooks


@pytest.mark.timeout(200)
def test_benchmark_hooks_small(tmp_path, capsys):
    out = tmp_path / "hooks.json"
    assert benchmark_hooks.main(["--seconds=3", "--repeats=1", f"--output={out}"]) == 0
    text = capsys.readouterr().out
    assert "no hooks" in text and "episode hook" in text and "ratio to no hooks" in text
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"no hooks", "episode hook"}
    assert results["no hooks"]["ratio_to_no_hooks"] == 1.0 and results["episode hook"]["median"] > 0


def test_counting_callbacks_counts():
    cb = benchmark_hooks.CountingCallbacks()
    assert cb.on_episode_end(type("E", (), {"length": 7})()) == {"hook_length": 7} and cb.episodes == 1
