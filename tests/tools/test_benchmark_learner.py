"""The training-step benchmark runs every variant and prints a ratio for each."""

from __future__ import annotations

import re

from sample_factory.tools import benchmark_learner


def test_prints_every_variant(capsys):
    assert benchmark_learner.main(["--batch=4", "--rounds=1"]) == 0
    out = capsys.readouterr().out
    for name in benchmark_learner.VARIANTS:
        assert re.search(rf"{name}\s+median\s+[\d.]+ ms .* speed-up [\d.]+x", out), out
    assert "speed-up 1.00x" in out  # the NCHW fp32 baseline
