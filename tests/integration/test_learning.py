"""The classic-control preset solves CartPole-v1 within 300k env steps with 2 workers."""

from __future__ import annotations

import math

import pytest

from tests.integration.conftest import progress_samples_trained

BUDGET = 300_000
TARGET_REWARD = 450.0


@pytest.mark.timeout(400)
def test_learning(tmp_path, train_run):
    run = train_run(["--num_workers=2", f"--train_for_env_steps={BUDGET}", "--report_interval_sec=1"], tmp_path / "td")
    rc = run.wait(timeout=380)
    assert rc == 0, run.describe()
    assert (progress_samples_trained(run) or 0) > 0, run.describe()

    curve = [(int(r["env_steps"]), float(r["reward_p0"])) for r in run.progress_rows()]
    within = [(s, r) for s, r in curve if s <= BUDGET and not math.isnan(r)]
    best = max((r for _, r in within), default=float("nan"))
    shown = ", ".join(f"{s}:{r:.0f}" for s, r in curve)
    assert best >= TARGET_REWARD, f"best mean reward {best:.1f} < {TARGET_REWARD} within {BUDGET} steps; curve {shown}"
    run.assert_no_leftovers()
