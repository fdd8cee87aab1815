"""Two policies on CartPole, multi-process: both learners train and report, both checkpoint folders fill, and the
experience is split evenly between them (an env passes to the other policy at every episode start)."""

from __future__ import annotations

import re

import pytest

from sample_factory.experiment.checkpoints import list_checkpoints

_FINAL = re.compile(r"policy (\d): reward [-0-9.na]+, (\d+) episodes, (\d+) env steps")


@pytest.mark.timeout(240)
def test_two_policies_cartpole(tmp_path, train_run):
    run = train_run(
        ["--num_workers=2", "--num_policies=2", "--train_for_env_steps=200000", "--report_interval_sec=1"],
        tmp_path / "td",
    )
    assert run.wait(timeout=200) == 0, run.describe()
    final = {int(p): (int(e), int(n)) for p, e, n in _FINAL.findall(run.output)}
    assert set(final) == {0, 1}, run.describe()
    episodes = [e for e, _ in final.values()]
    assert min(episodes) >= 0.9 * max(episodes), final
    assert min(n for _, n in final.values()) > 0.25 * sum(n for _, n in final.values()), final
    for p in (0, 1):
        assert list_checkpoints(run.exp_dir / f"checkpoint_p{p}"), p
        assert (run.exp_dir / ".summary" / str(p)).is_dir()
    rows = run.progress_rows()
    assert rows and {"reward_p0", "reward_p1"} <= set(rows[-1])
    lags = re.findall(r"p(\d) lag min/avg/max", run.output)
    assert {"0", "1"} <= set(lags)  # both learners reported training stats
    run.assert_no_leftovers()
