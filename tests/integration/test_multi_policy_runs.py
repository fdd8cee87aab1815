"""Two policies on CartPole, multi-process: both learners train and report, both checkpoint folders fill, and the
experience is split roughly evenly between them (split rotation)."""

from __future__ import annotations

import re

import pytest

from sample_factory.checkpoint import list_checkpoints

_FINAL = re.compile(r"policy (\d): reward [-0-9.na]+, \d+ episodes, (\d+) env steps")


@pytest.mark.timeout(240)
def test_two_policies_cartpole(tmp_path, train_run):
    run = train_run(
        ["--num_workers=2", "--num_policies=2", "--train_for_env_steps=200000", "--report_interval_sec=1"],
        tmp_path / "td",
    )
    assert run.wait(timeout=200) == 0, run.describe()
    steps = {int(p): int(n) for p, n in _FINAL.findall(run.output)}
    assert set(steps) == {0, 1}, run.describe()
    assert min(steps.values()) > 0.4 * sum(steps.values()), steps
    for p in (0, 1):
        assert list_checkpoints(run.exp_dir / f"checkpoint_p{p}"), p
        assert (run.exp_dir / ".summary" / str(p)).is_dir()
    rows = run.progress_rows()
    assert rows and {"reward_p0", "reward_p1"} <= set(rows[-1])
    lags = re.findall(r"p(\d) lag min/avg/max", run.output)
    assert {"0", "1"} <= set(lags)  # both learners reported training stats
    run.assert_no_leftovers()
