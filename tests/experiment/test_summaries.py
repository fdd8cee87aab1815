"""The progress line (ProgressTracker.line): nothing meaningless while the workers start."""

from __future__ import annotations

import re

import pytest

import sample_factory.experiment.summaries as summaries
from sample_factory.config import parse_cfg
from sample_factory.experiment.summaries import ProgressTracker


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(summaries.time, "monotonic", lambda: now[0])
    return now


def test_line_says_warming_up_until_samples_arrive(clock):
    """It printed `FPS 10s/60s/300s: 0/0/0 ... ETA inf s` for as long as no sample had arrived."""
    progress = ProgressTracker(parse_cfg(["--env=CartPole-v1", "--train_for_env_steps=100000"]))
    clock[0] += 5
    assert progress.line() == "warming up: no samples collected yet | env steps: 0"
    progress.resume(0, 4096)  # a resumed run shows its counter, and still no FPS
    assert progress.line() == "warming up: no samples collected yet | env steps: 4096"
    progress.add_samples(0, 1000, [])
    clock[0] += 5
    line = progress.line()
    assert line.startswith("FPS 10s/60s/300s: ") and "inf" not in line, line
    assert re.search(r"env steps: 5096 \(5\.1%(, ETA \d+ s)?\)", line), line


def test_no_eta_while_stalled(clock):
    progress = ProgressTracker(parse_cfg(["--env=CartPole-v1", "--train_for_env_steps=100000"]))
    progress.add_samples(0, 1000, [])
    clock[0] += 60  # nothing in the last 10 s: the 10 s FPS is 0
    line = progress.line()
    assert "ETA" not in line and "env steps: 1000 (1.0%)" in line, line
