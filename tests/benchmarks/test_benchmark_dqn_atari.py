"""benchmarks/benchmark_dqn_atari.py: the DQN rates come from the learning iterations only (the fill-up before
--learning_starts is not counted), over the time they took."""

from __future__ import annotations

import pytest

from benchmarks.benchmark_dqn_atari import learner_rates


def rows(*spec):
    return [{"t": t, "samples": n, "sgd_steps": s, "replay_size": 0} for t, n, s in spec]


def test_rates_over_the_learning_iterations():
    # filling (t 1, 2), then learning iterations ending at t 6 and 10: 2,048 added, 24 steps of 256 in 8 s
    r = learner_rates(rows((1.0, 1024, 0), (2.0, 1024, 0), (6.0, 1024, 16), (10.0, 1024, 8)), batch_size=256)
    assert r["window_s"] == pytest.approx(8.0) and r["iterations"] == 2
    assert r["added_per_s"] == pytest.approx(2048 / 8) and r["replayed_per_s"] == pytest.approx(24 * 256 / 8)
    # a first row that learned already: measured from its end
    r = learner_rates(rows((1.0, 1024, 16), (3.0, 1024, 16)), batch_size=256)
    assert r["window_s"] == pytest.approx(2.0) and r["replayed_per_s"] == pytest.approx(16 * 256 / 2)


def test_no_learning_iteration_gives_zero_rates():
    assert learner_rates(rows((1.0, 1024, 0), (2.0, 1024, 0)), batch_size=256)["iterations"] == 0
    assert learner_rates(rows((1.0, 1024, 16)), batch_size=256)["iterations"] == 0
