"""Two policies on CartPole, multi-process: both learners train and report, both checkpoint folders fill, and the
experience is split evenly between them (an env passes to the other policy at every episode start)."""

from __future__ import annotations

import re

import pytest
import torch

from sample_factory.experiment.checkpoints import list_checkpoints

BUDGET = 30_000  # env steps per policy: 7 updates of 4,096 samples each, some 1,000 episodes each
_FINAL = re.compile(r"policy (\d): reward [-0-9.na]+, (\d+) episodes, (\d+) env steps")


@pytest.mark.timeout(240)
def test_two_policies_cartpole(tmp_path, train_run):
    run = train_run(
        ["--num_workers=2", "--num_policies=2", f"--train_for_env_steps={BUDGET}", "--report_interval_sec=1"]
        + ["--lr_schedule=linear_decay", "--learning_rate=1e-3"],
        tmp_path / "td",
    )
    assert run.wait(timeout=200) == 0, run.describe()
    final = {int(p): (int(e), int(n)) for p, e, n in _FINAL.findall(run.output)}
    assert set(final) == {0, 1}, run.describe()
    # The budget is per policy (as in Sample Factory), and each learning rate decays over it: both end near 0
    # (with a budget for all policies together, each stopped at about half of it, its lr at about half of 1e-3).
    assert all(n >= BUDGET for _, n in final.values()), final
    assert f"reached {BUDGET} env steps per policy" in run.output
    for p in (0, 1):
        last = list_checkpoints(run.exp_dir / f"checkpoint_p{p}")[-1]
        lr = torch.load(last, weights_only=False)["algo"]["optimizer"]["param_groups"][0]["lr"]
        assert lr < 0.25e-3, (p, lr)
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
