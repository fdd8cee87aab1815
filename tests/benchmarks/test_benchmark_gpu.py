"""The GPU throughput script, run on the CPU with tiny budgets: rows, skips and failures land in the table."""

from __future__ import annotations

import json

import pytest

from benchmarks import benchmark_gpu


@pytest.mark.timeout(300)
def test_rows_and_failures(tmp_path, monkeypatch):
    out = tmp_path / "bench"
    argv = ["--device=cpu", "--num_workers=1", "--seconds=4", f"--output={out}", "--only=CartPole-v1 train, CPU"]
    assert benchmark_gpu.main(argv) == 0
    (row,) = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert row["case"] == "CartPole-v1 train, CPU" and row["frames_per_s_overall"] > 0
    assert "--device=cpu" in row["command"]
    assert "| CartPole-v1 train, CPU |" in out.with_suffix(".md").read_text()

    # A train.py that fails (an unknown flag value) is a failed row with its error, not a row of zeros.
    assert benchmark_gpu.main([*argv, "--rollout=-1"]) == 0
    (row,) = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert row["skipped"].startswith("failed: RuntimeError: train.py exited with"), row

    # A missing env package is listed as skipped.
    monkeypatch.setattr(benchmark_gpu.importlib.util, "find_spec", lambda name: None)
    assert benchmark_gpu.main([*argv[:-1], "--only=Pong raw"]) == 0
    (row,) = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert row["skipped"] == "ale_py not installed"
